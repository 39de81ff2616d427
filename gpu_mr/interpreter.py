"""Row-at-a-time interpreter of checked DEFINE and MEASURES expressions.

What: evaluates one typed expression against a :class:`MatchView` (a match,
or a partial match while DEFINE is being tested) and returns a Python value
(see gpu_mr/syntax/types.py for the value forms; None is NULL). It is the
semantics of DESIGN.md §4 written out plainly, shared by the reference engine
(DEFINE) and by measures.py (MEASURES), so both read the same rules.
Cost: each evaluation walks the match rows it needs; slow by design, the
vectorised engines are measured against it.
"""

from __future__ import annotations

import datetime as _dt
import math
import operator
import re
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Optional

from .analysis import CheckedQuery
from .errors import DataError
from .syntax import ast as A
from .syntax import types as T

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
# SQL comparison operators; numpy arrays accept the same functions elementwise.
COMPARISONS = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le,
               ">": operator.gt, ">=": operator.ge}


@dataclass
class MatchView:
    """What an expression can see.

    Rows are absolute indices into the sorted input. ``labels[i]`` is the
    variable id of row ``start + i``; labels are known for rows
    ``start .. start + len(labels) - 1``. ``current`` is the current row
    (None for an empty match), ``running_end`` the last row RUNNING
    semantics may see, ``final_end`` the last row of the whole match.
    """
    lo: int                      # partition bounds [lo, hi)
    hi: int
    start: int
    labels: list
    current: Optional[int]
    running_end: int
    final_end: int
    match_number: int


