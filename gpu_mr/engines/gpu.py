"""The GPU engine: the whole pipeline on a CUDA device (or numba's CUDA
simulator), from the sort to the measures.

What: ``run_input`` runs a ONE ROW PER MATCH query whose DEFINEs are
row-local and whose measures are in the device subset entirely on the
device: the columns it reads come from a ``device_input.DeviceInput`` (a
pyarrow Table's moved once through pinned staging, or a cuDF frame's
shared), the rows are put in matching order there (device_frames.py: a
sortedness check, else a stable sort), the DEFINE masks are evaluated there
(predicates/device_masks.py: generated elementwise code over cupy arrays)
and bit-packed into per-row class bitmasks, the leftmost-first DFA
(pattern/dfa.py, the CPU engine's) is explored over the classes present,
the scan and path recovery run as ``numba.cuda`` kernels compiled from the
CPU engine's own kernel bodies (kernels/gpu_scan.py: speculative chunks of
partitions with boundary repair, so one huge partition uses the whole
device), matches are compacted and numbered with prefix sums, and the
measures are computed one thread per match (device_measures.py); only the
per-match results come back. Other queries (ALL ROWS PER MATCH, measures
outside that subset, time limits) take ``find_matches``: sorted on the host
(frames.py), matched on the device as above, the ``MatchArrays`` back to the
host for measures.py. Queries whose DEFINEs depend on the match so far run
on the register machine on the device (engines/gpu_registers.py), or on the
CPU engine's where the device's cannot hold them or the partitions are too
few to fill it; ``last_run`` and explain() say which.

Exactness, as the CPU engine: DEFINEs outside the device subset, or data
where a device mask would raise or be inexact, are evaluated by the host
masks (whose class bytes then move to the device); where those fail, or the
DFA is past its state cap, the reference engine's matcher answers. Under
``NUMBA_ENABLE_CUDASIM=1`` numpy stands in for cupy and the kernels run in
numba's simulator: this is how CI runs this engine's own code path;
``engine="auto"`` never picks the simulator.

Cost on a device: one transfer of the columns read (none for data already
there), the order check (a sort when unsorted), one fused pass per
predicate set, one pass over the class ids for the classes present, O(rows)
scan plus the boundary replays, O(match length) recovery and measures,
O(matches) compaction and results; per row the scan needs about 11 bytes of
scratch besides the columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from .. import backend as B
from ..analysis import CheckedQuery
from ..frames import SortedInput
from ..pattern.dfa import Dfa, DfaTooLarge
from ..pattern.nfa import compile_nfa
from ..predicates import masks as M
from ..errors import MatchRuntimeError
from .base import MatchArrays, as_match_arrays, skip_error
from .cpu import (_DIRECT_MAX_VARS, _SKIP_MODES, CpuEngine, RunInfo, class_bits,
                  skip_variables)
from .reference import ReferenceEngine


class GpuEngine:
    name = "gpu"

    def __init__(self, cpu: Optional[CpuEngine] = None):
        self.last_run = RunInfo()
        self.chunk_rows: Optional[int] = None     # None: the device's default
        self.max_rows: Optional[int] = None       # rows per device run; None: from free memory
        self._cpu = cpu or CpuEngine()
        self._plan = None       # (query, MaskSet, device mask set or reason, Dfa)
        self._declined = None   # (query, why run_input left it to the host-sorted path)

    @property
    def simulated(self) -> bool:
        found = B.detect()
        return not isinstance(found, str) and found.simulated

    def supports(self, query: CheckedQuery) -> Optional[str]:
        found = B.detect()
        if isinstance(found, str):
            return found
        return self._cpu.path_of(query)[1]

    def path_of(self, query: CheckedQuery) -> str:
        """"device" (masks and DFA on the device), "device registers" (the
        register machine on the device) or "cpu registers" (the CPU
        engine's, where the device's cannot hold the query)."""
        if self._cpu.path_of(query)[0] != "registers":
            return "device"
        from .gpu_registers import device_registers_reason
        return "cpu registers" if device_registers_reason(query) else "device registers"

    def find_matches(self, query: CheckedQuery, data: SortedInput):
        path = self.path_of(query)
        backend = B.detect()
        if (path == "device registers" and not backend.simulated
                and data.num_partitions < REGISTERS_MIN_PARTITIONS):
            matches = self._cpu.find_matches(query, data)
            self.last_run = RunInfo("cpu registers", "a DEFINE depends on the match so far, "
                                    f"and {data.num_partitions:,} partitions are too few for "
                                    "the device's register machine (one thread each): the "
                                    "CPU engine's runs it")
            return matches
        if path == "device registers":
            from .gpu_registers import find_matches_on_device
            try:
                matches = find_matches_on_device(backend, query, data)
            except Exception as exc:
                if not backend.is_out_of_memory(exc):
                    raise
                backend.release_memory()
                self.last_run = RunInfo("cpu registers", "a DEFINE depends on the match so "
                                        f"far; the device ran out of memory ({exc}): the "
                                        "CPU engine's register machine runs it")
                return self._cpu.find_matches(query, data)
            self.last_run = RunInfo(path, "a DEFINE depends on the match so far: the register "
                                    "machine runs on the device, one thread per partition")
            return matches
        if path == "cpu registers":
            from .gpu_registers import device_registers_reason
            matches = self._cpu.find_matches(query, data)
            self.last_run = RunInfo(path, "a DEFINE depends on the match so far, and the "
                                    "device's register machine cannot run it ("
                                    f"{device_registers_reason(query)}): the CPU engine's does")
            return matches
        if data.table.num_rows == 0:
            self.last_run = RunInfo("device", "no rows")
            return MatchArrays.empty()
        offsets = data.partition_offsets
        budget = self.max_rows or device_row_budget(backend, data.table.num_rows)
        groups = partition_groups(offsets, budget)
        pieces, notes = [], []
        for first, last in groups:
            part = data if len(groups) == 1 else _partitions(data, first, last)
            try:
                found = self._run_group(backend, query, part, notes)
            except MatchRuntimeError as exc:        # numbered within this group
                if isinstance(exc.partition, (int, np.integer)):
                    exc.partition = int(exc.partition) + first
                if isinstance(exc.row, (int, np.integer)):
                    exc.row = int(exc.row) + int(offsets[first])
                raise
            pieces.append((first, int(offsets[first]), as_match_arrays(found)))
        if len(groups) > 1:
            notes.append(f"{len(groups)} groups of partitions, each fitting device memory")
        declined, self._declined = self._declined, None
        if declined is not None and declined[0] is query:
            notes.append(declined[1])           # why run_input left it to this path
        if notes:
            self.last_run = RunInfo(self.last_run.path, "; ".join(
                [self.last_run.reason] * bool(self.last_run.reason) + notes),
                self.last_run.dfa_states, self.last_run.classes)
        return pieces[0][2] if len(pieces) == 1 else concat_matches(pieces)

    def stream_rows(self, query: CheckedQuery, data: SortedInput) -> Optional[int]:
        """Rows per slice when a partition of ``data`` is wider than one
        device run takes: the caller then streams the rows through the
        device in slices (streaming.py: each slice's open search carried
        into the next), so that no size is too large for the device. None
        when the partitions fit (groups of whole partitions then run), or
        when the query does not run on the device's DFA path."""
        backend = B.detect()
        if isinstance(backend, str) or self.path_of(query) != "device" or not data.num_partitions:
            return None
        budget = self.max_rows or device_row_budget(backend, data.table.num_rows)
        widest = int(np.diff(data.partition_offsets).max())
        return budget if widest > budget else None

    def note_streamed(self, slice_rows: int) -> None:
        """Say in ``last_run`` that the rows went through in slices."""
        run = self.last_run
        self.last_run = RunInfo(run.path, "; ".join(
            [run.reason] * bool(run.reason) + [f"streamed through the device in slices of "
                                               f"{slice_rows:,} rows: a partition is wider "
                                               "than one device run takes"]),
            run.dfa_states, run.classes, run.scan)

    # -- the whole query on the device ---------------------------------------

    def pipeline_reason(self, query: CheckedQuery, schema: pa.Schema,
                        ranks_keys: bool = True) -> Optional[str]:
        """None when ``run_input`` keeps ``query`` over input of ``schema`` on
        the device from the sort to the measures, else the first stage that
        needs the host (``ranks_keys``: the source orders string keys)."""
        if isinstance(B.detect(), str):
            return B.detect()
        if self.path_of(query) != "device":
            return "a DEFINE depends on the match so far"
        if (query.time_limit is not None
                and query.time_limit.interval.literal_type == "interval_ym"):
            return (f"the time limit {query.time_limit.to_sql()}: calendar months are "
                    "added on the host")
        if not set(query.column_types) <= set(schema.names):
            return "the input's column types are not known yet (give a schema)"
        from .. import device_measures as DMe
        from ..device_input import columns_reason
        device_set = self._plan_for(query, schema)[2]
        if isinstance(device_set, str):
            return f"masks on the host: {device_set}"
        # the masks' and the measures' own checks cover the columns they read
        return DMe.device_measures_reason(query) or columns_reason(
            schema, [], list(query.partition_columns) + [k[0] for k in query.order_keys],
            ranks_keys)

    def run_table(self, query: CheckedQuery, table: pa.Table) -> Optional[pa.Table]:
        """``run_input`` over a pyarrow Table (its columns move to the
        device as the stages first read them)."""
        backend = B.detect()
        if isinstance(backend, str):
            return None
        from ..device_input import from_arrow
        return self.run_input(query, from_arrow(backend, table))

    def run_input(self, query: CheckedQuery, source, on_device: bool = False):
        """The output of ``query`` over the unsorted rows of ``source`` (a
        ``device_input.DeviceInput``), every stage on the device (sort,
        masks, scan, recovery, measures): only the columns the query reads
        go to the device and only per-match results come back, as a
        pyarrow Table. ``on_device``: the output stays on the device
        (a ``device_output.DeviceOutput``) where every output column can
        (measures other than CLASSIFIER and expressions over measures of
        other types than BIGINT and DOUBLE,
        partition keys of fixed-width types); else it comes back as a
        Table. None when a stage needs the host (``last_run`` says which;
        the caller then runs the host-sorted path, which is exact)."""
        reason = self.pipeline_reason(query, source.schema, source.ranks_keys)
        backend = B.detect()
        n = source.num_rows
        if reason is None and not n:
            reason = "no rows"
        if reason is None and n > (self.max_rows or device_row_budget(backend, n)):
            reason = f"{n:,} rows are more than one device run takes"
        if reason is not None:
            self._declined = (query, f"sort and measures on the host: {reason}")
            return None
        try:
            return self._pipeline(backend, query, source, on_device)
        except Exception as exc:
            if not backend.is_out_of_memory(exc):
                raise
            backend.release_memory()
            self._declined = (query, f"sort and measures on the host: the device ran out of "
                              f"memory for {n:,} rows ({exc})")
            return None

    def _pipeline(self, backend, query: CheckedQuery, source, on_device: bool = False):
        from .. import device_measures as DMe
        from ..device_frames import order_on_device
        xp, n = backend.xp, source.num_rows
        _, _, device_set, dfa = self._plan_for(query, source.schema)
        with B.span(backend, "order"):
            order = order_on_device(backend, source, query.partition_columns, query.order_keys)
        offsets = order.offsets

        gathered: dict = {}     # id(array) -> (array, in matching order): once per column

        def sorted_array(a):
            if a is None or order.was_sorted:
                return a
            hit = gathered.get(id(a))
            if hit is None:
                hit = gathered[id(a)] = (a, order.gather(a))    # the key stays alive
            return hit[1]

        def in_order(columns: dict) -> dict:
            return {name: tuple(sorted_array(a) for a in col) for name, col in columns.items()}
        with B.span(backend, "masks"):
            columns = in_order(device_set.load_input(source))
            bits, failed = device_set.evaluate(xp, columns, backend.to_device(offsets), n)
        if failed:
            self._declined = (query, "sort and measures on the host: a device mask raises or "
                              "is inexact at some row")
            return None
        with B.span(backend, "classes"):
            prepared = classes_and_tables(backend, query, dfa, bits)
        if isinstance(prepared, str):
            return None                 # the host path says why the reference engine runs
        classes, tables, n_states, n_classes = prepared
        horizon = None
        if query.time_limit is not None:    # each search's last row in time, on the device
            from ..horizons import device_row_horizons
            clock, clock_valid = (sorted_array(a) for a in source.column(query.time_column))
            with B.span(backend, "horizons"):
                horizon = device_row_horizons(backend, query, clock, clock_valid,
                                              source.schema.field(query.time_column).type,
                                              offsets)
        with B.span(backend, "scan"):
            found, _ = scan(backend, query, classes, offsets, tables, self.chunk_rows,
                            horizon=horizon)
        if DMe.device_measures_need_paths(query):
            with B.span(backend, "recovery"):
                recover(backend, classes, offsets, found, tables, horizon=horizon)
        kept = on_device and _device_keys_reason(query, source.schema) is None
        with B.span(backend, "measures"):
            measure_columns = in_order({name: source.column(name)
                                        for name in DMe.device_measure_columns(query)})
            args = (backend, query, {name: col + (source.schema.field(name).type,)
                                     for name, col in measure_columns.items()}, found)
            values = DMe.measures_on_device(*args, on_device=True) if kept else None
            if not isinstance(values, dict):    # the output comes to the host
                kept, values = False, DMe.measures_on_device(*args)
        if isinstance(values, str):
            self._declined = (query, f"sort and measures on the host: {values}")
            return None
        self.last_run = RunInfo("device", "every stage on the device"
                                + ("" if order.was_sorted else " (input sorted there)")
                                + ("; the output stays there" if kept else ""),
                                n_states, n_classes)
        # partition columns: each match's value at its first row (floats keep
        # that row's -0.0 or 0.0, as the host output does)
        with B.span(backend, "output"):
            source_rows = (found.starts if order.was_sorted
                           else order.rows[found.starts]).astype(np.int64, copy=False)
            if kept:
                from ..device_measures import DeviceColumn
                from ..device_output import DeviceOutput
                for name in query.partition_columns:
                    key, valid = source.column(name)
                    values[name] = DeviceColumn(
                        key[source_rows], None if valid is None else valid[source_rows],
                        source.schema.field(name).type)
                return DeviceOutput(query.output_schema, values, int(source_rows.shape[0]))
            arrays = [values[f.name] if f.name in values else source.take(f.name, source_rows)
                      for f in query.output_schema]
        return pa.Table.from_arrays(arrays, schema=query.output_schema)

    def _run_group(self, backend, query: CheckedQuery, data: SortedInput, notes: list):
        """The matches of one group of partitions on the device; when the
        device runs out of memory, halves of the group, and a single
        partition too large for the device on the CPU engine."""
        try:
            prepared = self.prepare(query, data)
            if isinstance(prepared, str):
                self.last_run = RunInfo("reference", prepared)
                return ReferenceEngine().find_matches(query, data)
            return self.scan_to_matches(query, data, *prepared)[0]
        except Exception as exc:
            if not backend.is_out_of_memory(exc):
                raise
            backend.release_memory()
            n_parts = data.num_partitions
            if n_parts == 1:
                notes.append(f"a partition of {data.table.num_rows:,} rows did not fit "
                             f"device memory ({exc}): the CPU engine ran it")
                return self._cpu.find_row_local(query, data)
        half = data.num_partitions // 2
        lo, hi = _partitions(data, 0, half), _partitions(data, half, data.num_partitions)
        first = as_match_arrays(self._run_group(backend, query, lo, notes))
        second = as_match_arrays(self._run_group(backend, query, hi, notes))
        return concat_matches([(0, 0, first), (half, lo.table.num_rows, second)])

    # -- stages -------------------------------------------------------------

    def _plan_for(self, query: CheckedQuery, schema):
        plan = self._plan                   # one read: another thread may replace it
        if plan is None or plan[0] is not query:
            from ..predicates import device_masks as DM
            reason = DM.device_masks_reason(query, schema)
            device_set = DM.compile_device_masks(query, schema) if reason is None else reason
            plan = (query, M.compile_masks(query), device_set,
                    Dfa(compile_nfa(query.pattern, query.primary_vars)))
            self._plan = plan
        return plan

    def prepare(self, query: CheckedQuery, data: SortedInput):
        """(class ids, device DFA tables) on the device for the scan, or the
        reason only the reference matcher answers exactly; ``last_run`` says
        where the masks ran. The CPU engine's ``prepare``, on the device."""
        backend = B.detect()
        n = data.table.num_rows
        _, mask_set, device_set, dfa = self._plan_for(query, data.table.schema)
        bits = None
        if not isinstance(device_set, str):
            columns = device_set.load(data.table, backend.xp)
            offsets = backend.to_device(data.partition_offsets.astype(np.int64, copy=False))
            bits, failed = device_set.evaluate(backend.xp, columns, offsets, n)
            if failed:
                bits = None             # the host masks raise or decline exactly
        if bits is None:
            results = mask_set.evaluate_detailed(data)
            failing = [v for v, r in results.items() if r is not None and r.failed.any()]
            if failing:
                return f"DEFINE {failing[0]} raises or cannot be represented exactly at some row"
            bits = backend.to_device(class_bits(query, results, n))
            why = (f"masks on the host: {device_set}" if isinstance(device_set, str)
                   else "masks on the host: a device mask raises or is inexact at some row")
        else:
            why = ""
        with B.span(backend, "classes"):
            prepared = classes_and_tables(backend, query, dfa, bits)
        if isinstance(prepared, str):
            return prepared
        classes, tables, n_states, n_classes = prepared
        self.last_run = RunInfo("device", why, n_states, n_classes)
        return classes, tables

    def scan_to_matches(self, query: CheckedQuery, data: SortedInput, classes, tables,
                        scan_from: int = -1, continues: bool = False, open_end: bool = False,
                        end_margin: int = 0, number_base: int = 0,
                        rows_before: int = 0) -> tuple:
        """``(MatchArrays, row to resume at in the last partition)``: the
        CPU engine's ``scan_to_matches`` (the same stream arguments), on the
        device."""
        backend = B.detect()
        horizon = None
        if query.time_limit is not None:    # computed on the host, read by the device scan
            from ..horizons import row_horizons
            horizon = backend.to_device(row_horizons(query, data))
        found, resume = scan(backend, query, classes, data.partition_offsets, tables,
                             self.chunk_rows, scan_from=scan_from, continues=continues,
                             open_end=open_end, end_margin=end_margin,
                             number_base=number_base, rows_before=rows_before, horizon=horizon)
        recover(backend, classes, data.partition_offsets, found, tables, continues=continues,
                horizon=horizon)
        return found.to_host(backend), resume


