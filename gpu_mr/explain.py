"""Human-readable plan of a checked query: ``gpu_mr.compile(...).explain()``.

Shows the pattern after desugaring, the NFA program, each DEFINE with
whether it is row-local (a mask the fast engines compute once per row) or
depends on the match so far (needs the register fallback), the measures
with their types, the output columns and the engine ``auto`` would pick.
"""

from __future__ import annotations

from . import engines
from .analysis import CheckedQuery, _history_dependent
from .pattern.dfa import Dfa, DfaTooLarge
from .pattern.nfa import compile_nfa, desugar

# Exploring every class is 2^variables steps per state; past this many
# variables explain() does not build the DFA ahead of the data.
_EXPLAIN_MAX_VARS = 10


def explain(query: CheckedQuery, schema_known: bool = True) -> str:
    program = compile_nfa(query.pattern, query.primary_vars)
    lines = [f"pattern: {query.pattern.to_sql()}"]
    expanded = desugar(query.pattern).to_sql()
    if expanded != query.pattern.to_sql():
        lines.append(f"desugared: {expanded}")
    lines.append(f"variables: {', '.join(query.primary_vars) or '(none)'}")
    for name, members in query.subsets.items():
        lines.append(f"subset {name} = ({', '.join(members)})")
    lines.append("define:")
    for name in query.primary_vars:
        expr = query.defines.get(name)
        if expr is None:
            lines.append(f"  {name}: TRUE (not in DEFINE)")
            continue
        kind = "depends on the match so far" if _history_dependent(expr, name) else "row-local"
        lines.append(f"  {name}: {expr.to_sql()}  [{kind}]")
    lines.append(f"rows per match: {query.rows_per_match}"
                 + ("" if query.rows_per_match == "ONE" else f" ({query.empty_matches})"))
    lines.append(f"after match: {query.skip.to_sql()}")
    if query.mode is not None:
        mode = "ALL MATCHES" if query.mode == "ALL" else query.mode + " MATCH"
        lines.append(f"matching mode: {mode} (the 2007 proposal's; see docs/semantics.md)")
    if query.time_limit is not None:
        lines.append(f"time limit: {query.time_limit.to_sql()} on {query.time_column}")
    if query.match_filter is not None:
        lines.append(f"condition on the whole match: {query.match_filter.to_sql()}")
    lines.append("measures:" if query.measures else "measures: (none)")
    for m in query.measures:
        type_name = "(type known with a schema)" if m.type.kind == "UNKNOWN" else m.type.sql_name()
        lines.append(f"  {m.name} {type_name} = {m.expr.to_sql()}" + (
            _measure_path(query, m) if schema_known else ""))
    if schema_known:
        lines.append("output: " + ", ".join(f"{f.name} {f.type}" for f in query.output_schema))
    else:
        lines.append("output: (column types known once a table or schema is given)")
    lines.append(f"nfa: {len(program.insts)} states")
    lines += ["  " + line for line in program.dump().splitlines()]
    lines.append("dfa: " + _dfa_summary(query, program))
    lines += _engine_lines(query, schema_known)
    return "\n".join(lines)


def _measure_path(query: CheckedQuery, m) -> str:
    """How the fast engines compute a measure: over whole arrays, or by the
    interpreter per output row (and why)."""
    from .measures import vectorised_reason
    try:
        reason = vectorised_reason(query, m.expr)
    except Exception as exc:        # explain() must not fail on a plan it cannot judge
        reason = f"{type(exc).__name__}"
    return "  [vectorised]" if reason is None else f"  [per output row: {reason}]"


def _engine_lines(query: CheckedQuery, schema_known: bool) -> list:
    """Which engine ``auto`` picks, why faster ones decline, and the path
    the chosen one takes."""
    chosen = engines.choose(query, "auto").name
    declined, caveat = [], []
    for name in ("gpu", "cpu"):
        if name == chosen:
            break
        engine = engines._AVAILABLE[name]
        reason = engines.auto_skips(engine) or engine.supports(query)
        if not schema_known and reason and "compiled without data" in reason:
            # Masks are typed against the input's columns: with no schema yet,
            # say what will run once the columns are known.
            chosen = name
            caveat = ["  (the DEFINE masks are checked against the input's column types "
                      "when data arrives; give a schema to check now)"]
            break
        declined.append(f"  {name}: not used: {reason}")
    lines = [f"engine (auto): {chosen}"] + caveat + declined
    if chosen == "cpu":
        lines += ["  path: " + line for line in _cpu_path(query)]
    elif chosen == "gpu":
        lines += ["  path: " + line for line in _gpu_path(query)]
    return lines