class Interpreter:
    def __init__(self, query: CheckedQuery, columns: dict):
        """``columns``: resolved input column name -> list of values, indexed
        by absolute (sorted) row."""
        self.q = query
        self.columns = columns
        # CURRENT_TIMESTAMP and friends are fixed for the whole query, as in SQL.
        now = _dt.datetime.now(_dt.timezone.utc)
        local = _dt.datetime.now()
        self.now = {
            "CURRENT_TIMESTAMP": _to_ns(now.replace(tzinfo=None)),
            "LOCALTIMESTAMP": _to_ns(local),
            "CURRENT_DATE": local.date(),
        }
        self.var_names = query.primary_vars
        ids = {name: i for i, name in enumerate(query.primary_vars)}
        self.var_sets: dict = {name: frozenset([i]) for name, i in ids.items()}
        for name, members in query.subsets.items():
            self.var_sets[name] = frozenset(ids[m] for m in members)

    # ---------------------------------------------------------------- rows
    def rows_of(self, var: Optional[str], view: MatchView, upto: int) -> list:
        """Rows of the match mapped to ``var`` (None: every row), up to ``upto``."""
        last = min(upto, view.start + len(view.labels) - 1)
        if var is None:
            return list(range(view.start, last + 1))
        ids = self.var_sets[var]
        return [view.start + i for i in range(last - view.start + 1) if view.labels[i] in ids]

    def last_row_of(self, var: Optional[str], view: MatchView) -> Optional[int]:
        if var is None:
            return view.current
        ids = self.var_sets[var]
        last = min(view.running_end, view.start + len(view.labels) - 1)
        for r in range(last, view.start - 1, -1):
            if view.labels[r - view.start] in ids:
                return r
        return None

    def label_at(self, view: MatchView, row: Optional[int]) -> Optional[str]:
        if row is None or not view.start <= row < view.start + len(view.labels):
            return None
        return self.var_names[view.labels[row - view.start]]

    # ---------------------------------------------------------------- eval
    def eval(self, e: A.Expr, view: MatchView, at: Optional[int] = None):
        """Value of ``e``. ``at``: inside navigation or an aggregate, the row
        every column reference and CLASSIFIER reads."""
        return getattr(self, "_" + type(e).__name__)(e, view, at)

    def _Literal(self, e: A.Literal, view, at):
        return e.value

    def _ColumnRef(self, e: A.ColumnRef, view, at):
        row = at if at is not None else self.last_row_of(e.var, view)
        if row is None:
            return None
        return self.columns[e.resolved][row]

    def _Classifier(self, e: A.Classifier, view, at):
        row = at if at is not None else self.last_row_of(e.var, view)
        return self.label_at(view, row)

    def _MatchNumber(self, e, view, at):
        return view.match_number

    def _Navigation(self, e: A.Navigation, view, at):
        row = self.navigate(e, view)
        if row is None:
            return None
        inner = e.arg.arg if isinstance(e.arg, A.Navigation) else e.arg
        return self.eval(inner, view, row)

    def navigate(self, e: A.Navigation, view: MatchView) -> Optional[int]:
        """The row a navigation lands on, or None."""
        offset = e.offset.value
        if e.kind in ("FIRST", "LAST"):
            upto = view.final_end if e.semantics == "FINAL" else view.running_end
            rows = self.rows_of(_nav_var(e.arg), view, upto)
            idx = offset if e.kind == "FIRST" else len(rows) - 1 - offset
            return rows[idx] if 0 <= idx < len(rows) else None
        if isinstance(e.arg, A.Navigation):
            base = self.navigate(e.arg, view)
        else:
            base = self.last_row_of(_nav_var(e.arg), view)
        if base is None:
            return None
        target = base - offset if e.kind == "PREV" else base + offset
        return target if view.lo <= target < view.hi else None

    def _Aggregate(self, e: A.Aggregate, view, at):
        upto = view.final_end if e.semantics == "FINAL" else view.running_end
        rows = self.rows_of(e.var, view, upto)
        if e.star:
            return len(rows)
        values = [[self.eval(a, view, r) for r in rows] for a in e.args]
        return aggregate(e, values)

    def _Unary(self, e: A.Unary, view, at):
        v = self.eval(e.operand, view, at)
        if v is None:
            return None
        if e.op == "NOT":
            return not v
        if e.op == "-":
            return _check_int(-v, e) if isinstance(v, int) and not isinstance(v, bool) else -v
        return v

    def _Binary(self, e: A.Binary, view, at):
        if e.op in ("AND", "OR"):
            left = self.eval(e.left, view, at)
            if e.op == "AND" and left is False:
                return False
            if e.op == "OR" and left is True:
                return True
            right = self.eval(e.right, view, at)
            if e.op == "AND":
                if right is False:
                    return False
                return None if None in (left, right) else True
            if right is True:
                return True
            return None if None in (left, right) else False
        left = self.eval(e.left, view, at)
        right = self.eval(e.right, view, at)
        return binary(e, left, right, e.left.type, e.right.type)

    def _Between(self, e: A.Between, view, at):
        v = self.eval(e.operand, view, at)
        lo = self.eval(e.low, view, at)
        hi = self.eval(e.high, view, at)
        ge = compare(">=", v, lo)
        le = compare("<=", v, hi)
        result = _and3(ge, le)
        return result if not e.negated or result is None else not result

    def _InList(self, e: A.InList, view, at):
        v = self.eval(e.operand, view, at)
        if v is None:
            return None
        saw_null = False
        for item in e.items:
            x = self.eval(item, view, at)
            eq = compare("=", v, x)
            if eq is True:
                return not e.negated
            if eq is None:
                saw_null = True
        if saw_null:
            return None
        return e.negated

    def _IsNull(self, e: A.IsNull, view, at):
        v = self.eval(e.operand, view, at)
        return (v is not None) if e.negated else (v is None)

    def _Case(self, e: A.Case, view, at):
        if e.operand is not None:
            subject = self.eval(e.operand, view, at)
            for value, result in e.whens:
                if compare("=", subject, self.eval(value, view, at)) is True:
                    return coerce(self.eval(result, view, at), e.type)
        else:
            for cond, result in e.whens:
                if self.eval(cond, view, at) is True:
                    return coerce(self.eval(result, view, at), e.type)
        if e.else_ is not None:
            return coerce(self.eval(e.else_, view, at), e.type)
        return None

    def _Cast(self, e: A.Cast, view, at):
        return cast(self.eval(e.operand, view, at), e.operand.type, e.target, e)

    def _Call(self, e: A.Call, view, at):
        if e.name in self.now:
            return self.now[e.name]
        args = [self.eval(a, view, at) for a in e.args]
        return call(e, args)