# The device's register machine runs one thread per partition, each much
# slower than a CPU core: below this many partitions the CPU engine's
# machine (partitions on all cores) finishes first. (The simulator runs the
# device's at any count: there it is for testing, not speed.)
REGISTERS_MIN_PARTITIONS = 4096

# Device bytes per input row a run needs, beyond the DEFINE columns: masks
# and class ids, the scan's slots (twice, for repairs), memo and scratch;
# rounded up, since running out costs a retry.
_BYTES_PER_ROW = 48
# Of the device memory free at the start, the share a run plans to use.
_MEMORY_SHARE = 0.7


def device_row_budget(backend, rows: int) -> int:
    """Rows one device run can take, from the device's free memory (no
    limit under the simulator)."""
    free = backend.free_memory()
    if free is None:
        return rows
    return max(1, int(free * _MEMORY_SHARE) // (_BYTES_PER_ROW + 16))


def partition_groups(offsets: np.ndarray, budget: int) -> list:
    """``(first, last)`` partition ranges, consecutive, each of at most
    ``budget`` rows unless one partition alone is larger."""
    n_parts = len(offsets) - 1
    if int(offsets[-1]) - int(offsets[0]) <= budget:
        return [(0, n_parts)]
    groups, first = [], 0
    while first < n_parts:
        # the last partition ending within budget rows of this group's start
        last = int(np.searchsorted(offsets, offsets[first] + budget, side="right")) - 1
        last = min(max(last, first + 1), n_parts)
        groups.append((first, last))
        first = last
    return groups


def _partitions(data: SortedInput, first: int, last: int) -> SortedInput:
    """Partitions ``first .. last-1`` of ``data`` as an input of their own."""
    offsets = data.partition_offsets
    lo, hi = int(offsets[first]), int(offsets[last])
    return SortedInput(data.table.slice(lo, hi - lo), offsets[first:last + 1] - lo, None, True)


def concat_matches(pieces: list) -> MatchArrays:
    """One ``MatchArrays`` from ``(first partition, first row, matches)``
    pieces of consecutive partition groups, renumbered to the whole input."""
    if not pieces:
        return MatchArrays.empty()
    label_base = np.cumsum([0] + [int(m.label_offsets[-1]) for _, _, m in pieces[:-1]])
    return MatchArrays(
        np.concatenate([m.partition + p for p, _, m in pieces]),
        np.concatenate([m.number for _, _, m in pieces]),
        np.concatenate([m.start + r for _, r, m in pieces]),
        np.concatenate([m.end + r for _, r, m in pieces]),
        np.concatenate([np.zeros(1, dtype=np.int64)]
                       + [m.label_offsets[1:] + b for (_, _, m), b in zip(pieces, label_base)]),
        np.concatenate([m.labels for _, _, m in pieces]),
        np.concatenate([m.excluded for _, _, m in pieces]))


def _device_keys_reason(query: CheckedQuery, schema: pa.Schema) -> Optional[str]:
    """None when every partition column of ``query`` can be gathered into
    the output on the device (a fixed-width type the output keeps), else
    why not."""
    from ..device_input import fixed_width
    for name in query.partition_columns:
        t = schema.field(name).type
        # float16 is held widened (device_input.host_values): not its storage
        if (not fixed_width(t) or pa.types.is_float16(t)
                or query.output_schema.field(name).type != t):
            return f"partition column {name} has type {t}"
    return None


@dataclass
class DeviceMatches:
    """Matches on the device: ``starts``/``ends`` (exclusive) in partition
    and start order, ``partitions``, ``numbers`` (1-based per partition);
    after :func:`recover` also the CSR labels of ``MatchArrays``."""
    starts: object
    ends: object
    partitions: object
    numbers: object
    label_offsets: object = None
    labels: object = None
    excluded: object = None

    def to_host(self, backend) -> MatchArrays:
        host = backend.to_host
        return MatchArrays(host(self.partitions), host(self.numbers), host(self.starts),
                           host(self.ends) - 1, host(self.label_offsets), host(self.labels),
                           host(self.excluded).astype(bool))


def classes_and_tables(backend, query: CheckedQuery, dfa: Dfa, bits):
    """``(class ids, DeviceTables, DFA states, classes present)`` for the
    packed variable bitmasks ``bits`` on the device, or the reason the DFA
    cannot be built (past its state cap). A time limit's tables hold the
    empty class (bitmask 0, index 0) whether or not a row has it."""
    from ..kernels.gpu_scan import DeviceTables
    n_vars = len(query.primary_vars)
    timed = query.time_limit is not None
    if n_vars <= _DIRECT_MAX_VARS:
        from ..kernels.gpu_present import present_values
        present = np.flatnonzero(present_values(backend, bits, 1 << n_vars)).tolist()
        if timed and 0 not in present:
            present = [0] + present
        classes = bits
    else:
        # Past 8 variables the bitmasks are renumbered densely (rare: a sort
        # on the host, one transfer each way).
        present_host, inverse = np.unique(backend.to_host(bits), return_inverse=True)
        if timed and (present_host.size == 0 or present_host[0] != 0):
            present_host, inverse = np.concatenate(([0], present_host)), inverse + 1
        present = present_host.tolist()
        dtype = np.uint8 if len(present) <= 256 else np.int32
        classes = backend.to_device(inverse.astype(dtype))
    try:
        tables = dfa.dense_tables(present)
    except DfaTooLarge as exc:
        return str(exc)
    if n_vars <= _DIRECT_MAX_VARS:
        tables = tables.over_bitmasks(present, n_vars)
    return classes, DeviceTables(backend, tables), tables.n_states - 1, len(present)


def scan(backend, query: CheckedQuery, classes, offsets, tables,
         chunk_rows: Optional[int] = None, scan_from: int = -1, continues: bool = False,
         open_end: bool = False, end_margin: int = 0, number_base: int = 0,
         rows_before: int = 0, horizon=None) -> tuple:
    """The chunked scan and match numbering on the device: ``(DeviceMatches,
    row to resume at in the last partition)``; raises the reference
    engine's error where AFTER MATCH SKIP TO a variable cannot resume.
    ``offsets`` are the partition offsets (host or device); the stream
    arguments are those of ``engines.cpu.scan_to_matches``; ``horizon``: a
    time limit's per-row horizons on the device (gpu_mr/horizons.py)."""
    from ..kernels import gpu_scan
    from ..kernels.scan import ERR_SKIP_NO_ROW
    xp = backend.xp
    offsets = backend.to_host(offsets).astype(np.int64, copy=False)
    skip = query.skip
    with B.span(backend, "scan: chunks, repair, compaction"):
        starts, ends, partitions, failure, resume = gpu_scan.run_scan(
            backend, classes, offsets, tables, _SKIP_MODES[skip.kind], skip_variables(query),
            chunk_rows or gpu_scan.DEVICE_CHUNK_ROWS, scan_from=scan_from, continues=continues,
            open_end=open_end, end_margin=end_margin, horizon=horizon)
    with B.span(backend, "scan: numbering"):
        # the matches come in partition order: where each partition's begin
        # is a binary search (a bincount's atomics would all hit one
        # counter when the partitions are few)
        n_parts = offsets.shape[0] - 1
        first_of_partition = xp.searchsorted(
            partitions, xp.arange(n_parts + 1, dtype=np.int64), side="left").astype(np.int64)
        numbers = (xp.arange(starts.shape[0], dtype=np.int64)
                   - first_of_partition[partitions] + 1)
        if number_base:
            numbers += (partitions == 0) * number_base
    if failure is not None:
        code, i, p = failure

        def at(array, k):
            return int(backend.to_host(array[k:k + 1])[0])
        origin = int(offsets[p]) - (rows_before if p == 0 else 0)
        raise skip_error(skip, code == ERR_SKIP_NO_ROW, at(numbers, i), at(starts, i),
                         at(ends, i) - 1, origin, p)
    return DeviceMatches(starts, ends, partitions, numbers), resume


def recover(backend, classes, offsets, found: DeviceMatches, tables,
            continues: bool = False, horizon=None) -> DeviceMatches:
    """``found`` with each match's path (variable per row) recovered on the
    device; ``continues``: the first partition began in an earlier batch;
    ``horizon``: as for :func:`scan`."""
    from ..kernels import gpu_scan
    found.label_offsets, found.labels, found.excluded = gpu_scan.run_recovery(
        backend, classes, backend.to_host(offsets), found.starts, found.ends,
        found.partitions, tables, continues=continues, horizon=horizon)
    return found
