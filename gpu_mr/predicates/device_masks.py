"""Row-local DEFINE conditions as generated array code for the device.

What: the device-side mask stage of the GPU engine (DESIGN.md §6, "one fused
elementwise pass per predicate set, bit-packed into class ids"). From the
checked AST of every DEFINE of a query whose DEFINEs are all row-local, this
module generates the source of one plain Python function per DEFINE over
array-module (``xp``) arrays, plus one ``classes`` function that calls them
and packs the per-row class bitmask (bit i: primary variable i may take the
row). On numpy the generated functions run as they are (the tests, CI); on
cupy ``classes`` is wrapped in ``cupy.fuse``, so the whole predicate set is
one elementwise kernel. The result is, bit for bit, what the CPU path gives
(``engines.cpu.class_bits`` over ``masks.MaskSet.evaluate_detailed``) on the
same rows, plus one flag: True when some row's evaluation raises (integer
overflow, integer division by zero) or is not exactly representable in the
masks' forms (a timestamp beyond the int64 nanosecond range). The engine then
evaluates that batch on the host with the CPU MaskSet, which raises the exact
error or declines to the interpreter; this module never builds messages.

Why generated source: a fused kernel must be one straight-line function of
elementwise operations; a readable template per AST node gives that, can be
shown by ``explain()`` (``DeviceMaskSet.source``), and is cached by (query
structure, input dtypes, which columns carry a null mask), as cuDF caches
its UDF kernels (``rapidsai/cudf:python/cudf/cudf/core/udf/templates.py``).
Everything is exact or declined, never approximated: the semantics are
masks.py's (itself checked row by row against interpreter.py, THE semantics):
three-valued logic with NULL and False both failing the DEFINE; AND/OR/CASE/
IN evaluate their later operands only where reached, so an error there
counts only where the interpreter would meet it; truncating integer division;
IEEE doubles (x / 0.0 is inf or NaN, no error); int-vs-double comparisons
exact as Python's (``masks._sign_int_float``: an int64 beyond 2**53 is not
rounded to a double); DATE against TIMESTAMP exact in days; float32 widened
to float64 (exact); timestamps of every unit compared in nanoseconds, as
masks.py does. The supported subset (anything else is declined by
:func:`device_masks_reason` with a reason naming the construct, and the
engine moves host-computed class bytes instead): columns of int8/16/32/64,
uint8/16/32, float32/64, bool, date32, timestamp (any unit) and null type,
with or without NULLs; BIGINT/DOUBLE/BOOLEAN/DATE/TIMESTAMP/NULL literals;
PREV/NEXT with constant offsets around any supported expression (NULL off the
partition); = <> < <= > >=; AND OR NOT; IS [NOT] NULL; [NOT] BETWEEN;
[NOT] IN (list); CASE (searched and simple); unary minus; ABS; + - * / % on
BIGINT (overflow and division by zero flagged) and DOUBLE.

How, and what follows whom: each AST node becomes a few statements producing
three arrays (values; validity, omitted when the node is never NULL; error
rows, omitted when it can never raise). PREV/NEXT cannot be fused (an offset
read is not elementwise), so ``evaluate`` builds the shifted columns first
(one gather-free slice copy each) and the generated code reads them as inputs,
with the row's position in its partition (``pos``, ``rest``: rows before and
after it in its partition; for an offset of 1 only whether the row is its
partition's ``first`` or ``last``) deciding which shifted rows exist. PREV(expr, k)
is expr over the k-shifted columns, valid and raising only where row r - k is
in the partition -- exactly the interpreter's "navigate, then evaluate there".
Integer arithmetic wraps through uint64 (well defined in C, numpy and CUDA)
and overflow is read from the wrapped result as masks.py does. Two cupy
traps are avoided: NVRTC contracts a double multiply followed by an add into
one FMA (one rounding instead of two, not what numpy or the interpreter
compute), so a predicate set with a DEFINE holding both a DOUBLE ``*`` and a
DOUBLE ``+``/``-`` is run unfused (one cupy kernel per operation, each exact);
and a set that ``cupy.fuse`` cannot trace falls back, once, to the same
unfused call. The generated code uses only what both numpy and cupy.fuse
take: operators, ``xp.where``/``abs``/``floor``/``isnan``/``fmod``,
``astype`` and numpy scalar constants (the tests check the calls it makes). Using
``cupy.ElementwiseKernel`` with ``--fmad=false`` would lift the first limit at
the cost of a second (C) generator; not worth it until profiles say so.

Cost: one pass over the DEFINEs' input columns (fused), plus one copy per
(column, offset) read through PREV/NEXT and, when any is, one searchsorted of
the rows into the partition offsets. On numpy (the tests) every operation is
its own pass, a few times slower than masks.py; that is not a path the engines
use on the host.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis import CheckedQuery, _history_dependent
from ..errors import UnsupportedError
from ..syntax import ast as A
from ..syntax import types as T

__all__ = ["DeviceMaskSet", "compile_device_masks", "device_masks_reason"]

ENGINE = "device_masks"
MAX_VARIABLES = 32
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
DAY = 86400 * 10**9
_EXACT_INT = 2**53                  # |i| <= 2**53: float(i) is exact

_SQL_OPS = {"=": "==", "<>": "!=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_ZERO = {"BIGINT": "I64(0)", "DATE": "I64(0)", "TIMESTAMP": "I64(0)", "DOUBLE": "F64(0.0)",
         "BOOLEAN": "FALSE", "UNKNOWN": "FALSE"}


class _Decline(Exception):
    """Internal: a construct the device masks do not compute (the reason)."""


# =====================================================================
# Input columns
# =====================================================================

@dataclass(frozen=True)
class _Form:
    """How one input column is moved and read: ``dtype`` of the loaded
    values (NULL rows hold 0), SQL ``kind``, ``small`` (a BIGINT within
    +-2**53, exact as a double), ``factor`` (timestamps: ns per unit)."""
    index: int
    name: str
    arrow: pa.DataType
    dtype: str
    kind: str
    small: bool = False
    factor: int = 1


_INT_DTYPES = {pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64",
               pa.uint8(): "uint8", pa.uint16(): "uint16", pa.uint32(): "uint32"}


def _form(index: int, name: str, t: pa.DataType, expected: T.SqlType) -> _Form:
    sql = T.from_arrow_type(t)
    if sql is None or sql.kind != expected.kind:
        raise _Decline(f"column {name} has type {t}, not the {expected} the query was "
                       f"analysed with")
    if pa.types.is_dictionary(t):
        raise _Decline(f"column {name} is dictionary-encoded ({t})")
    if t in _INT_DTYPES:
        dtype = _INT_DTYPES[t]
        return _Form(index, name, t, dtype, "BIGINT", small=dtype != "int64")
    if pa.types.is_uint64(t):
        raise _Decline(f"column {name} is uint64 (values above 2**63-1 do not fit BIGINT)")
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return _Form(index, name, t, "float32" if pa.types.is_float32(t) else "float64", "DOUBLE")
    if pa.types.is_boolean(t):
        return _Form(index, name, t, "bool", "BOOLEAN")
    if pa.types.is_date32(t):
        return _Form(index, name, t, "int32", "DATE")
    if pa.types.is_timestamp(t):
        return _Form(index, name, t, "int64", "TIMESTAMP", factor=T.NS_PER[t.unit])
    if pa.types.is_null(t):
        return _Form(index, name, t, "bool", "UNKNOWN")
    raise _Decline(f"column {name} of type {t} ({sql.sql_name()} columns are computed on "
                   f"the host)")


# =====================================================================
# The generator: one method per AST node
# =====================================================================

class _Val(NamedTuple):
    """A generated column: source of its ``values``; of its validity (None:
    never NULL; "FALSE": always NULL); of its error rows (None: never
    raises); ``small``: a BIGINT known to lie within +-2**53; ``const``: the
    Python value of a literal (for folding); ``strict``: a boolean whose
    values are True only where it is valid (no need to AND the validity)."""
    kind: str
    v: str
    ok: Optional[str] = None
    err: Optional[str] = None
    small: bool = False
    const: Any = None
    strict: bool = False


class _Function:
    """The body being generated for one DEFINE."""

    def __init__(self, name: str, doc: str):
        self.name = name
        self.doc = doc
        self.lines: list = []
        self.params: dict = {}          # parameter name -> recipe (see DeviceMaskSet._argument)
        self.cache: dict = {}           # (column, shift) / in-range key -> _Val / name
        self.temps = 0

    def param(self, name: str, recipe: tuple) -> str:
        self.params.setdefault(name, recipe)
        return name

    def let(self, source: str, comment: str = "") -> str:
        name = f"t{self.temps}"
        self.temps += 1
        self.lines.append(f"{name} = {source}" + (f"  # {_comment(comment)}" if comment else ""))
        return name


class _Gen:
    def __init__(self, forms: dict, nullable: frozenset, var: str, fn: _Function):
        self.forms = forms
        self.nullable = nullable
        self.var = var
        self.fn = fn
        self.nav: Optional[tuple] = None         # (k, prev) inside PREV/NEXT
        self.double_mul = False                  # FMA contraction hazard (see header)
        self.double_add = False

    # ------------------------------------------------------------ helpers
    def let(self, source: str, comment: str = "") -> str:
        return self.fn.let(source, comment)

    def emit(self, e: A.Expr) -> _Val:
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise _Decline(f"{type(e).__name__} expressions ({e.to_sql()})")
        return method(e)

    def both(self, *oks) -> Optional[str]:
        """Source of the AND of validities / masks (None entries: all True)."""
        parts = list(dict.fromkeys(o for o in oks if o is not None and o != "TRUE"))
        if "FALSE" in parts:
            return "FALSE"
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return self.let(" & ".join(parts))

    def mask(self, *parts) -> str:
        """Source of the AND of boolean masks, as a value ("TRUE" if none)."""
        return self.both(*parts) or "TRUE"

    def either(self, *errs) -> Optional[str]:
        """Source of the OR of error rows / masks (None entries: no row)."""
        parts = list(dict.fromkeys(e for e in errs if e is not None and e != "FALSE"))
        if "TRUE" in parts:
            return "TRUE"
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return self.let(" | ".join(parts))

    def where_(self, err: Optional[str], mask: Optional[str]) -> Optional[str]:
        """Error rows ``err`` restricted to the rows ``mask`` that reach them."""
        if err is None:
            return None
        return self.both(err, mask) or "TRUE"

    def null(self, kind: str, *errs) -> _Val:
        return _Val(kind, _ZERO.get(kind, "FALSE"), "FALSE", self.either(*errs))

    def truth(self, v: _Val) -> tuple:
        """(rows where v is TRUE, rows where it is FALSE) of a boolean."""
        if v.kind == "UNKNOWN" or v.ok == "FALSE":
            return "FALSE", "FALSE"
        if v.ok is None:
            return v.v, self.let(f"~{v.v}")
        true = v.v if v.strict else self.mask(v.ok, v.v)
        return true, self.let(f"{v.ok} & ~{v.v}")

    def to_double(self, v: _Val) -> str:
        if v.kind == "DOUBLE":
            return v.v
        if v.kind == "BIGINT":
            if v.const is not None:
                return _f64(float(v.const))
            return self.let(f"{v.v}.astype(F64)")
        raise _Decline(f"{v.kind} as a number")

    # ------------------------------------------------------------ leaves
    def _Literal(self, e: A.Literal) -> _Val:
        kind = e.type.kind if e.type is not None else "UNKNOWN"
        value = e.value
        if value is None or kind == "UNKNOWN":
            return self.null(kind)
        if kind == "BOOLEAN":
            return _Val(kind, "TRUE" if value else "FALSE", const=bool(value))
        if kind == "DOUBLE":
            return _Val(kind, _f64(float(value)), const=float(value))
        if kind in ("BIGINT", "DATE", "TIMESTAMP"):
            if kind == "DATE":
                if isinstance(value, _dt.datetime):
                    value = value.date()
                value = (value - T.EPOCH_DATE).days
            v = int(value)
            if not INT64_MIN <= v <= INT64_MAX:
                raise _Decline(f"the constant {e.to_sql()} lies outside the 64-bit range")
            return _Val(kind, f"I64({v})", small=abs(v) <= _EXACT_INT, const=v)
        raise _Decline(f"{kind} constants ({e.to_sql()})")

    def _ColumnRef(self, e: A.ColumnRef) -> _Val:
        if e.var not in (None, self.var):
            raise _Decline(f"{e.to_sql()} reads another variable's row")
        form = self.forms.get(e.resolved)
        if form is None:
            raise _Decline(f"the input schema does not name column {e.resolved}")
        key = (e.resolved, self.nav)
        hit = self.fn.cache.get(key)
        if hit is not None:
            return hit
        if form.kind == "UNKNOWN":
            return self.null("UNKNOWN")
        fn, j = self.fn, form.index
        nullable = form.name in self.nullable
        if self.nav is None:
            raw = fn.param(f"c{j}", ("values", form.name))
            ok = fn.param(f"c{j}_valid", ("valid", form.name)) if nullable else None
        else:
            k, prev = self.nav
            base = f"c{j}_{'prev' if prev else 'next'}{k}"
            raw = fn.param(base, ("shifted", form.name, k, prev))
            inside = self.in_range(k, prev)
            if nullable:
                ok = self.both(fn.param(base + "_valid", ("shifted_valid", form.name, k, prev)),
                               inside)
            else:
                ok = inside
        label = f"{form.name} ({form.dtype})"
        err = None
        if form.kind == "TIMESTAMP":
            if form.factor > 1:
                limit = INT64_MAX // form.factor
                bad = self.let(f"({raw} > I64({limit})) | ({raw} < I64({-limit}))",
                               f"{form.name}: beyond the int64 nanosecond range")
                err = self.both(ok, bad)
                v = self.let(f"xp.where({bad}, I64(0), {raw}) * I64({form.factor})",
                             f"{label} in nanoseconds")
            else:
                v = raw
        elif form.dtype in ("int64", "float64", "bool"):
            v = raw
        else:
            v = self.let(f"{raw}.astype({'F64' if form.kind == 'DOUBLE' else 'I64'})", label)
        out = _Val(form.kind, v, ok, err, small=form.small)
        fn.cache[key] = out
        return out

    def in_range(self, k: int, prev: bool) -> str:
        """Rows whose row ``k`` before (``prev``) / after lies in their partition."""
        key = ("in", k, prev)
        hit = self.fn.cache.get(key)
        if hit is None and k == 1:
            # a byte per row marking the partitions' edges, not a position:
            # at 1e9 rows on an H200 the positions kernel took 5 ms of 16
            name = "first" if prev else "last"
            hit = self.let(f"~{self.fn.param(name, (name,))}",
                           f"row {'-' if prev else '+'}1 is in the partition")
            self.fn.cache[key] = hit
        elif hit is None:
            name = "pos" if prev else "rest"
            hit = self.let(f"{self.fn.param(name, (name,))} >= I64({k})",
                           f"row {'-' if prev else '+'}{k} is in the partition")
            self.fn.cache[key] = hit
        return hit

    def _Navigation(self, e: A.Navigation) -> _Val:
        if e.kind not in ("PREV", "NEXT"):
            raise _Decline(f"{e.kind} is a logical offset inside the match")
        k = int(e.offset.value)
        if k == 0:
            return self.emit(e.arg)
        if self.nav is not None:
            raise _Decline("PREV/NEXT nested in PREV/NEXT")
        prev = e.kind == "PREV"
        self.nav = (k, prev)
        try:
            inner = self.emit(e.arg)
        finally:
            self.nav = None
        if isinstance(e.arg, A.ColumnRef):
            return inner                # a shifted column's validity already says so
        inside = self.in_range(k, prev)
        return inner._replace(strict=False, ok=self.both(inner.ok, inside),
                              err=self.where_(inner.err, inside), const=None)

    # ------------------------------------------------------------ logic
    def _Unary(self, e: A.Unary) -> _Val:
        v = self.emit(e.operand)
        kind = e.type.kind
        if v.kind == "UNKNOWN":
            return self.null(kind, v.err)
        if e.op == "+":
            return v
        if e.op == "NOT":
            return v._replace(v=self.let(f"~{v.v}"), const=None, strict=False)
        if v.kind == "DOUBLE":
            return v._replace(v=self.let(f"-{v.v}"), const=None, strict=False)
        if v.kind == "BIGINT":
            over = self.both(v.ok, self.let(f"{v.v} == I64({INT64_MIN})"))
            return _Val(kind, self.let(f"_neg({v.v})"), v.ok, self.either(v.err, over),
                        small=v.small)
        raise _Decline(f"unary {e.op} on {v.kind}")

    def _Binary(self, e: A.Binary) -> _Val:
        if e.op in ("AND", "OR"):
            left, right = self.emit(e.left), self.emit(e.right)
            for side in (left, right):
                if side.kind not in ("BOOLEAN", "UNKNOWN"):
                    raise _Decline(f"{e.op} of {side.kind}")
            conj = e.op == "AND"
            if left.ok is None and right.ok is None and "UNKNOWN" not in (left.kind, right.kind):
                value = self.let(f"{left.v} {'&' if conj else '|'} {right.v}")
                reached = left.v if conj else self.let(f"~{left.v}")
                return _Val("BOOLEAN", value, None,
                            self.either(left.err, self.where_(right.err, reached)))
            lt, lf = self.truth(left)
            rt, rf = self.truth(right)
            if conj:
                true = self.mask(lt, rt)
                false = self.either(lf, rf) or "FALSE"
                reached = "TRUE" if lf == "FALSE" else self.let(f"~{lf}")
            else:
                true = self.either(lt, rt) or "FALSE"
                false = self.mask(lf, rf)
                reached = "TRUE" if lt == "FALSE" else self.let(f"~{lt}")
            valid = self.either(true, false) or "FALSE"
            reached = None if reached == "TRUE" else reached
            return _Val("BOOLEAN", true, valid, strict=True, err=
                        self.either(left.err, self.where_(right.err, reached)))
        left, right = self.emit(e.left), self.emit(e.right)
        if e.op in _SQL_OPS:
            values, ok = self.compare(e.op, left, right)
            return _Val("BOOLEAN", values, ok, self.either(left.err, right.err))
        return self.arith(e, left, right)

    def _Between(self, e: A.Between) -> _Val:
        v, lo, hi = self.emit(e.operand), self.emit(e.low), self.emit(e.high)
        err = self.either(v.err, lo.err, hi.err)
        ge, ge_ok = self.compare(">=", v, lo)
        le, le_ok = self.compare("<=", v, hi)
        if ge_ok is None and le_ok is None:
            inside = self.let(f"{ge} & {le}")
            return _Val("BOOLEAN", self.let(f"~{inside}") if e.negated else inside, None, err)
        if "FALSE" in (ge_ok, le_ok) and ge_ok == le_ok:
            return self.null("BOOLEAN", err)
        ge_t, ge_f = self.truth(_Val("BOOLEAN", ge, ge_ok))
        le_t, le_f = self.truth(_Val("BOOLEAN", le, le_ok))
        true = self.mask(ge_t, le_t)
        false = self.either(ge_f, le_f) or "FALSE"
        valid = self.either(true, false) or "FALSE"
        return _Val("BOOLEAN", false if e.negated else true, valid, err, strict=True)

    def _InList(self, e: A.InList) -> _Val:
        v = self.emit(e.operand)
        if v.kind == "UNKNOWN" or v.ok == "FALSE":
            return self.null("BOOLEAN", v.err)       # the items are not evaluated
        pending = v.ok                               # None: every row
        matched = "FALSE"
        saw_null = "FALSE"
        errs = [v.err]
        for item in e.items:
            if isinstance(item, A.Subquery):
                raise _Decline("IN (subquery)")
            x = self.emit(item)
            # pending rows have a non-NULL operand: only the item can make it unknown
            eq, eq_ok = self.compare("=", v._replace(ok=None), x)
            errs.append(self.where_(x.err, pending))
            hit = self.mask(pending, eq_ok, eq)
            if eq_ok is not None:
                unknown = "TRUE" if eq_ok == "FALSE" else self.let(f"~{eq_ok}")
                saw = self.mask(pending, unknown)
                saw_null = self.either(saw_null, saw) or "FALSE"
            matched = self.either(matched, hit) or "FALSE"
            pending = self.both(pending, self.let(f"~{hit}"))
        if saw_null == "FALSE":
            valid = v.ok
        else:
            valid = self.both(v.ok, self.let(f"{matched} | ~{saw_null}"))
        values = self.let(f"~{matched}") if e.negated else matched
        return _Val("BOOLEAN", values, valid, self.either(*errs))

    def _IsNull(self, e: A.IsNull) -> _Val:
        v = self.emit(e.operand)
        if v.ok is None:
            values = "TRUE" if e.negated else "FALSE"
        elif v.ok == "FALSE":
            values = "FALSE" if e.negated else "TRUE"
        else:
            values = v.ok if e.negated else self.let(f"~{v.ok}")
        return _Val("BOOLEAN", values, None, v.err)

    def _Case(self, e: A.Case) -> _Val:
        kind = e.type.kind
        if kind not in _ZERO:
            raise _Decline(f"CASE of type {e.type}")
        pending: Optional[str] = None               # None: every row
        errs, branches = [], []
        subject = None
        if e.operand is not None:
            subject = self.emit(e.operand)
            errs.append(subject.err)
        for cond, result in e.whens:
            c = self.emit(cond)
            errs.append(self.where_(c.err, pending))
            if subject is not None:
                eq, eq_ok = self.compare("=", subject, c)
                taken = self.mask(pending, eq_ok, eq)
            else:
                if c.kind not in ("BOOLEAN", "UNKNOWN"):
                    raise _Decline(f"CASE WHEN of {c.kind}")
                taken = self.mask(pending, self.truth(c)[0])
            r = self.coerce(self.emit(result), kind)
            errs.append(self.where_(r.err, taken))
            branches.append((taken, r))
            if taken != "FALSE":
                pending = self.both(pending, self.let(f"~{taken}"))
        if e.else_ is not None:
            r = self.coerce(self.emit(e.else_), kind)
            errs.append(self.where_(r.err, pending))
            values, valid = r.v, ("TRUE" if r.ok is None else r.ok)
            small = r.small
        else:
            values, valid, small = _ZERO[kind], "FALSE", True
        chosen = False
        for taken, r in reversed(branches):
            if taken == "FALSE":
                continue
            values = self.let(f"xp.where({taken}, {r.v}, {values})")
            chosen = True
            r_ok = "TRUE" if r.ok is None else r.ok
            valid = valid if r_ok == valid else self.let(f"xp.where({taken}, {r_ok}, {valid})")
            small = small and r.small
        if kind in ("BIGINT", "DATE", "TIMESTAMP") and chosen:
            # where() of constants only: cupy's scalar typing may pick a narrower int
            values = self.let(f"{values}.astype(I64, copy=False)")
        return _Val(kind, values, None if valid == "TRUE" else valid, self.either(*errs),
                    small=small and kind == "BIGINT")

    def coerce(self, v: _Val, kind: str) -> _Val:
        """``interpreter.coerce``: a CASE branch brought to the CASE's type."""
        if v.kind == kind:
            return v
        if v.kind == "UNKNOWN":
            return self.null(kind, v.err)
        if kind == "DOUBLE" and v.kind == "BIGINT":
            return _Val(kind, self.to_double(v), v.ok, v.err)
        if kind == "TIMESTAMP" and v.kind == "DATE":
            limit = INT64_MAX // DAY
            bad = self.both(v.ok, self.let(f"({v.v} > I64({limit})) | ({v.v} < I64({-limit}))",
                                           "a DATE beyond the int64 nanosecond range"))
            ns = self.let(f"xp.where({bad}, I64(0), {v.v}) * I64({DAY})")
            return _Val(kind, ns, v.ok, self.either(v.err, bad))
        raise _Decline(f"{v.kind} as {kind}")

    # ------------------------------------------------------------ comparisons
    def compare(self, op: str, a: _Val, b: _Val) -> tuple:
        """``interpreter.compare`` on columns: (values, validity) sources."""
        ka, kb = a.kind, b.kind
        ok = self.both(a.ok, b.ok)
        if "UNKNOWN" in (ka, kb) or ok == "FALSE":
            return "FALSE", "FALSE"
        py = _SQL_OPS[op]
        if ka == kb and ka in ("BIGINT", "DOUBLE", "BOOLEAN", "DATE", "TIMESTAMP"):
            return self.let(f"{a.v} {py} {b.v}"), ok
        if {ka, kb} == {"BIGINT", "DOUBLE"}:
            i, f = (a, b) if ka == "BIGINT" else (b, a)
            if i.small:              # float(i) is exact: compare as doubles
                x = self.to_double(i)
                pair = (x, f.v) if ka == "BIGINT" else (f.v, x)
                return self.let(f"{pair[0]} {py} {pair[1]}"), ok
            sign = self.let(f"_sign_int_float({i.v}, {f.v})", "exact, as Python compares")
            if ka == "DOUBLE":
                sign = self.let(f"-{sign}")
            nan = "TRUE" if op in ("<>", "!=") else "FALSE"
            return self.let(f"xp.where(xp.isnan({f.v}), {nan}, {sign} {py} I64(0))"), ok
        if {ka, kb} == {"DATE", "TIMESTAMP"}:
            if ka == "DATE":
                sign = self.let(f"_sign_days_ns({a.v}, {b.v})")
            else:
                sign = self.let(f"-_sign_days_ns({b.v}, {a.v})")
            return self.let(f"{sign} {py} I64(0)"), ok
        raise _Decline(f"comparing {ka} with {kb}")

    # ------------------------------------------------------------ arithmetic
    def arith(self, e: A.Binary, a: _Val, b: _Val) -> _Val:
        op, kind = e.op, e.type.kind
        if op not in ("+", "-", "*", "/", "%"):
            raise _Decline(f"the operator {op}")
        if "UNKNOWN" in (a.kind, b.kind, kind):
            if kind not in _ZERO:
                raise _Decline(f"{op} of type {e.type}")
            return self.null(kind, a.err, b.err)
        ok = self.both(a.ok, b.ok)
        base_err = self.either(a.err, b.err)
        if kind == "DOUBLE":
            x, y = self.to_double(a), self.to_double(b)
            if op == "%":
                r = self.let(f"xp.where({y} == F64(0.0), F64('nan'), xp.fmod({x}, {y}))")
            else:
                self.double_mul |= op == "*"
                self.double_add |= op in "+-"
                r = self.let(f"{x} {op} {y}")
            return _Val(kind, r, ok, base_err)
        if kind == "BIGINT" and a.kind == b.kind == "BIGINT":
            x, y = a.v, b.v
            if op in "+-*":
                helper = {"+": "_add", "-": "_sub", "*": "_mul"}[op]
                r = self.let(f"{helper}({x}, {y})", "wraps; overflow read below")
                if op == "+":
                    over = f"(({x} ^ {r}) & ({y} ^ {r})) < I64(0)"
                elif op == "-":
                    over = f"(({x} ^ {y}) & ({x} ^ {r})) < I64(0)"
                else:
                    over = f"_mul_overflows({x}, {y}, {r})"
                over = self.both(ok, self.let(over))
                return _Val(kind, r, ok, self.either(base_err, over))
            if b.const is not None and b.const not in (0, -1):     # the common x / 2
                zero = minus = None
                ys = y
            else:
                zero = self.both(ok, self.let(f"{y} == I64(0)", "division by zero"))
                minus = self.let(f"({x} == I64({INT64_MIN})) & ({y} == I64(-1))")
                ys = self.let(f"xp.where(({y} == I64(0)) | {minus}, I64(1), {y})")
            q = self.let(f"{x} // {ys}", "floor")
            rem = self.let(f"_sub({x}, _mul({q}, {ys}))", "x mod ys (wraps through uint64)")
            fix = self.let(f"({rem} != I64(0)) & (({x} ^ {ys}) < I64(0))", "toward zero")
            if op == "/":
                r = self.let(f"xp.where({fix}, {q} + I64(1), {q})")
                if minus is not None:
                    r = self.let(f"xp.where({minus}, I64({INT64_MIN}), {r})")
                over = self.both(ok, minus) if minus is not None else None
                return _Val(kind, r, ok, self.either(base_err, zero, over))
            r = self.let(f"xp.where({fix}, {rem} - {ys}, {rem})")
            if minus is not None:
                r = self.let(f"xp.where({minus}, I64(0), {r})")
            return _Val(kind, r, ok, self.either(base_err, zero))
        raise _Decline(f"{a.kind} {op} {b.kind} (of type {e.type})")

    # ------------------------------------------------------------ functions
    def _Call(self, e: A.Call) -> _Val:
        if e.name != "ABS":
            raise _Decline(f"the function {e.name}")
        x = self.emit(e.args[0])
        if x.kind == "UNKNOWN":
            return self.null(e.type.kind, x.err)
        if x.kind == "DOUBLE":
            return _Val("DOUBLE", self.let(f"xp.abs({x.v})"), x.ok, x.err)
        if x.kind == "BIGINT":
            over = self.both(x.ok, self.let(f"{x.v} == I64({INT64_MIN})"))
            r = self.let(f"xp.where({x.v} < I64(0), _neg({x.v}), {x.v})")
            return _Val("BIGINT", r, x.ok, self.either(x.err, over), small=x.small)
        raise _Decline(f"ABS of {x.kind}")


