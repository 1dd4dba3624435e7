"""References and leaks of the in-process layer: tasks added, fired or cancelled (some
re-added, some asked for their entry) and dropped leave no object behind, and the garbage
collector sees through a wheel's slots. N here keeps CI fast; bench/inproc_leaks.py runs
the same with a million tasks."""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
import weakref

from shmwheel import (
    DelayedOperation,
    DelayedOperationPurgatory,
    ManualClock,
    MockTimer,
    SystemTimer,
    TimerTask,
)
from shmwheel.bench.inprocess.refs import churn_tasks
from shmwheel.kafka._backend import BACKEND

N = 60_000 if BACKEND == "native" else 20_000  # the oracle takes ~10x longer under tracemalloc


def test_tasks_added_fired_cancelled_and_dropped_leak_nothing():
    report = churn_tasks(N)
    assert report.fired == report.cancelled == N // 2
    assert report.entries == len(range(1, N, 10))
    assert report.payload_refs_after == report.payload_refs_before, "a task was not released"
    assert report.live_tasks == 0, f"{report.live_tasks} tasks are still alive"
    assert report.live_entries == 0, f"{report.live_entries} entries are still alive"
    # nothing per task stays allocated (a few kB of interpreter caches at most)
    assert report.bytes_kept < 64 * 1024 + N, f"{report.bytes_kept} bytes kept"


class Holder(TimerTask):
    def run(self):
        pass


def test_a_cycle_through_a_pending_slot_is_collected():
    """task -> timer -> (its slot) -> task: the wheel shows its tasks to the collector
    (tp_traverse) and lets go of them (tp_clear)."""
    timer = MockTimer(ManualClock())
    task = Holder(1000)
    task.timer = timer
    timer.add(task)
    timer.keep = task
    refs = weakref.ref(timer), weakref.ref(task)
    del timer, task
    gc.collect()
    assert refs[0]() is None and refs[1]() is None, "a cycle through the wheel leaked"


def test_a_task_entry_cycle_is_collected():
    timer = MockTimer(ManualClock())
    task = Holder(1000)
    timer.add(task)
    entry = task.timer_task_entry  # entry -> task -> entry
    ref = weakref.ref(entry)
    task.cancel()
    del task, entry
    gc.collect()
    assert ref() is None


def test_a_system_timer_with_pending_tasks_is_freed_after_shutdown():
    payload = object()
    before = sys.getrefcount(payload)
    timer = SystemTimer("refs")
    tasks = [Holder(60_000) for _ in range(1000)]
    for t in tasks:
        t.payload = payload
        timer.add(t)
    timer.shutdown()
    del timer, tasks, t
    gc.collect()
    assert sys.getrefcount(payload) == before, "a pending task outlived its timer"


class Op(DelayedOperation):
    def __init__(self, delay_ms, payload):
        super().__init__(delay_ms)
        self.payload, self.go = payload, False

    def try_complete(self):
        return self.force_complete() if self.go else False

    def on_complete(self):
        pass

    def on_expiration(self):
        pass


def test_purgatory_operations_completed_expired_or_cancelled_leak_nothing():
    payload = object()
    before = sys.getrefcount(payload)
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    p = DelayedOperationPurgatory("refs", reaper_enabled=False)
    n = 20_000
    for i in range(n):
        op = Op(1 if i % 3 == 0 else 60_000, payload)
        p.try_complete_else_watch(op, [i % 97, f"k{i % 13}"])
        if i % 3 == 1:
            op.go = True
    for k in range(97):
        p.check_and_complete(k)  # completes the i % 3 == 1 ones
    time.sleep(0.01)
    p.advance_clock(0)  # expires the i % 3 == 0 ones
    for k in range(13):
        p.cancel_for_key(f"k{k}")
    for k in range(97):
        p.cancel_for_key(k)
    assert p.watched() == 0 and p.delayed() == 0
    p.shutdown()
    del p, op
    gc.collect()
    kept, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sys.getrefcount(payload) == before, "an operation was not released"
    assert kept - base < 64 * 1024, f"{kept - base} bytes kept"
