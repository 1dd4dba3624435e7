"""Journals drawn by hypothesis for the per-timer kernel's tests (tests/test_pertimer.py)
and the figures' (tests/test_figures.py): a few timers' records of every kind, in several
epochs, with repeating runs, operations, missing and doubled records, and the bounds
they are read with."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from shmwheel.pipeline.tables import pertimer as P

K, OC = P.KIND, P.OUTCOME
TASKS = ("noop", "fail", "other")
_KINDS = ("scheduled", "watched", "cancelled", "completed", "expired", "fired", "outcome")


@st.composite
def journals(draw: st.DrawFn) -> tuple[list[dict[str, Any]], P.Bounds]:
    n = draw(st.integers(0, 40))
    times = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n, unique=True))
    records = []
    for t_us in times:
        records.append({
            "id": draw(st.integers(1, 6)),
            "epoch": draw(st.integers(1, 3)),
            "t_us": t_us,
            "run": draw(st.integers(0, 3)),
            "deadline_ms": draw(st.integers(0, 10)),
            "period_ms": draw(st.sampled_from([0, 0, 5])),
            "producer": draw(st.integers(0, 2)),
            "duration_us": draw(st.integers(0, 100)),
            "next_deadline_ms": draw(st.integers(-1, 10)),
            "kc": K[draw(st.sampled_from(_KINDS))],
            "oc": draw(st.sampled_from(sorted(OC.values()))),
            "task_i": draw(st.integers(0, 3)),
            "on_complete_i": draw(st.integers(0, 3)),
            "on_expire_i": draw(st.integers(0, 3)),
        })  # fmt: skip
    b = P.Bounds(
        end_us=draw(st.integers(0, 12_000)),
        final_epoch=draw(st.integers(1, 3)),
        grace_us=draw(st.sampled_from([0, 2000])),
        tasks=TASKS,
    )
    return records, b
