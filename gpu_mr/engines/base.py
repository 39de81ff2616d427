"""What every engine shares: the match representation and the engine protocol.

Every engine turns (checked query, sorted input) into the same list of
:class:`Match` records; measures.py assembles the output from them once for
all engines. Engines are chosen by capability (as Go's regexp picks onepass or
backtrack): ``supports(query)`` returns None or the reason it cannot run it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional, Protocol, Union

import numpy as np

from ..analysis import CheckedQuery
from ..errors import MatchRuntimeError
from ..frames import SortedInput


@dataclass(frozen=True)
class Match:
    """One match. Rows are absolute indices into the sorted input.

    ``end`` is ``start - 1`` for an empty match. ``labels[i]`` is the
    variable id (index into ``CheckedQuery.primary_vars``) of row
    ``start + i``; ``excluded[i]`` whether that row sits inside ``{- -}``.
    """
    partition: int
    number: int
    start: int
    end: int
    labels: tuple
    excluded: tuple

    @property
    def is_empty(self) -> bool:
        return self.end < self.start


@dataclass(frozen=True)
class MatchArrays:
    """Every match as columns: what the fast engines produce, without one
    Python object per match (DESIGN.md §3's internal representation).

    Per match ``i`` (in partition, then match-number order): ``partition``,
    ``number`` (1-based within its partition), ``start`` and ``end`` (absolute
    sorted rows, ``end`` inclusive, ``start - 1`` for an empty match). Its
    rows' variable ids are ``labels[label_offsets[i]:label_offsets[i + 1]]``
    (``end - start + 1`` of them) and ``excluded`` marks rows inside ``{- -}``
    alike. All arrays are int64 except ``labels`` (int16) and ``excluded``
    (bool).
    """
    partition: np.ndarray
    number: np.ndarray
    start: np.ndarray
    end: np.ndarray
    label_offsets: np.ndarray
    labels: np.ndarray
    excluded: np.ndarray

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        return self.end - self.start + 1

    def in_partition_order(self) -> bool:
        """Whether ``partition`` ascends (a pass over it; measures.py's
        gathers by partition spans need it)."""
        p = self.partition
        return p.shape[0] <= 1 or bool(np.all(p[1:] >= p[:-1]))

    @classmethod
    def empty(cls) -> "MatchArrays":
        i64 = np.zeros(0, dtype=np.int64)
        return cls(i64, i64, i64, i64, np.zeros(1, dtype=np.int64),
                   np.zeros(0, dtype=np.int16), np.zeros(0, dtype=bool))

    @classmethod
    def from_matches(cls, matches: list) -> "MatchArrays":
        if not matches:
            return cls.empty()
        lengths = np.fromiter((len(m.labels) for m in matches), np.int64, len(matches))
        offsets = np.zeros(len(matches) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        labels = np.fromiter((v for m in matches for v in m.labels), np.int16, int(offsets[-1]))
        excluded = np.fromiter((x for m in matches for x in m.excluded), bool, int(offsets[-1]))

        def column(attr):
            return np.fromiter((getattr(m, attr) for m in matches), np.int64, len(matches))
        return cls(column("partition"), column("number"), column("start"), column("end"),
                   offsets, labels, excluded)

    def to_matches(self) -> list:
        out = []
        for i in range(len(self)):
            a, b = int(self.label_offsets[i]), int(self.label_offsets[i + 1])
            out.append(Match(int(self.partition[i]), int(self.number[i]), int(self.start[i]),
                             int(self.end[i]), tuple(int(v) for v in self.labels[a:b]),
                             tuple(bool(x) for x in self.excluded[a:b])))
        return out


class DeferredMatchArrays(MatchArrays):
    """A :class:`MatchArrays` whose ``labels`` and ``excluded`` are computed
    on first read, by ``paths()`` -> ``(labels, excluded)``, and its
    ``label_offsets`` by ``offsets()``, with ``walked``: per-match measure
    values the engine computed while finding the matches
    (kernels/unanchored.py ``run_unanchored_measured``; read by
    measures.py). ONE ROW measures that need no labels never pay for them
    (the offsets' cumulative sum was 0.45 ms of v_shape's 24 on 1e7 rows).
    """

    def __init__(self, partition, number, start, end, offsets, paths, walked):
        object.__setattr__(self, "_paths", paths)
        object.__setattr__(self, "_offsets_of", offsets)
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "walked", walked)
        super().__init__(partition, number, start, end, None, None, None)

    def in_partition_order(self) -> bool:
        return True        # the unanchored scan's, compacted segment by segment in order

    def _offsets(self) -> np.ndarray:
        with self._lock:
            if self._offsets_of is not None:
                object.__setattr__(self, "_label_offsets", self._offsets_of())
                object.__setattr__(self, "_offsets_of", None)
        return self._label_offsets

    def _got(self) -> tuple:
        with self._lock:                # measure kernels read them from several threads
            if self._paths is not None:
                labels, excluded = self._paths()
                object.__setattr__(self, "_labels", labels)
                object.__setattr__(self, "_excluded", excluded)
                object.__setattr__(self, "_paths", None)
        return self._labels, self._excluded

    def _set(self, value):              # the dataclass __init__'s None: computed later
        pass

    labels = property(lambda self: self._got()[0], _set)
    excluded = property(lambda self: self._got()[1], _set)
    label_offsets = property(lambda self: self._offsets(), _set)


def as_match_arrays(matches: Union[list, MatchArrays]) -> MatchArrays:
    return matches if isinstance(matches, MatchArrays) else MatchArrays.from_matches(matches)


def skip_error(skip, missing: bool, number: int, start: int, end: int, lo: int,
               partition: int) -> MatchRuntimeError:
    """The error of AFTER MATCH SKIP TO FIRST/LAST v for match ``number``
    (rows ``start..end``, partition starting at ``lo``): no row of the match
    is v (``missing``), or the target is the match's first row (an endless
    loop). Every engine raises exactly this."""
    if missing:
        return MatchRuntimeError(
            f"AFTER MATCH SKIP TO {skip.kind} {skip.var}: match {number} (rows "
            f"{start - lo + 1} to {end - lo + 1} of its partition) has no row "
            f"mapped to {skip.var}", code="skip_to_missing_variable",
            partition=partition, row=start)
    return MatchRuntimeError(
        f"AFTER MATCH SKIP TO {skip.kind} {skip.var} lands on the first row of match "
        f"{number} (row {start - lo + 1} of its partition); matching would "
        f"loop forever", code="skip_to_first_row", partition=partition, row=start)


class Engine(Protocol):
    name: str

    def supports(self, query: CheckedQuery) -> Optional[str]:
        """None if this engine can run ``query``, else the reason it cannot."""

    def find_matches(self, query: CheckedQuery, data: SortedInput) -> Union[list, MatchArrays]:
        """All matches, partition by partition, in match-number order: a list
        of :class:`Match` (the reference engine) or :class:`MatchArrays`."""
