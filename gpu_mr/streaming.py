"""MATCH_RECOGNIZE over a stream of record batches, partitions spanning batches.

What: ``match_recognize_batches(batches, clause)`` takes Arrow record batches
already sorted by (PARTITION BY keys, ORDER BY keys) -- a Parquet file of
years of ticks, Spark's Arrow batches -- and yields the output in pieces, as
soon as each match is decided. A partition may span any number of batches.

How: each step matches over ``carry + batch``. Partitions that end inside
that table are complete and handled whole. The last one may go on in the
next batch, so the CPU engine scans it with an open end: matches decided
before the end are emitted, the first search still undecided at the end
(its DFA alive) is left for the next step, and the rows from that search's
start -- plus the few rows PREV needs behind it -- are carried over, with
the partition's match count. The last rows of a batch, whose NEXT(...)
lies in the next batch, are not scanned until it arrives.
Queries the DFA path cannot run (DEFINEs that read the match so far, the
proposal's matching modes, ...) and WITH UNMATCHED ROWS are handled one
complete partition at a time: memory then grows with the largest partition,
not with the stream. When a batch holds data the DFA path cannot answer
exactly (a DEFINE that raises at some row), the stream goes on that way, and
the reference matcher resumes the partition under way from its undecided
search, with the matches already emitted counted.

Memory: for the DFA path, the carry is the open match plus a few rows, so
peak memory is one batch plus the longest match, however long a partition
is. A match that never closes (a pattern still alive at a partition's last
row) is carried until the partition ends, as it must be: whether it matches
depends on rows not read yet.
Cost: every row is scanned once, plus the rows of a match still open at a
batch boundary, which are scanned again with the next batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa

from . import engines, frames
from .analysis import CheckedQuery, analyze
from .errors import DataError, GpuMrError, MatchRuntimeError
from .measures import assemble
from .syntax import ast as A
from .syntax import parse_clause


def match_recognize_batches(batches, clause: str, engine: str = "auto") -> Iterator[pa.Table]:
    """Run a clause over sorted record batches; yield the output in pieces.

    Parameters
    ----------
    batches : pyarrow.RecordBatchReader, pyarrow.Table, or iterable of
        pyarrow.RecordBatch / pyarrow.Table / pandas.DataFrame
        Rows sorted by the clause's PARTITION BY keys, then its ORDER BY
        keys, all with one schema. A partition may span many batches.
    clause : str
        The clause body, as for :func:`gpu_mr.match_recognize`.
    engine : {"auto", "gpu", "cpu", "reference"}
        The engine for each piece; ``auto`` picks as ``match_recognize`` does.
        The CPU and GPU engines carry a partition's open search from batch
        to batch (row-local DEFINEs on the DFA path, state-dependent ones on
        the register machine); otherwise each partition is gathered whole.

    Yields
    ------
    pyarrow.Table
        Consecutive pieces of the result; concatenated, they equal
        ``gpu_mr.match_recognize`` over all the rows. An empty stream yields
        nothing; its clause is still parsed, and checked against the schema
        of a Table or RecordBatchReader.

    Raises
    ------
    DataError
        When the batches are not sorted by the partition and order keys.

    Examples
    --------
    >>> import pyarrow as pa, gpu_mr
    >>> t = pa.table({"ts": list(range(8)), "p": [5., 4., 3., 6., 7., 2., 1., 9.]})
    >>> pieces = gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=3), '''
    ...     ORDER BY ts MEASURES FIRST(A.ts) AS s, LAST(C.ts) AS e
    ...     PATTERN (A B+ C+) DEFINE B AS p < PREV(p), C AS p > PREV(p)''')
    >>> pa.concat_tables(pieces).to_pylist()
    [{'s': 0, 'e': 4}, {'s': 5, 'e': 7}]
    """
    if not isinstance(clause, str):
        raise GpuMrError(f"the clause must be a string of SQL, not {type(clause).__name__}",
                         code="bad_argument")
    parsed = parse_clause(clause)           # its errors whatever the batches hold
    stream = _batches(batches)
    first = next(stream, None)
    if first is None:
        schema = getattr(batches, "schema", None)
        if isinstance(schema, pa.Schema):
            analyze(parsed, frames.plain_schema(schema))
        return
    query = analyze(parsed, first.schema)
    yield from run_stream(query, engines.choose(query, engine), _chain(first, stream))


def run_stream(query: CheckedQuery, engine, tables) -> Iterator[pa.Table]:
    """:func:`match_recognize_batches` for a query already analysed against
    the tables' schema and an engine already chosen (Spark tasks use it)."""
    runner = _StreamRunner(query, engine)
    schema = None
    for number, table in enumerate(tables, 1):
        if schema is None:
            schema = table.schema
        elif table.schema != schema:
            conformed = _conform(table, schema)
            if conformed is None:
                raise DataError(f"every batch must have the schema of the first; batch "
                                f"{number} (counting those with rows) "
                                f"{_schema_difference(table.schema, schema)}",
                                column=_first_differing_column(table.schema, schema),
                                code="bad_batch")
            table = conformed
        yield from runner.feed(table)
    yield from runner.finish()


