"""Render a JSON report of ``run.py`` as Markdown (for docs/benchmarks.md).

Usage::

    python benchmarks/report.py benchmarks/results/cpu-2026-01-01-x86_64-2cpu-quick.json
"""

from __future__ import annotations

import json
import sys


def fmt_rate(x) -> str:
    """Rows per second in short form (12.3M); "-" for none. Shared with run.py."""
    if x is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.0f}"


def render(report: dict) -> str:
    env = report["environment"]
    engines = [e for e in report["engines"] if e != "reference"]
    out = [f"Command: `{report['command']}`", "",
           f"Machine: {env['host_kind']} ({env.get('cpu_model') or 'unknown CPU'}); "
           f"Python {env['python']}, numpy {env['numpy']}, pyarrow {env['pyarrow']}, "
           f"numba {env.get('numba')}; gpu_mr commit {env.get('git') or 'unknown'}; "
           f"run started {report['started_utc']}, took {report['elapsed_seconds']:.0f} s; "
           f"load average at the end (1/5/15 min): "
           f"{env.get('load_average_1_5_15_min') or 'unknown'}.", ""]
    s = report["settings"]
    out += [f"Reference engine on the first {s['ref_rows']:,} rows of each dataset; "
            f"{', '.join(engines)} on the whole dataset, best of {s['repeat']}.", ""]
    head = ["rows", "partitions", "query"]
    for e in engines:
        head += [f"{e} rows/s", f"{e} best s", f"{e} first s"]
    head += ["reference rows/s", "out rows"] + [f"{e} vs ref" for e in engines] + ["identical"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in report["results"]:
        row = [f"{rec['rows']:,}", f"{rec['partitions']:,}", rec["query"]]
        first_ok = None
        for e in engines:
            res = rec["engines"].get(e, {})
            if res.get("status") == "ok":
                row += [fmt_rate(res["rows_per_s"]), f"{res['seconds']:.3f}",
                        f"{res['all_seconds'][0]:.3f}"]
                first_ok = first_ok or res
            else:
                row += [res.get("status", "-"), "-", "-"]
        ref = rec["engines"].get("reference", {})
        row.append(fmt_rate(ref["rows_per_s"]) if ref.get("status") == "ok" else
                   ref.get("status", "-"))
        row.append(f"{first_ok['output_rows']:,}" if first_ok else "-")
        for e in engines:
            res = rec["engines"].get(e, {})
            row.append(f"{res['vs_reference']:.0f}x" if "vs_reference" in res else "-")
        sub = rec.get("subset")
        row.append("-" if not sub else ("yes" if sub["identical"] else "no"))
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    firsts = report.get("first_call_seconds") or {}
    if firsts:
        out.append("First call per engine/query (includes JIT compilation): "
                   + ", ".join(f"{k} {v:.2f} s" for k, v in firsts.items() if v is not None)
                   + ".")
        out.append("")
    ratio = report.get("numpy_ratio")
    if ratio:
        res = ratio["result"]
        if res["status"] == "ok":
            out.append(f"Numpy ratio: `match_recognize(engine=\"cpu\")`, query `{ratio['query']}`, "
                       f"{ratio['rows']:,} pre-sorted rows in {ratio['partitions']} partitions: "
                       f"{res['seconds']:.3f} s (best of {len(res['all_seconds'])}); one numpy "
                       f"pass `p[1:] < p[:-1]`: {ratio['numpy_seconds'] * 1e3:.2f} ms; "
                       f"**ratio {ratio['ratio']:.0f}x**.")
        else:
            out.append(f"Numpy ratio: {res['status']}: {res.get('reason')}")
        out.append("")
    for m in report.get("memory") or []:
        if m.get("status") == "ok":
            out.append(f"Memory ({m['mode']}, {m['rows']:,} rows, one partition, query "
                       f"`{m['query']}`): input {m['input_bytes'] / 2**20:,.0f} MiB, peak RSS "
                       f"growth {m['peak_growth_bytes'] / 2**20:,.0f} MiB = "
                       f"**{m['growth_per_input_byte']:.2f}x the input** ({m['method']}; "
                       f"{m['seconds']:.1f} s).")
        else:
            out.append(f"Memory ({m['mode']}, {m['rows']:,} rows): {m.get('status')}: "
                       f"{m.get('reason')}")
        out.append("")
    out += ["Summary printed by the runner:", "", "```"] + report["summary"] + ["```"]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            report = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