def _f64(v: float) -> str:
    return f"F64({v!r})" if math.isfinite(v) else f"F64('{v!r}')"


# =====================================================================
# Helpers the generated code calls (elementwise: cupy.fuse traces them)
# =====================================================================

def _namespace(xp) -> dict:
    """Globals of the generated code for the array module ``xp``."""
    I64, U64 = np.int64, np.uint64

    def _add(x, y):
        return (x.astype(U64) + y.astype(U64)).astype(I64)

    def _sub(x, y):
        return (x.astype(U64) - y.astype(U64)).astype(I64)

    def _mul(x, y):
        return (x.astype(U64) * y.astype(U64)).astype(I64)

    def _neg(x):
        return (U64(0) - x.astype(U64)).astype(I64)

    def _mul_overflows(x, y, r):
        # r is x * y wrapped. For x not in (0, -1): r // x == y exactly when no
        # overflow (exact division), and never otherwise (|r - x*y| >= 2**64
        # > |x|); masks._checked's second test (r - q*x != 0) is implied.
        xs = xp.where((x == I64(0)) | (x == I64(-1)), I64(1), x)
        return xp.where(x == I64(-1), y == I64(INT64_MIN), (x != I64(0)) & (r // xs != y))

    def _sign_int_float(i, f):
        # masks._sign_int_float: sign(i - f) exactly; NaN rows 0
        g = xp.floor(f)
        big = g >= F64(2.0**63)
        small = g < F64(-2.0**63)
        bad = big | small | xp.isnan(g)
        gi = xp.where(bad, F64(0.0), g).astype(I64)
        frac = xp.where(bad, F64(0.0), f - g)
        sign = xp.where(i < gi, I64(-1), xp.where(i > gi, I64(1),
                                                  xp.where(frac > F64(0.0), I64(-1), I64(0))))
        return xp.where(big, I64(-1), xp.where(small, I64(1), sign))

    def _sign_days_ns(days, ns):
        # masks._sign_days_ns: sign(days * DAY - ns) exactly, no overflow
        q = ns // I64(DAY)
        r = ns - q * I64(DAY)
        return xp.where(days > q, I64(1), xp.where(days < q, I64(-1),
                                                   xp.where(r == I64(0), I64(0), I64(-1))))

    F64 = np.float64
    return {"xp": xp, "I64": I64, "U64": U64, "F64": F64, "U8": np.uint8, "U32": np.uint32,
            "TRUE": np.True_, "FALSE": np.False_, "_add": _add, "_sub": _sub, "_mul": _mul,
            "_neg": _neg, "_mul_overflows": _mul_overflows, "_sign_int_float": _sign_int_float,
            "_sign_days_ns": _sign_days_ns}


# =====================================================================
# Programs: generated source for one null-mask configuration
# =====================================================================

@dataclass(frozen=True)
class _Program:
    source: str
    params: tuple                 # ((name, recipe), ...) of ``classes``
    can_fail: bool
    fusable: bool


def _variable_id(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def _generate(query: CheckedQuery, forms: dict, nullable: frozenset) -> _Program:
    """The source of ``classes`` and its DEFINE functions (raises _Decline)."""
    n_vars = len(query.primary_vars)
    if n_vars > MAX_VARIABLES:
        raise _Decline(f"{n_vars} pattern variables; class ids hold at most {MAX_VARIABLES}")
    ubits = "U8" if n_vars <= 8 else "U32"
    functions, calls, fails = [], [], []
    always = 0
    params: dict = {}
    fma = False
    for i, var in enumerate(query.primary_vars):
        expr = query.defines.get(var)
        if expr is None:
            always |= 1 << i
            continue
        if _history_dependent(expr, var):
            raise _Decline(f"DEFINE {A.quote_ident(var)}: not row-local (it reads the match "
                           f"so far: other variables, FIRST/LAST or aggregates)")
        fn = _Function(f"define_{i}_{_variable_id(var)}", f"{A.quote_ident(var)} := "
                       f"{expr.to_sql()}")
        gen = _Gen(forms, nullable, var, fn)
        try:
            v = gen.emit(expr)
            if v.kind not in ("BOOLEAN", "UNKNOWN"):
                raise _Decline(f"a condition of type {v.kind}")
        except _Decline as d:
            raise _Decline(f"DEFINE {A.quote_ident(var)}: {d}") from None
        # DEFINEs only meet in the bits: the FMA hazard is per DEFINE
        fma |= gen.double_mul and gen.double_add
        holds = "FALSE" if v.kind == "UNKNOWN" else v.v if v.strict else gen.mask(v.ok, v.v)
        ret = holds if v.err is None else f"{holds}, {v.err}"
        lines, used = _live(fn.lines, ret)
        fn.params = {name: recipe for name, recipe in fn.params.items() if name in used}
        args = ", ".join(fn.params)
        body = "\n".join("    " + line for line in lines) or "    pass"
        functions.append(f"def {fn.name}({args}):\n    {fn.doc!r}\n{body}\n"
                         f"    return {ret}\n")
        h = f"h{i}"
        if v.err is None:
            calls.append(f"    {h} = {fn.name}({args})")
        else:
            calls.append(f"    {h}, f{i} = {fn.name}({args})")
            fails.append(f"f{i}")
        calls.append(f"    bits = bits | xp.where({h}, {ubits}({1 << i}), {ubits}(0))")
        for name, recipe in fn.params.items():
            params.setdefault(name, recipe)
    inputs = ", ".join(f"c{f.index} = {f.name} ({f.dtype})" for f in forms.values()
                       if f.kind != "UNKNOWN")
    head = (f"# gpu_mr device masks: bit i of a row's class = primary variable i may take it\n"
            f"# variables: {_comment(', '.join(query.primary_vars))}\n"
            f"# inputs: {_comment(inputs or 'none')}; NULL masks: "
            f"{_comment(', '.join(sorted(nullable)) or 'none')}\n")
    ret = "bits" if not fails else f"bits, {' | '.join(fails)}"
    classes = (f"def classes({', '.join(params)}):\n    bits = {ubits}({always})\n"
               + "\n".join(calls) + f"\n    return {ret}\n")
    source = head + "\n\n" + "\n\n".join(functions + [classes])
    return _Program(source, tuple(params.items()), bool(fails), not fma)


_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _live(lines: list, ret: str) -> tuple:
    """Drop the statements whose result nothing reads (a construct's template
    may build a mask it does not need): (kept lines, names they and ``ret``
    read)."""
    used = set(_NAME.findall(ret))
    kept = []
    for line in reversed(lines):
        target, _, expr = line.partition(" = ")
        if target in used:
            kept.append(line)
            used |= set(_NAME.findall(expr.split("  #")[0]))
    return kept[::-1], used


def _comment(text: str) -> str:
    """Text safe inside a ``#`` comment (names may hold newlines)."""
    return text.encode("unicode_escape").decode("ascii")


@functools.lru_cache(maxsize=256)
def _cached_program(query_ref: "_QueryRef", forms_items: tuple,
                    nullable: frozenset) -> _Program:
    return _generate(query_ref.query, dict(forms_items), nullable)


class _QueryRef:
    """Hashes a query by the structure the generated code depends on."""
    __slots__ = ("query", "key")

    def __init__(self, query: CheckedQuery):
        self.query = query
        # the AST (positions aside) and every literal's repr: -0.0 == 0.0 but
        # 1 / -0.0 is not 1 / 0.0
        self.key = (query.primary_vars, tuple(sorted(query.defines.items())),
                    tuple(repr(n.value) for e in query.defines.values() for n in e.walk()
                          if isinstance(n, A.Literal)))

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _QueryRef) and self.key == other.key


@functools.lru_cache(maxsize=256)
def _runner(source: str, xp, fusable: bool, entry: str = "classes"):
    """The callable ``entry`` of ``source`` for ``xp``: fused on cupy
    (unless ``fusable`` is False, see the header), plain otherwise."""
    namespace = _namespace(xp)
    exec(compile(source, "<gpu_mr device masks>", "exec"), namespace)
    plain = namespace[entry]
    fuse = getattr(xp, "fuse", None)
    if xp is np:
        def run(*args):
            with np.errstate(all="ignore"):
                return plain(*args)
        return run
    if fuse is None or not fusable:
        return plain
    fused = fuse(kernel_name="gpu_mr_masks")(plain)
    state = {"fused": True}

    def run(*args):
        if state["fused"]:
            try:
                return fused(*args)
            except Exception:            # cupy.fuse could not trace it: same code, unfused
                state["fused"] = False
        return plain(*args)
    return run


# =====================================================================
# Public API
# =====================================================================

def _forms_of(query: CheckedQuery, schema: pa.Schema) -> dict:
    """Column name -> _Form of every column the DEFINEs read, in order of
    first use (raises _Decline naming the DEFINE)."""
    forms = {}
    for var in query.primary_vars:
        expr = query.defines.get(var)
        for n in (expr.walk() if expr is not None else ()):
            if not isinstance(n, A.ColumnRef) or n.resolved in forms:
                continue
            name = n.resolved
            try:
                if name not in schema.names:
                    raise _Decline(f"the input schema does not name column {name}")
                forms[name] = _form(len(forms), name, schema.field(name).type, n.type)
            except _Decline as d:
                raise _Decline(f"DEFINE {A.quote_ident(var)}: {d}") from None
    return forms


def device_masks_reason(query: CheckedQuery, schema: pa.Schema) -> Optional[str]:
    """Why the DEFINEs of ``query`` cannot all be computed on the device, or None.

    Parameters
    ----------
    query : CheckedQuery
        A query whose DEFINEs are all row-local (the caller checks
        ``engines.cpu.unsupported_reason`` first).
    schema : pyarrow.Schema
        The schema of the data the masks will read.

    Returns
    -------
    str or None
        None when :func:`compile_device_masks` accepts the query, else the
        reason, naming the DEFINE and the construct.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> schema = pa.schema([("t", pa.int64()), ("x", pa.float32()), ("s", pa.string())])
    >>> q = analyze(parse_clause("ORDER BY t MEASURES COUNT(*) AS n PATTERN (A B) "
    ...     "DEFINE A AS x > PREV(x) * 1.01, B AS s = 'up'"), schema)
    >>> device_masks_reason(q, schema)
    'DEFINE B: column s of type string (VARCHAR columns are computed on the host)'
    """
    try:
        forms = _forms_of(query, schema)
        _cached_program(_QueryRef(query), tuple(forms.items()), frozenset(forms))
    except _Decline as d:
        return str(d)
    return None


def compile_device_masks(query: CheckedQuery, schema: pa.Schema) -> "DeviceMaskSet":
    """The :class:`DeviceMaskSet` of ``query`` over data of ``schema``.

    Raises
    ------
    UnsupportedError
        With the reason from :func:`device_masks_reason`.

    Examples
    --------
    >>> import numpy as np
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"p": [1, 1, 1, 2, 2], "x": [3, 1, 2, 5, None]})
    >>> q = analyze(parse_clause("PARTITION BY p ORDER BY x MEASURES COUNT(*) AS n "
    ...                          "PATTERN (A B) DEFINE A AS x > PREV(x)"), t.schema)
    >>> masks = compile_device_masks(q, t.schema)
    >>> columns = masks.load(t, np)
    >>> bits, failed = masks.evaluate(np, columns, np.array([0, 3, 5]), 5)
    >>> bits.tolist(), failed          # bit 0: A, bit 1: B (no DEFINE)
    ([2, 2, 3, 2, 2], False)
    """
    reason = device_masks_reason(query, schema)
    if reason is not None:
        raise UnsupportedError(f"the DEFINEs cannot all be device masks: {reason}",
                               engine=ENGINE, construct="DEFINE")
    return DeviceMaskSet(query, schema, _forms_of(query, schema))


@dataclass
class DeviceMaskSet:
    """Every DEFINE of a row-local query as generated device code.

    Attributes
    ----------
    columns : tuple of str
        The input columns the DEFINEs read (``load`` moves only these).
    """
    query: CheckedQuery = field(repr=False)
    schema: pa.Schema = field(repr=False)
    forms: dict = field(repr=False)
    columns: tuple = field(init=False)
    _programs: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        self.columns = tuple(n for n, f in self.forms.items() if f.kind != "UNKNOWN")

    # ------------------------------------------------------------ data
    def load(self, table: pa.Table, xp) -> dict:
        """Host Arrow columns to ``{name: (values, valid or None)}`` of ``xp``
        arrays: values in the column's own width (NULL rows hold 0), valid
        only for columns with NULLs."""
        out = {}
        for name in self.columns:
            form = self.forms[name]
            col = table.column(name)
            if col.type != form.arrow:
                raise UnsupportedError(f"column {name} has type {col.type}, not the "
                                       f"{form.arrow} the device masks were compiled for",
                                       engine=ENGINE, construct=name)
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            valid = None
            if arr.null_count:
                valid = xp.asarray(pc.is_valid(arr).to_numpy(zero_copy_only=False))
            if form.kind in ("DATE", "TIMESTAMP"):
                arr = arr.cast(pa.int32() if form.kind == "DATE" else pa.int64())
            if arr.null_count:
                arr = pc.fill_null(arr, False if form.kind == "BOOLEAN" else 0)
            values = arr.to_numpy(zero_copy_only=False).astype(form.dtype, copy=False)
            out[name] = (xp.asarray(values), valid)
        return out

    def load_input(self, source) -> dict:
        """``load`` from a ``device_input.DeviceInput`` (a host table or a
        cuDF frame): each column as the source holds it on the device, in
        the width the masks were compiled for."""
        out = {}
        for name in self.columns:
            form = self.forms[name]
            t = source.schema.field(name).type
            if t != form.arrow:
                raise UnsupportedError(f"column {name} has type {t}, not the "
                                       f"{form.arrow} the device masks were compiled for",
                                       engine=ENGINE, construct=name)
            values, valid = source.column(name)
            out[name] = (values.astype(form.dtype, copy=False), valid)
        return out

    # ------------------------------------------------------------ code
    def program(self, nullable) -> _Program:
        """The generated program for data whose columns ``nullable`` carry
        NULL masks (cached)."""
        nullable = frozenset(nullable) & frozenset(self.columns)
        hit = self._programs.get(nullable)
        if hit is None:
            hit = self._programs[nullable] = _cached_program(
                _QueryRef(self.query), tuple(self.forms.items()), nullable)
        return hit

    def source(self, nullable=None) -> str:
        """The generated code (for ``explain()`` and tests), for data whose
        columns ``nullable`` carry NULL masks (default: every column)."""
        return self.program(self.columns if nullable is None else nullable).source

    # ------------------------------------------------------------ run
    def evaluate(self, xp, columns: dict, partition_offsets, n_rows: int) -> tuple:
        """Per-row class bitmasks and whether some row needs the host.

        Parameters
        ----------
        xp : module
            numpy, or cupy on a GPU.
        columns : dict
            ``load``'s output (name -> (values, valid or None)) for ``columns``.
        partition_offsets : xp array
            int64, length ``n_partitions + 1``: partition p holds rows
            ``offsets[p]:offsets[p + 1]``.
        n_rows : int
            Rows of the batch.

        Returns
        -------
        bits : xp array
            uint8 (up to 8 primary variables) or uint32: bit i set where
            primary variable i may take the row; equal to
            ``engines.cpu.class_bits`` on the CPU masks.
        failed : bool
            True when some row raises or cannot be represented exactly:
            evaluate this batch with the host MaskSet instead (``bits`` is
            then meaningless).
        """
        dtype = np.uint8 if len(self.query.primary_vars) <= 8 else np.uint32
        n = int(n_rows)
        if n == 0:
            return xp.zeros(0, dtype=dtype), False
        for name in self.columns:
            values, valid = columns[name]
            want = self.forms[name].dtype
            if values.dtype != want or (valid is not None and valid.dtype != np.bool_):
                raise TypeError(f"column {name} arrives as {values.dtype} (valid: "
                                f"{None if valid is None else valid.dtype}); the device masks "
                                f"read {want} values and bool validity, as "
                                f"DeviceMaskSet.load gives them")
        nullable = frozenset(name for name in self.columns if columns[name][1] is not None)
        prog = self.program(nullable)
        if not prog.params:
            out = _runner(prog.source, xp, False)()
        else:
            cache: dict = {}
            args = [self._argument(xp, recipe, columns, partition_offsets, n, cache)
                    for _, recipe in prog.params]
            out = _runner(prog.source, xp, prog.fusable)(*args)
        bits, fail = out if prog.can_fail else (out, None)
        if getattr(bits, "shape", ()) != (n,):          # no DEFINE reads a column
            bits = xp.zeros(n, dtype=dtype) | bits
        failed = bool(fail.any()) if fail is not None else False
        return bits.astype(dtype, copy=False), failed

    def _argument(self, xp, recipe: tuple, columns: dict, offsets, n: int, cache: dict):
        what = recipe[0]
        if what == "values":
            return columns[recipe[1]][0]
        if what == "valid":
            return columns[recipe[1]][1]
        if what in ("pos", "rest"):
            if what not in cache:
                cache[what] = _positions(xp, offsets, n, what == "pos")
            return cache[what]
        if what in ("first", "last"):
            if what not in cache:
                cache[what] = _edges(xp, offsets, n, what == "first")
            return cache[what]
        _, name, k, prev = recipe
        x = columns[name][0 if what == "shifted" else 1]
        return _shift(xp, x, k, prev)


def _positions(xp, offsets, n: int, before: bool):
    """Each row's count of rows before it (``before``) or after it in its
    partition. On a device a kernel writes it with no temporaries (the array
    expression below holds six int64 arrays of n at once: 48 GB at 1e9 rows)."""
    from ..backend import detect
    backend = detect()
    if not isinstance(backend, str) and not backend.simulated and xp is backend.xp:
        from ..kernels.gpu_positions import run_positions
        pos, rest = run_positions(backend, offsets, n, before, not before)
        return pos if before else rest
    rows = xp.arange(n, dtype=np.int64)
    offs = xp.asarray(offsets, dtype=np.int64)
    part = xp.searchsorted(offs[1:], rows, side="right")
    return rows - offs[part] if before else offs[part + 1] - 1 - rows


def _edges(xp, offsets, n: int, first: bool):
    """Per row, whether it is the first (``first``) or the last row of its
    partition: one byte a row and a scatter of O(partitions)."""
    offs = xp.asarray(offsets, dtype=np.int64)
    lo, hi = offs[:-1], offs[1:]
    rows = (lo if first else hi - 1)[hi > lo]
    flags = xp.zeros(n, dtype=np.bool_)
    flags[rows] = True
    return flags


def _shift(xp, x, k: int, prev: bool):
    """``x`` moved ``k`` rows later (``prev``: row r holds x[r - k]) or
    earlier; rows moved in from outside hold 0 / False."""
    n = x.shape[0]
    k = min(k, n)
    out = xp.zeros_like(x)
    if k < n:
        if prev:
            out[k:] = x[:n - k]
        else:
            out[:n - k] = x[k:]
    return out


# =====================================================================
# One row expression as values (an aggregate's argument in MEASURES)
# =====================================================================

@dataclass(frozen=True)
class _ValueProgram:
    source: str
    params: tuple                 # ((name, recipe), ...) of ``value``
    has_valid: bool               # ``value`` returns a validity after the values
    has_errors: bool              # ... then the rows where it raises
    fusable: bool


def _value_forms(expr: A.Expr, schema: pa.Schema) -> dict:
    forms: dict = {}
    for n in expr.walk():
        if isinstance(n, A.ColumnRef) and n.resolved not in forms:
            if n.resolved not in schema.names:
                raise _Decline(f"the input schema does not name column {n.resolved}")
            forms[n.resolved] = _form(len(forms), n.resolved, schema.field(n.resolved).type,
                                      n.type)
    return forms


def _generate_value(expr: A.Expr, var: Optional[str], forms: dict,
                    nullable: frozenset) -> _ValueProgram:
    """The source of ``value``: ``expr`` at every row, for an aggregate over
    the rows of ``var`` (None: every row). Raises _Decline."""
    if not forms:
        raise _Decline(f"{expr.to_sql()} reads no column")
    for n in expr.walk():
        if isinstance(n, (A.Navigation, A.Aggregate, A.Classifier, A.MatchNumber)):
            raise _Decline(f"{n.to_sql()} inside an aggregate's argument")
    fn = _Function("value", expr.to_sql())
    gen = _Gen(forms, nullable, var, fn)
    v = gen.emit(expr)
    if v.kind not in ("BIGINT", "DOUBLE"):
        raise _Decline(f"an argument of type {v.kind}")
    if v.ok == "FALSE" or v.const is not None:
        raise _Decline(f"{expr.to_sql()} is constant")
    if v.err == "TRUE":
        raise _Decline(f"{expr.to_sql()} raises at every row")
    err = None if v.err in (None, "FALSE") else v.err
    ok = None if v.ok in (None, "TRUE") else v.ok
    parts = [v.v] + ([ok] if ok is not None else []) + ([err] if err is not None else [])
    ret = ", ".join(parts)
    lines, used = _live(fn.lines, ret)
    params = tuple((name, recipe) for name, recipe in fn.params.items() if name in used)
    body = "\n".join("    " + line for line in lines) or "    pass"
    source = (f"# gpu_mr device value: {_comment(expr.to_sql())}\n\n"
              f"def value({', '.join(name for name, _ in params)}):\n    {fn.doc!r}\n{body}\n"
              f"    return {ret}\n")
    return _ValueProgram(source, params, ok is not None, err is not None,
                         not (gen.double_mul and gen.double_add))


@dataclass
class DeviceValue:
    """A row expression (the argument of ``SUM(A.price * A.volume)``) as
    generated device code, computed at every row with the DEFINE masks'
    templates, so with their exact semantics (three-valued NULLs, BIGINT
    overflow and division by zero flagged as errors).

    Attributes
    ----------
    columns : tuple of str
        The input columns it reads.
    """
    expr: A.Expr = field(repr=False)
    var: Optional[str]
    forms: dict = field(repr=False)
    columns: tuple = field(init=False)

    def __post_init__(self):
        self.columns = tuple(self.forms)

    def evaluate(self, xp, columns: dict, n_rows: int) -> Optional[tuple]:
        """``(values, valid or None)``: int64 or float64 per row, with
        the validity where some row is NULL; None when some row raises
        (the host then computes the measure, and its exact error).
        ``columns``: ``{name: (values, valid or None)}`` on the device for
        ``columns``, in any integer or float width (cast here)."""
        nullable = frozenset(name for name in self.columns if columns[name][1] is not None)
        prog = _cached_value_program(self.expr, self.var, tuple(self.forms.items()), nullable)
        args = []
        for _, recipe in prog.params:
            values, valid = columns[recipe[1]]
            if recipe[0] == "values":
                args.append(values.astype(self.forms[recipe[1]].dtype, copy=False))
            else:
                args.append(valid)
        out = _runner(prog.source, xp, prog.fusable, "value")(*args)
        out = out if isinstance(out, tuple) else (out,)
        values = out[0]
        valid = out[1] if prog.has_valid else None
        if prog.has_errors and bool(xp.asarray(out[-1]).any()):
            return None
        n = int(n_rows)
        if getattr(values, "shape", ()) != (n,):        # folded to a scalar
            values = xp.zeros(n, dtype=xp.asarray(values).dtype) + values
        if valid is not None and getattr(valid, "shape", ()) != (n,):
            valid = xp.zeros(n, dtype=np.bool_) | valid
        return values, valid


@functools.lru_cache(maxsize=256)
def _cached_value_program(expr: A.Expr, var: Optional[str], forms_items: tuple,
                          nullable: frozenset) -> _ValueProgram:
    return _generate_value(expr, var, dict(forms_items), nullable)


def compile_device_value(expr: A.Expr, var: Optional[str],
                         schema: pa.Schema) -> Union[DeviceValue, str]:
    """``expr`` (a row expression over the columns of ``var``'s rows, or
    unqualified ones for ``var`` None) as a :class:`DeviceValue`, or the
    reason the device does not compute it.

    >>> import numpy as np
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"ts": [1, 2, 3], "p": [1.5, 2.0, None], "v": [10, 20, 30]})
    >>> q = analyze(parse_clause("ORDER BY ts MEASURES SUM(A.p * A.v) AS pv "
    ...                          "PATTERN (A+) DEFINE A AS v > 0"), t.schema)
    >>> arg = q.measures[0].expr.args[0]
    >>> value = compile_device_value(arg, "A", t.schema)
    >>> cols = {"p": (np.array([1.5, 2.0, 0.0]), np.array([True, True, False])),
    ...         "v": (np.array([10, 20, 30]), None)}
    >>> values, valid = value.evaluate(np, cols, 3)
    >>> values.tolist()[:2], valid.tolist()
    ([15.0, 40.0], [True, True, False])
    >>> compile_device_value(q.measures[0].expr, None, t.schema)    # SUM(SUM(...))
    "SUM((A.p * A.v)) inside an aggregate's argument"
    """
    try:
        forms = _value_forms(expr, schema)
        _cached_value_program(expr, var, tuple(forms.items()), frozenset(forms))
    except _Decline as d:
        return str(d)
    return DeviceValue(expr, var, forms)