def _schema_difference(got: pa.Schema, first: pa.Schema) -> str:
    """What differs, in words: the columns missing, added, moved or of
    another type (a pandas chunk with a NaN makes an integer column float)."""
    missing = [n for n in first.names if n not in got.names]
    added = [n for n in got.names if n not in first.names]
    parts = []
    if missing:
        parts.append("lacks " + ", ".join(map(repr, missing)))
    if added:
        parts.append("adds " + ", ".join(map(repr, added)))
    for f in got:
        if f.name in first.names and first.field(f.name).type != f.type:
            parts.append(f"has {f.name!r} as {f.type}, the first batch as "
                         f"{first.field(f.name).type}")
    if not parts:
        parts.append(f"has the columns in another order ({', '.join(got.names)}; the first "
                     f"batch: {', '.join(first.names)})")
    return "; ".join(parts)


def _first_differing_column(got: pa.Schema, first: pa.Schema) -> Optional[str]:
    for name in first.names:
        if name not in got.names or got.field(name).type != first.field(name).type:
            return name
    added = [n for n in got.names if n not in first.names]
    return added[0] if added else None


def _conform(table: pa.Table, schema: pa.Schema) -> Optional[pa.Table]:
    """``table`` cast to ``schema`` where they differ only in string
    layouts (``string`` and ``large_string``: an Arrow batch and a pandas
    one of the same data), else None."""
    def stringy(t):
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    if table.schema.names != schema.names or any(
            a.type != b.type and not (stringy(a.type) and stringy(b.type))
            for a, b in zip(table.schema, schema)):
        return None
    try:
        return table.cast(schema)
    except pa.ArrowException:
        return None


def _batches(source) -> Iterator[pa.Table]:
    if isinstance(source, pa.Table):
        source = source.to_batches()
    elif isinstance(source, pa.RecordBatchReader):
        source = iter(source)
    elif isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        raise GpuMrError("batches must be a pyarrow RecordBatchReader, Table, or an iterable "
                         f"of RecordBatches, not {type(source).__name__}", code="bad_argument")
    for item in source:
        if isinstance(item, pa.RecordBatch):
            item = frames.plain_views(pa.Table.from_batches([item]))
        elif isinstance(item, pa.Table):
            item = frames.plain_views(item)
        elif frames._is_pandas(item):
            item = frames.to_arrow(item)[0]
        elif not isinstance(item, pa.Table):
            raise GpuMrError(f"batches must hold pyarrow RecordBatches or Tables (or pandas "
                             f"DataFrames), found {type(item).__name__}", code="bad_argument")
        if item.num_rows:
            yield item


def _chain(first, rest):
    yield first
    yield from rest


