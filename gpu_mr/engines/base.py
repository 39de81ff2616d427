"""What every engine shares: the match representation and the engine protocol.

Every engine turns (checked query, sorted input) into the same list of
:class:`Match` records; measures.py assembles the output from them once for
all engines. Engines are chosen by capability (as Go's regexp picks onepass or
backtrack): ``supports(query)`` returns None or the reason it cannot run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from ..analysis import CheckedQuery
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


class Engine(Protocol):
    name: str

    def supports(self, query: CheckedQuery) -> Optional[str]:
        """None if this engine can run ``query``, else the reason it cannot."""

    def find_matches(self, query: CheckedQuery, data: SortedInput) -> list:
        """All matches, partition by partition, in match-number order."""
