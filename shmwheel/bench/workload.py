"""The Workload record: one workload of the bench table, the figures it compares, its
goals, and the repetitions measured for it (``median()`` is what the table shows).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .measure import Figures


class Goal(NamedTuple):
    """A goal the bench checks one figure against (a plain 4-tuple is read as one with
    no explanation, which the report says is missing)."""

    what: str
    figure: str  # the key of the figure in the workload's medians
    op: str  # ">=" or "<="
    target: float
    why: str = ""  # what it is for: the issue that set it and whom it serves
    miss: str = ""  # what a miss means and what is known to limit the figure


@dataclass
class Workload:
    key: str
    title: str
    run: Callable[[int], Figures]
    size: str  # which size it takes: "core", "timer", "service", "lateness", "capacity",
    #            "recovery", "ops"
    rows: list[tuple[str, str]]  # (shmwheel figure, baseline figure) pairs to compare
    unit: str = "ops/s"
    reps: list[Figures] = field(default_factory=list)
    seconds: float = 0.0  # wall time of all its repetitions
    notes: list[str] = field(default_factory=list)  # further figures, printed without ratio
    goals: Sequence[Goal | tuple[str, str, str, float]] = field(default_factory=list)
    wid: str = ""  # "W1".."W10" for the service workloads; "" for the further ones
    about: str = ""  # one sentence for the reader: what is measured, and how
    # notes on single figures: {figure key: text}, printed under the workload's table with
    # a mark on every row that shows that figure (an odd-looking ratio, a noisy maximum)
    explain: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.wid} {self.title}" if self.wid else self.title

    def median(self) -> Figures:
        keys = self.reps[0].keys() if self.reps else []
        return {k: statistics.median(r[k] for r in self.reps) for k in keys}