def physical_reach(query: CheckedQuery) -> tuple:
    """(rows PREV can look back, rows NEXT can look ahead) from any row,
    over DEFINE and MEASURES: the sum of the offsets along each nesting."""
    def reach(e: A.Expr, kind: str) -> int:
        own = 0
        if isinstance(e, A.Navigation) and e.kind == kind:
            own = e.offset.value if e.offset is not None else 1
        return own + max((reach(c, kind) for c in e.children()), default=0)
    exprs = list(query.defines.values()) + [m.expr for m in query.measures]
    return (max((reach(e, "PREV") for e in exprs), default=0),
            max((reach(e, "NEXT") for e in exprs), default=0))


def _complete(data, first: int, last: int) -> frames.SortedInput:
    """Partitions ``first .. last-1`` of ``data`` as an input of their own."""
    offsets = data.partition_offsets
    lo, hi = int(offsets[first]), int(offsets[last])
    return frames.SortedInput(data.table.slice(lo, hi - lo), offsets[first:last + 1] - lo,
                              None, True)


@dataclass
class _Carry:
    table: pa.Table          # rows of the unfinished last partition kept for the next step
    scan_from: int = 0       # where scanning resumes in it (rows before: look-back)
    continues: bool = False  # its first row is not the partition's first row
    number_base: int = 0     # matches already emitted for this partition
    rows_before: int = 0     # its rows dropped before the carry (for row numbers in errors)


