"""The Workload record: one workload of the bench table, the figures it compares, its
goals, and the repetitions measured for it (``median()`` is what the table shows).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from . import workloads as W


@dataclass
class Workload:
    key: str
    title: str
    run: Callable[[int], W.Figures]
    size: str  # which size it takes: "core", "timer", "service", "lateness", "capacity",
    #            "recovery", "ops"
    rows: list[tuple[str, str]]  # (shmwheel figure, baseline figure) pairs to compare
    unit: str = "ops/s"
    reps: list[W.Figures] = field(default_factory=list)
    seconds: float = 0.0  # wall time of all its repetitions
    notes: list[str] = field(default_factory=list)  # further figures, printed without ratio
    # (what, figure, op, target)
    goals: list[tuple[str, str, str, float]] = field(default_factory=list)
    wid: str = ""  # "W1".."W10" for the service workloads; "" for the further ones

    @property
    def label(self) -> str:
        return f"{self.wid} {self.title}" if self.wid else self.title

    def median(self) -> W.Figures:
        keys = self.reps[0].keys() if self.reps else []
        return {k: statistics.median(r[k] for r in self.reps) for k in keys}
