"""The in-process layer's reference check: n tasks added to a timer, half cancelled, some
re-added (they move) or asked for their entry, the rest fired, then everything dropped;
what is left is counted (tests/test_kafka_refs.py with a CI-sized n; bench/inproc_leaks.py
with a million)."""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from dataclasses import dataclass

from ...kafka.mock_timer import ManualClock, MockTimer
from ...kafka.timing_wheel import TimerTask, TimerTaskEntry


@dataclass
class Report:
    n: int
    fired: int
    cancelled: int
    entries: int  # TimerTaskEntry objects made on request
    payload_refs_before: int
    payload_refs_after: int
    live_tasks: int  # _Churn objects the collector still tracks
    live_entries: int  # TimerTaskEntry objects it still tracks
    bytes_kept: int  # traced Python heap bytes still allocated
    seconds: float


class _Churn(TimerTask):
    __slots__ = ("payload", "box")

    def run(self) -> None:
        self.box[0] += 1


def churn_tasks(n: int) -> Report:
    """Add n tasks (delays 1..5000 ms) to a MockTimer, cancel every other one, re-add every
    sixth from the second (each moves), ask every tenth of the others for its entry, fire
    the rest by moving the clock, drop everything and count what survived."""
    payload: object = object()
    box = [0]
    gc.collect()
    refs_before = sys.getrefcount(payload)
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    t0 = time.perf_counter()
    timer = MockTimer(ManualClock(), wheel_size=64)
    tasks = []
    for i in range(n):
        t = _Churn(1 + i % 5000)
        t.payload, t.box = payload, box
        tasks.append(t)
        timer.add(t)
    cancelled = sum(t._cancel() for t in tasks[::2])
    for t in tasks[1::6]:
        timer.add(t)
    entries = sum(t.timer_task_entry is not None for t in tasks[1::10])
    timer.advance_clock(6000)
    fired = box[0]
    if timer.size:
        raise RuntimeError(f"{timer.size} tasks still pending after the clock passed them all")
    del tasks, t, timer
    gc.collect()
    seconds = time.perf_counter() - t0
    kept, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    live = [type(o) for o in gc.get_objects()]
    return Report(
        n,
        fired,
        cancelled,
        entries,
        refs_before,
        sys.getrefcount(payload),
        live.count(_Churn),
        live.count(TimerTaskEntry),
        kept - base,
        seconds,
    )