def _to_ns(t: _dt.datetime) -> int:
    delta = t - T.EPOCH
    return (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000


def _nav_var(arg: A.Expr) -> Optional[str]:
    """The pattern variable a navigation argument refers to (None: universal)."""
    for n in arg.walk():
        if isinstance(n, (A.ColumnRef, A.Classifier)):
            return n.var
    return None


# ------------------------------------------------------------ operations

def _and3(a, b):
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _check_int(v: int, e: A.Expr) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise DataError(f"integer overflow evaluating {e.to_sql()} (at line {e.pos.line}, "
                        f"column {e.pos.column})", code="overflow")
    return v


def _as_ns(v):
    """DATE values compare and compute as midnight timestamps."""
    if isinstance(v, _dt.date):
        return (v - T.EPOCH_DATE).days * 86400 * 10**9
    return v


def compare(op: str, a, b):
    if a is None or b is None:
        return None
    if isinstance(a, _dt.date) != isinstance(b, _dt.date):
        a, b = _as_ns(a), _as_ns(b)
    if isinstance(a, Decimal) and isinstance(b, float):
        a = float(a)
    elif isinstance(b, Decimal) and isinstance(a, float):
        b = float(b)
    return COMPARISONS[op](a, b)


def _add_months(ns: int, months: int) -> int:
    days, rem = divmod(ns, 86400 * 10**9)
    d = T.EPOCH_DATE + _dt.timedelta(days=days)
    d2 = _add_months_date(d, months)
    return (d2 - T.EPOCH_DATE).days * 86400 * 10**9 + rem


def _add_months_date(d: _dt.date, months: int) -> _dt.date:
    total = d.year * 12 + (d.month - 1) + months
    year, month = divmod(total, 12)
    month += 1
    next_month = _dt.date(year + (month == 12), month % 12 + 1, 1)
    last_day = (next_month - _dt.timedelta(days=1)).day
    return _dt.date(year, month, min(d.day, last_day))


def binary(e: A.Binary, a, b, ta: T.SqlType, tb: T.SqlType):
    op = e.op
    if op in ("=", "<>", "<", "<=", ">", ">="):
        return compare(op, a, b)
    if a is None or b is None:
        return None
    if op == "||":
        return to_text(a, ta) + to_text(b, tb)
    kind = e.type.kind
    if kind == "DOUBLE":
        a, b = float(a), float(b)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            if b == 0.0:
                return math.nan if a == 0.0 or math.isnan(a) else math.copysign(math.inf, a) * (
                    math.copysign(1.0, b))
            return a / b
        if b == 0.0 or math.isinf(a):
            return math.nan         # C's fmod (masks, kernels); Python's fmod raises on inf
        return math.fmod(a, b)
    if kind in ("BIGINT", "DECIMAL") and ta.is_numeric and tb.is_numeric:
        if kind == "DECIMAL":
            a, b = Decimal(a), Decimal(b)
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        else:
            if b == 0:
                raise DataError(f"division by zero in {e.to_sql()} (at line {e.pos.line}, "
                                f"column {e.pos.column})", code="division_by_zero")
            q = abs(a) // abs(b) if kind == "BIGINT" else abs(a) / abs(b)
            if kind == "DECIMAL" and op == "%":
                q = q.to_integral_value(rounding="ROUND_DOWN")
            q = q if (a >= 0) == (b >= 0) else -q
            r = q if op == "/" else a - b * q
        return _check_int(r, e) if kind == "BIGINT" else r
    # temporal arithmetic: Python's dates end at year 9999 and its ints take
    # no NaN; both give the named errors the vectorised masks give
    try:
        return _temporal(e, a, b, ta, tb)
    except (ValueError, OverflowError):
        where = f"in {e.to_sql()} (at line {e.pos.line}, column {e.pos.column})"
        if kind in ("INTERVAL", "INTERVAL_YM") and op in ("*", "/"):
            raise DataError(f"cannot convert a non-finite number to an interval {where}",
                            code="bad_operation") from None
        raise DataError(f"date out of range {where}", code="date_out_of_range") from None


def _temporal(e: A.Binary, a, b, ta: T.SqlType, tb: T.SqlType):
    """``a op b`` for DATE, TIMESTAMP and INTERVAL operands (none NULL)."""
    op, kind = e.op, e.type.kind
    ka, kb = ta.kind, tb.kind
    if kind == "TIMESTAMP":
        if ka == "INTERVAL_YM" or kb == "INTERVAL_YM":
            ts, months = (a, b) if kb == "INTERVAL_YM" else (b, a)
            return _add_months(_as_ns(ts), months if op == "+" else -months)
        a, b = _as_ns(a), _as_ns(b)
        return a + b if op == "+" else a - b
    if kind == "DATE":
        if ka != "DATE":
            a, b, ka, kb = b, a, kb, ka          # INTERVAL + DATE
        if kb == "INTERVAL_YM":
            return _add_months_date(a, b if op == "+" else -b)
        if kb == "INTERVAL":
            ns = _as_ns(a) + (b if op == "+" else -b)
            return T.EPOCH_DATE + _dt.timedelta(days=ns // (86400 * 10**9))
        return a + _dt.timedelta(days=b if op == "+" else -b)
    if kind == "INTERVAL" and ka in ("DATE", "TIMESTAMP"):
        return _as_ns(a) - _as_ns(b)
    if kind in ("INTERVAL", "INTERVAL_YM"):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return int(a * b)
        if b == 0:
            raise DataError(f"division by zero in {e.to_sql()}", code="division_by_zero")
        return int(a / b)
    raise DataError(f"cannot evaluate {e.to_sql()}", code="bad_operation")


def to_text(v, t: T.SqlType) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if t.kind == "TIMESTAMP":
        return T.timestamp_to_text(v)
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, float):
        return repr(v)
    if t.kind == "DECIMAL" and isinstance(v, Decimal):
        return str(v.quantize(Decimal(1).scaleb(-t.scale))) if t.scale else str(int(v))
    return str(v)


def coerce(v, t: T.SqlType):
    """A value of a subtype brought to ``t`` (CASE/COALESCE/GREATEST results)."""
    if v is None:
        return None
    if t.kind == "DOUBLE" and not isinstance(v, float):
        return float(v)
    if t.kind == "DECIMAL" and isinstance(v, int):
        return Decimal(v)
    if t.kind == "TIMESTAMP" and isinstance(v, _dt.date):
        return _as_ns(v)
    return v


def _round_half_up(x: Decimal, digits: int = 0) -> Decimal:
    return x.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)