class _StreamRunner:
    def __init__(self, query: CheckedQuery, engine):
        self.query = query
        self.engine = engine
        self.carry: Optional[_Carry] = None
        # Where the DFA path stopped mid-partition and the reference matcher
        # takes over: (scan_from, number_base, continues, rows_before) of the carry.
        self.resume: Optional[tuple] = None
        self.partitions_before = 0   # partitions finished before this step's first
        self.look_back, self.look_ahead = physical_reach(query)
        from .engines.cpu import choose_path
        # The CPU and GPU engines scan row-local queries batch by batch, and
        # run the register machine batch by batch for state-dependent ones,
        # carrying the open search; other engines get whole partitions.
        path = choose_path(query)[0] if engine.name in ("cpu", "gpu") else None
        self.dfa_path = path == "dfa" and query.empty_matches != "UNMATCHED"
        self.register_path = path == "registers" and query.empty_matches != "UNMATCHED"

    def _sorted(self, table: pa.Table):
        q = self.query
        data = frames.sort_for_matching(table, q.partition_columns, q.order_keys)
        if not data.was_sorted:
            keys = ", ".join(list(q.partition_columns) + [k[0] for k in q.order_keys])
            raise DataError(f"the batches must arrive sorted by ({keys}): rows out of order "
                            f"at or before this batch", code="unsorted_batches")
        return data

    def feed(self, batch: pa.Table) -> Iterator[pa.Table]:
        if batch.num_rows == 0:
            return
        if self.carry is not None and not (self.dfa_path or self.register_path):
            # A whole partition is being gathered: while the batch only goes
            # on with it, check the order at the seam and in the batch alone
            # and keep gathering (zero-copy), so each row is checked once.
            last = self.carry.table.num_rows - 1
            seam = self._sorted(pa.concat_tables([self.carry.table.slice(last), batch]))
            if seam.num_partitions == 1:
                self.carry = _Carry(pa.concat_tables([self.carry.table, batch]))
                return
        work = batch if self.carry is None else pa.concat_tables([self.carry.table, batch])
        yield from self._step(work, final=False)

    def finish(self) -> Iterator[pa.Table]:
        # An empty carry (the last batch's last search ended at its last row)
        # leaves nothing to match.
        if self.carry is not None and self.carry.table.num_rows:
            yield from self._step(self.carry.table, final=True)
        self.carry = None

    def _step(self, work: pa.Table, final: bool) -> Iterator[pa.Table]:
        data = self._sorted(work)
        try:
            if self.dfa_path:
                out = self._dfa_step(data, final)
            elif self.register_path:
                out = self._register_step(data, final)
            else:
                out = self._whole_partitions_step(data, final)
        except MatchRuntimeError as exc:
            # Partitions count from the stream's first, not this step's.
            if isinstance(exc.partition, (int, np.integer)):
                exc.partition = int(exc.partition) + self.partitions_before
            raise
        # Every partition of this step but the last is finished (the last
        # too when final); the next step starts at the last.
        self.partitions_before += data.num_partitions - (0 if final else 1)
        if out is not None and out.num_rows:
            yield out

    def _whole_partitions_step(self, data, final: bool) -> Optional[pa.Table]:
        offsets = data.partition_offsets
        done = len(offsets) - 1 if final else len(offsets) - 2
        cut = int(offsets[done])
        self.carry = None if final else _Carry(data.table.slice(cut))
        if done <= 0:
            return None
        pieces = []
        first = 0
        if self.resume is not None:
            # The partition the DFA path left mid-way: the reference matcher
            # goes on from the undecided search, with the match count so far.
            from .engines.reference import find_matches_from
            head = _complete(data, 0, 1)
            pieces.append(assemble(self.query, head,
                                   find_matches_from(self.query, head, *self.resume)))
            self.resume, first = None, 1
        if first < done:
            rest = _complete(data, first, done)
            try:
                found = self.engine.find_matches(self.query, rest)
            except MatchRuntimeError as exc:       # numbered within ``rest``
                if isinstance(exc.partition, (int, np.integer)):
                    exc.partition = int(exc.partition) + first
                raise
            pieces.append(assemble(self.query, rest, found))
        return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]

    def _dfa_step(self, data, final: bool) -> Optional[pa.Table]:
        carry = self.carry or _Carry(None)
        prepared = self.engine.prepare(self.query, data)
        if isinstance(prepared, str):
            # This data needs the reference matcher (a DEFINE raises at some
            # row, ...): from here on, whole partitions; the partition under
            # way resumes where the DFA path stopped.
            self.dfa_path = False
            if self.carry is not None:
                self.resume = (carry.scan_from, carry.number_base, carry.continues,
                               carry.rows_before)
            return self._whole_partitions_step(data, final)
        matches, resume = self.engine.scan_to_matches(
            self.query, data, *prepared, scan_from=carry.scan_from, continues=carry.continues,
            open_end=not final, end_margin=self.look_ahead, number_base=carry.number_base,
            rows_before=carry.rows_before)
        return self._carry_on(data, matches, resume, final, carry)

    def _register_step(self, data, final: bool) -> Optional[pa.Table]:
        """The register machine over this batch (engines/registers.py
        ``find_matches_in_batch``), the open search carried as the DFA path
        carries it; where a partition needs the reference engine, whole
        partitions from here on, the one under way resumed where this path
        stopped."""
        from .engines.registers import find_matches_in_batch
        carry = self.carry or _Carry(None)
        got = find_matches_in_batch(self.query, data, scan_from=carry.scan_from,
                                    continues=carry.continues, open_end=not final,
                                    end_margin=self.look_ahead, number_base=carry.number_base)
        if got is None:
            self.register_path = False
            if self.carry is not None:
                self.resume = (carry.scan_from, carry.number_base, carry.continues,
                               carry.rows_before)
            return self._whole_partitions_step(data, final)
        return self._carry_on(data, *got, final, carry)

    def _carry_on(self, data, matches, resume: int, final: bool, carry: _Carry):
        """The output of a batch's matches, the rows kept for the next batch
        (from its undecided search less PREV's reach) noted."""
        offsets = data.partition_offsets
        if not final:
            last = len(offsets) - 2
            lo = int(offsets[last])
            # Keep the partition's last row even when no search is undecided:
            # without it the next batch could not tell whether its first row
            # goes on with this partition (and its match count) or not.
            keep_from = max(lo, min(resume, int(offsets[last + 1]) - 1) - self.look_back)
            continues = keep_from > lo or (last == 0 and carry.continues)
            in_last = int((matches.partition == last).sum())
            base = carry.number_base if last == 0 else 0
            before = (carry.rows_before if last == 0 else 0) + keep_from - lo
            self.carry = _Carry(data.table.slice(keep_from), resume - keep_from, continues,
                                base + in_last, before)
        return assemble(self.query, data, matches)