def _gpu_path(query: CheckedQuery) -> list:
    from .engines.cpu import choose_path
    if choose_path(query)[0] == "registers":
        from .engines.gpu import REGISTERS_MIN_PARTITIONS
        from .engines.gpu_registers import device_registers_reason
        reason = device_registers_reason(query)
        if reason is None:
            return ["the register machine on the device, one thread per partition (the "
                    f"DEFINEs read the match so far; under {REGISTERS_MIN_PARTITIONS:,} "
                    "partitions the CPU engine's, which runs them on all cores, finishes "
                    "first and runs instead); measures on the host"]
        return [f"the CPU engine's register machine (the DEFINEs read the match so far; "
                f"not on the device: {reason})"]
    lines = ["DEFINE masks on the device where the device mask compiler covers them, else "
             "on the host; class ids bit-packed on the device",
             "leftmost-first DFA scan as numba.cuda kernels: speculative chunks of every "
             "partition with boundary repair, matches compacted by prefix sums; path "
             "recovery one thread per match"]
    reason = engines._AVAILABLE["gpu"].pipeline_reason(query, query.input_schema)
    if reason is None:
        from .device_measures import device_output_reason
        kept = device_output_reason(query)
        return ["every stage on the device: only the columns the query reads move there "
                "(none from a cuDF frame without NULLs), sorted there unless already in "
                "order; ONE ROW measures one thread per match; per-match results come "
                "back" + (" (for a cuDF frame they stay there, a cuDF result built on the "
                          "device, where the partition keys are numbers, booleans or "
                          "timestamps)" if kept is None else
                          f" (also for a cuDF frame: {kept})")] + lines
    return lines + [f"sort and measures on the host: {reason}"]


def _cpu_path(query: CheckedQuery) -> list:
    from .engines.cpu import choose_path
    if choose_path(query)[0] == "registers":
        return ["register machine: NFA simulation in preferment order whose threads carry "
                "registers (last rows, running aggregates) for the DEFINEs that read the "
                "match so far, compiled per query shape (plain Python for a shape's first "
                "20,000 rows of small inputs); ranges of partitions on all cores; in a stream, "
                "batch by batch, a search under way at a batch's end carried to the next"
                + _masked_parts(query)]
    from .predicates import fused
    masked = [v for v in query.primary_vars if v in query.defines]
    free = [v for v in query.primary_vars if v not in query.defines]
    first = "DEFINE masks for " + (", ".join(masked) if masked else "no variable")
    if free:
        first += f" ({', '.join(free)} always true)"
    declined = fused.supports(query)
    if declined is None:
        first += ", in one compiled pass over the rows into per-row classes"
    elif "compiled without data" in declined:
        first += (", in one compiled pass into per-row classes where the columns' types "
                  "allow (integers, doubles, booleans), else vectorised numpy passes")
    else:
        first += (", as vectorised numpy passes bit-packed into per-row classes (not one "
                  f"compiled pass: {declined})")
    if query.skip.kind == "PAST_LAST_ROW" and query.time_limit is None:
        scan = ("unanchored leftmost-first DFA scan over the classes present, one step per "
                "row, partitions in parallel, four at a time per core (the long ones first); a "
                "partition wider than a quarter of a core's share of the rows in speculative "
                "chunks on all cores, each replayed "
                "from where the one before it left until the two scans agree (in a stream, "
                "whole partitions per batch, a search under way at a batch's end scanned "
                "again from where it began; the anchored scan instead for an automaton past "
                "its cap)")
        recovery = ("each match's start and path (which variable each row took) by one "
                    "backward walk over the automaton's thread lineage, one job per match")
        from .measures import walk_decided_extremes, walk_labels_reason
        why = walk_labels_reason(query)
        if why is None:
            recovery += ("; the ONE ROW measures are computed during that walk or from the "
                         "match's rows, and no per-row labels are written")
            decided = walk_decided_extremes(query)
            if decided:
                recovery += ("; " + ", ".join(decided) + " (its DEFINE orders those rows: "
                             "no key compared)")
        elif query.rows_per_match == "ONE":
            recovery += f"; per-row labels are written for the measure {why}"
    else:
        scan = ("leftmost-first DFA scan over the classes present, a search from each "
                "candidate start row, partitions in parallel")
        recovery = ("path recovery (which variable each row took) from the DFA's thread "
                    "lineage, one job per match")
    if query.time_limit is not None:
        scan += (f"; each search stops at the first row out of time ({query.time_limit.to_sql()}"
                 f" on {query.time_column}), a per-row horizon computed on the host")
    return [first, scan + "; the DFA is built lazily (beyond its state cap, or where a "
            "DEFINE raises at some row, the reference matcher runs instead)", recovery]


def _masked_parts(query: CheckedQuery) -> str:
    """The register machine's row-local parts read as columns, as text."""
    from .engines import registers
    parts = [f"{e.to_sql()} ({where})" for where, e in registers.masked_parts(query)]
    if not parts:
        return ""
    return ("; read as columns evaluated once for all rows by vectorised passes, as they "
            "hold values registers do not (strings, timestamps, decimals): " + ", ".join(parts))


def _dfa_summary(query: CheckedQuery, program) -> str:
    if query.history_dependent:
        return "none (a DEFINE depends on the match so far: NFA simulation with registers)"
    if query.mode is not None:
        return "none (the matching mode needs NFA simulation)"
    n = len(query.primary_vars)
    if n > _EXPLAIN_MAX_VARS:
        return f"built lazily on the classes the data holds ({n} variables)"
    dfa = Dfa(program)
    try:
        states = dfa.explore(range(1 << n))
    except DfaTooLarge as exc:
        return f"too large ({exc}): NFA simulation"
    return (f"{states - 1} states over {1 << n} classes (which of the {n} variables hold "
            f"at a row)")