def _round_function(x: Decimal, digits: int) -> Decimal:
    """ROUND(x, digits) half away from zero, for any magnitude: quantize
    raises InvalidOperation when the result has more digits than its
    context's precision (28 by default), and ROUND(1e308, 1) needs 311."""
    prec = max(28, max(x.adjusted(), 0) + max(digits, 0) + 2) if x.is_finite() else 28
    if prec > 100_000:          # far more digits than any value here has: nothing to round
        return x
    if x.is_finite() and -digits > x.adjusted() + 1:
        # below half the rounding unit: 0 (quantize's exponent would pass its
        # limit for digits near -2**63)
        return Decimal(0).copy_sign(x)
    context = Context(prec=prec, rounding=ROUND_HALF_UP, Emax=MAX_EMAX, Emin=MIN_EMIN)
    return x.quantize(Decimal(1).scaleb(-digits, context), context=context)


def cast(v, src: T.SqlType, dst: T.SqlType, e: A.Expr):
    if v is None:
        return None
    k = dst.kind
    try:
        if k == "VARCHAR":
            return to_text(v, src)
        if k == "BIGINT":
            if isinstance(v, bool):
                return int(v)
            if isinstance(v, str):
                return _check_int(int(v.strip()), e)
            if isinstance(v, float):
                if math.isnan(v) or math.isinf(v):
                    raise ValueError
                return _check_int(int(_round_half_up(Decimal(repr(v)))), e)
            if isinstance(v, Decimal):
                return _check_int(int(_round_half_up(v)), e)
            return v
        if k == "DOUBLE":
            return float(v.strip()) if isinstance(v, str) else float(v)
        if k == "DECIMAL":
            d = Decimal(v.strip()) if isinstance(v, str) else (
                Decimal(repr(v)) if isinstance(v, float) else Decimal(v))
            d = _round_half_up(d, dst.scale)
            if len(d.as_tuple().digits) > dst.precision and d != 0:
                raise DataError(f"value {d} does not fit {dst.sql_name()} in {e.to_sql()}",
                                code="overflow")
            return d
        if k == "BOOLEAN":
            if isinstance(v, str):
                s = v.strip().lower()
                if s in ("true", "t", "1"):
                    return True
                if s in ("false", "f", "0"):
                    return False
                raise ValueError
            return bool(v)
        if k == "DATE":
            if isinstance(v, str):
                d = T.date_from_text(v)
                if d is None:
                    raise ValueError
                return d
            if src.kind == "TIMESTAMP":
                return T.EPOCH_DATE + _dt.timedelta(days=v // (86400 * 10**9))
            return v
        if k == "TIMESTAMP":
            if isinstance(v, str):
                ns = T.timestamp_from_text(v)
                if ns is None:
                    raise ValueError
                return ns
            return _as_ns(v)
    except (ValueError, InvalidOperation, OverflowError):
        raise DataError(f"cannot cast {v!r} to {dst.sql_name()} in {e.to_sql()} (at line "
                        f"{e.pos.line}, column {e.pos.column})", code="bad_cast") from None
    return v


def _like_regex(pattern: str, escape: Optional[str]) -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _math(fn, x: float) -> float:
    try:
        return fn(x)
    except ValueError:
        if fn is math.log and x == 0:
            return -math.inf
        return math.nan
    except OverflowError:
        return math.inf


def call(e: A.Call, args: list):
    name = e.name
    t = e.type
    if name == "COALESCE":
        return next((coerce(a, t) for a in args if a is not None), None)
    if name == "NULLIF":
        return None if compare("=", args[0], args[1]) is True else args[0]
    if name == "CONCAT":
        if any(a is None for a in args):
            return None
        return "".join(to_text(a, x.type) for a, x in zip(args, e.args))
    if any(a is None for a in args):
        return None
    x = args[0]
    if name == "ABS":
        return _check_int(abs(x), e) if isinstance(x, int) else abs(x)
    if name == "SIGN":
        s = (x > 0) - (x < 0)
        return float(s) if isinstance(x, float) else (Decimal(s) if isinstance(x, Decimal) else s)
    if name == "ROUND":
        digits = args[1] if len(args) > 1 else 0
        if isinstance(x, float):
            if math.isnan(x) or math.isinf(x):
                return x
            return float(_round_function(Decimal(repr(x)), digits))
        if isinstance(x, Decimal):
            return _round_function(x, digits)
        if digits >= 0:
            return x
        return _check_int(int(_round_function(Decimal(x), digits)), e)
    if name in ("FLOOR", "CEIL", "CEILING"):
        f = math.floor if name == "FLOOR" else math.ceil
        if isinstance(x, float):
            return x if math.isnan(x) or math.isinf(x) else float(f(x))
        if isinstance(x, Decimal):
            return Decimal(f(x))
        return x
    if name == "SQRT":
        return _math(math.sqrt, float(x))
    if name == "LN":
        return _math(math.log, float(x))
    if name == "LOG10":
        return _math(math.log10, float(x))
    if name == "EXP":
        return _math(math.exp, float(x))
    if name in ("POWER", "POW"):
        try:
            return math.pow(float(x), float(args[1]))
        except ValueError:
            return math.nan
        except OverflowError:
            return math.inf
    if name == "MOD":
        fake = A.Binary(pos=e.pos, op="%", left=e.args[0], right=e.args[1], type=t)
        return binary(fake, x, args[1], e.args[0].type, e.args[1].type)
    if name in ("GREATEST", "LEAST"):
        values = [coerce(a, t) for a in args]
        return max(values) if name == "GREATEST" else min(values)
    if name == "LOWER":
        return x.lower()
    if name == "UPPER":
        return x.upper()
    if name == "TRIM":
        return x.strip(" ")
    if name == "LTRIM":
        return x.lstrip(" ")
    if name == "RTRIM":
        return x.rstrip(" ")
    if name in ("LENGTH", "CHAR_LENGTH"):
        return len(x)
    if name == "REPLACE":
        return x.replace(args[1], args[2])
    if name == "SUBSTR":
        start = args[1]
        if start == 0:
            return ""
        if start < 0:
            start = len(x) + start + 1
            if start < 1:
                return ""
        begin = start - 1
        if len(args) > 2:
            length = args[2]
            if length < 0:
                return ""
            return x[begin:begin + length]
        return x[begin:]
    if name == "LIKE":
        escape = args[2] if len(args) > 2 else None
        return _like_regex(args[1], escape).fullmatch(x) is not None
    raise DataError(f"unknown function {name}", code="unknown_function")


def aggregate(e: A.Aggregate, values: list):
    """Aggregate the per-row argument values (one list per argument)."""
    name = e.name
    xs = values[0]
    if e.distinct:
        seen, unique = set(), []
        for v in xs:
            key = (type(v), v) if v is not None else None
            if key not in seen:
                seen.add(key)
                unique.append(v)
        xs = unique
    present = [v for v in xs if v is not None]
    if name == "COUNT":
        return len(present)
    if name == "COUNT_IF":
        return sum(1 for v in present if v is True)
    if name == "ARRAY_AGG":
        return list(xs) if xs else None
    if name in ("MAX_BY", "MIN_BY"):
        best, best_key = None, None
        for x, y in zip(values[0], values[1]):
            if y is None:
                continue
            if best_key is None or (compare(">", y, best_key) if name == "MAX_BY"
                                    else compare("<", y, best_key)):
                best, best_key = x, y
        return best
    if not present:
        return None
    t = e.type
    if name == "SUM":
        if t.kind == "DOUBLE":
            return float(sum(float(v) for v in present))
        total = sum(present[1:], present[0])
        return _check_int(total, e) if t.kind == "BIGINT" else total
    if name == "AVG":
        if t.kind == "INTERVAL":
            total = sum(present)
            q = abs(total) // len(present)
            return q if total >= 0 else -q
        if isinstance(present[0], Decimal):
            return float(sum(present) / len(present))
        return float(sum(present)) / len(present) if isinstance(present[0], int) \
            else sum(float(v) for v in present) / len(present)
    if name == "MIN":
        return min(present, key=_as_ns) if isinstance(present[0], _dt.date) else min(present)
    if name == "MAX":
        return max(present, key=_as_ns) if isinstance(present[0], _dt.date) else max(present)
    if name in ("BOOL_AND", "EVERY"):
        return all(present)
    if name == "BOOL_OR":
        return any(present)
    if name == "ANY_VALUE":
        return present[0]
    if name in ("STDDEV", "STDDEV_SAMP", "STDDEV_POP", "VARIANCE", "VAR_SAMP", "VAR_POP"):
        n = len(present)
        sample = name in ("STDDEV", "STDDEV_SAMP", "VARIANCE", "VAR_SAMP")
        if sample and n < 2:
            return None
        fs = [float(v) for v in present]
        mean = sum(fs) / n
        var = sum((v - mean) ** 2 for v in fs) / (n - 1 if sample else n)
        return math.sqrt(var) if name.startswith("STDDEV") else var
    raise DataError(f"unknown aggregate {name}", code="unknown_function")
