"""Every conformance case (tests/conformance/*.yaml) on every engine that exists."""

from __future__ import annotations

import pytest

from gpu_mr.engines import _AVAILABLE
from gpu_mr.errors import GpuMrError, UnsupportedError

from conformance_cases import compare_result, load_cases, run_case

CASES = load_cases()
ENGINES = sorted(_AVAILABLE)


def test_case_files_are_well_formed():
    names = set()
    for case in CASES:
        spec = case.spec
        assert case.id not in names, f"duplicate case {case.id}"
        names.add(case.id)
        assert sum(k in spec for k in ("query", "sql", "esl")) == 1, \
            f"{case.id}: exactly one of query/sql/esl"
        assert ("expected" in spec) != ("error" in spec), f"{case.id}: one of expected/error"
    assert len(CASES) >= 200


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(case, engine):
    xfail = (case.spec.get("xfail") or {}).get(engine)
    if xfail:
        pytest.xfail(xfail)
    spec = case.spec
    if "error" in spec:
        want = spec["error"]
        with pytest.raises(GpuMrError) as info:
            run_case(case, engine)
        err = info.value
        if isinstance(err, UnsupportedError) and err.engine == engine != "reference":
            pytest.xfail(f"{engine} cannot run it: {err.construct}")
        assert err.kind == want["kind"], f"{err.kind} error ({err}) but expected {want['kind']}"
        if "contains" in want:
            assert str(want["contains"]).lower() in str(err).lower(), str(err)
        if "line" in want:
            assert getattr(err, "line", None) == want["line"], str(err)
        if "column" in want:
            assert getattr(err, "column", None) == want["column"], str(err)
        return
    try:
        result = run_case(case, engine)
    except UnsupportedError as exc:
        if engine == "reference" or exc.engine != engine:
            raise
        pytest.xfail(f"{engine} cannot run it: {exc.construct}")
    if not hasattr(result, "schema"):
        import pyarrow as pa
        result = pa.Table.from_pandas(result, preserve_index=False)
    problem = compare_result(result, spec["expected"])
    assert problem is None, problem
