"""Loading and checking the data-file conformance cases (tests/conformance/).

The format is described in tests/conformance/README.md. This module turns a
case into Arrow input, runs it through the public API and compares the result
with the expected rows; test_conformance.py runs every case on every engine.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import yaml

import gpu_mr

CASE_DIR = Path(__file__).parent / "conformance"


@dataclass
class Case:
    file: str
    name: str
    spec: dict
    tables: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"


def load_cases() -> list:
    cases = []
    for path in sorted(CASE_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        tables = doc.get("tables") or {}
        for spec in doc.get("cases") or []:
            cases.append(Case(path.stem, spec["name"], spec, tables))
    return cases


def parse_type(text: str) -> pa.DataType:
    text = text.strip().lower()
    m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", text)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    m = re.fullmatch(r"list<(.+)>", text)
    if m:
        return pa.list_(parse_type(m.group(1)))
    simple = {"int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
              "double": pa.float64(), "string": pa.string(), "bool": pa.bool_(),
              "boolean": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us"),
              "int": pa.int64(), "bigint": pa.int64(), "varchar": pa.string()}
    if text not in simple:
        raise ValueError(f"unknown type {text!r} in a conformance file")
    return simple[text]


def convert(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        if isinstance(value, dt.datetime):
            return value
        return dt.datetime.fromisoformat(str(value))
    if pa.types.is_date(t):
        if isinstance(value, dt.date):
            return value
        return dt.date.fromisoformat(str(value))
    if pa.types.is_decimal(t):
        return Decimal(str(value))
    if pa.types.is_floating(t):
        return float(value)
    if pa.types.is_string(t):
        return str(value)
    if pa.types.is_list(t):
        return [convert(v, t.value_type) for v in value]
    return value


def build_table(spec: dict) -> pa.Table:
    names, types = [], []
    for col in spec["columns"]:
        name, _, type_text = col.strip().partition(" ")
        names.append(name.strip('"'))
        types.append(parse_type(type_text))
    rows = spec.get("rows") or []
    arrays = []
    for i, (name, t) in enumerate(zip(names, types)):
        arrays.append(pa.array([convert(r[i], t) for r in rows], t))
    return pa.Table.from_arrays(arrays, names=names)


def case_table(case: Case, name: Optional[str] = None) -> pa.Table:
    spec = case.spec
    if name is not None:
        return build_table(case.tables[name])
    if "input" in spec:
        return build_table(spec["input"])
    return build_table(case.tables[spec["table"]])


def run_case(case: Case, engine: str):
    spec = case.spec
    if "esl" in spec:
        used = spec.get("tables_used") or {}
        tables = {name: case_table(case, table_name) for name, table_name in used.items()}
        return gpu_mr.esl(spec["esl"], engine=engine, **tables)
    if "sql" in spec:
        used = spec.get("tables_used") or {}
        if not used and "table" in spec:
            used = {"t": spec["table"]}
        tables = {sql_name: case_table(case, table_name) for sql_name, table_name in used.items()}
        if "input" in spec:
            tables.setdefault("t", build_table(spec["input"]))
        return gpu_mr.sql(spec["sql"], engine=engine, **tables)
    return gpu_mr.match_recognize(case_table(case), spec["query"], engine=engine)


def _norm(value: Any, t: Optional[pa.DataType] = None) -> Any:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, Decimal):
        return value.normalize()
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def values_equal(actual: Any, expected: Any) -> bool:
    if actual is None or expected is None:
        return actual is None and expected is None
    if isinstance(actual, list) and isinstance(expected, list):
        return len(actual) == len(expected) and all(
            values_equal(a, e) for a, e in zip(actual, expected))
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected or actual == expected and type(actual) is type(expected)
    if isinstance(actual, float) or isinstance(expected, float):
        try:
            a, e = float(actual), float(expected)
        except (TypeError, ValueError):
            return False
        if math.isnan(a) or math.isnan(e):
            return math.isnan(a) and math.isnan(e)
        return math.isclose(a, e, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(actual, Decimal):
        try:
            return actual == Decimal(str(expected))
        except Exception:
            return False
    if isinstance(actual, dt.datetime):
        exp = expected if isinstance(expected, dt.datetime) else dt.datetime.fromisoformat(
            str(expected))
        return actual.replace(tzinfo=None) == exp.replace(tzinfo=None)
    if isinstance(actual, dt.date):
        exp = expected if isinstance(expected, dt.date) else dt.date.fromisoformat(str(expected))
        return actual == exp
    return actual == expected


def compare_result(result: pa.Table, expected: dict) -> Optional[str]:
    """None if ``result`` matches ``expected``, else a description of the difference."""
    want_cols = [str(c) for c in expected["columns"]]
    if result.column_names != want_cols:
        return f"columns {result.column_names} != expected {want_cols}"
    if "types" in expected:
        want_types = [parse_type(t) for t in expected["types"]]
        got = [f.type for f in result.schema]
        for name, g, w in zip(want_cols, got, want_types):
            if not _type_matches(g, w):
                return f"column {name} has type {g}, expected {w}"
    # column-wise: output column names may repeat (an ORDER BY key listed twice)
    rows = list(zip(*[col.to_pylist() for col in result.columns])) if result.num_columns else []
    want = [tuple(r) for r in (expected.get("rows") or [])]
    if len(rows) != len(want):
        return (f"{len(rows)} rows != expected {len(want)}\n got: {rows}\nwant: {want}")
    if expected.get("ordered", False):
        for i, (g, w) in enumerate(zip(rows, want)):
            if not _row_equal(g, w):
                return f"row {i}: {g} != expected {w}\n got: {rows}\nwant: {want}"
        return None
    remaining = list(rows)
    for w in want:
        for i, g in enumerate(remaining):
            if _row_equal(g, w):
                del remaining[i]
                break
        else:
            return f"expected row {w} not found\n got: {rows}\nwant: {want}"
    return None


def _row_equal(got: tuple, want: tuple) -> bool:
    return len(got) == len(want) and all(values_equal(g, w) for g, w in zip(got, want))


def _type_matches(got: pa.DataType, want: pa.DataType) -> bool:
    if pa.types.is_timestamp(want) and pa.types.is_timestamp(got):
        return True
    if pa.types.is_list(want) and pa.types.is_list(got):
        return _type_matches(got.value_type, want.value_type)
    if pa.types.is_decimal(want) and pa.types.is_decimal(got):
        return got.scale == want.scale
    return got == want
