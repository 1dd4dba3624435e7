"""A row of the bench table: the workload's id (W1..W13, or "" for the in-process rows),
its name (what ``--workloads`` takes), the function that measures one repetition, and the
spec that says its peers, notes and goals. ``Terms`` is what the command line sets in
the table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..measure import Figures
from ..workload import Workload

T = TypeVar("T")


@dataclass(frozen=True)
class Terms:
    """W5's producer counts, W7's levels, whether the Redis peer runs (its rows and notes
    appear only then), W9's recovery size (named in its goal)."""

    producers: list[int]
    levels: list[int]
    redis: bool
    recovery_n: int

    def rd(self, *items: T) -> list[T]:
        """`items` when the Redis peer runs, else nothing."""
        return list(items) if self.redis else []


@dataclass(frozen=True)
class Row:
    id: str
    name: str
    run: Callable[..., Figures]
    spec: Callable[[Row, Terms], Workload]

    def workload(self, terms: Terms) -> Workload:
        return self.spec(self, terms)
