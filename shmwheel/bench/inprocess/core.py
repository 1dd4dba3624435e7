"""One repetition of each in-process workload, for shmwheel and its peers.

Every function takes the sizes and returns ``{system: figure}`` for one repetition; the
runner interleaves repetitions (A B A B ...) and keeps medians. Rates are operations per
second; memory is bytes per pending timer. Deadlines are uniform in [1, 60] s unless
the workload says otherwise.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...kafka.system_timer import SystemTimer
from ...kafka.timing_wheel import TimerTask
from ...wheel.core import WheelCore
from ..baselines import HeapTimer, asyncio_loop, event_loop
from ..measure import Figures, bytes_per_object, each, noop, ops_per_s


def _deadlines(n: int, seed: int = 1, lo_ms: int = 1_000, hi_ms: int = 60_000) -> np.ndarray:
    return np.random.default_rng(seed).integers(lo_ms, hi_ms + 1, n).astype(np.int64)


# -- wheel core vs heapq -----------------------------------------------------------------


def core_schedule_batch(n: int) -> Figures:
    d = _deadlines(n)
    core = WheelCore(1, 4096, 0, n, growable=False)
    items = list(zip(d.tolist(), range(n), strict=True))
    return {
        "shmwheel core insert_many": ops_per_s(n, lambda: core.insert_many(d)),
        "heapq heapify": ops_per_s(n, lambda: heapq.heapify(list(items))),
    }


def core_schedule_call(n: int) -> Figures:
    d = _deadlines(n).tolist()
    core = WheelCore(1, 4096, 0, n, growable=False)
    heap: list = []

    def wheel() -> None:
        insert = core.insert
        for x in d:
            insert(x)

    def push() -> None:
        seq = itertools.count()
        for x in d:
            heapq.heappush(heap, [x, next(seq), None])

    return {"shmwheel core insert": ops_per_s(n, wheel), "heapq heappush": ops_per_s(n, push)}


def core_cancel(n: int) -> Figures:
    d = _deadlines(n)
    batch = WheelCore(1, 4096, 0, n, growable=False)
    hb = batch.insert_many(d)
    single = WheelCore(1, 4096, 0, n, growable=False)
    hs = single.insert_many(d).tolist()
    seq = itertools.count()
    entries = [[x, next(seq), print] for x in d.tolist()]
    heap = list(entries)
    heapq.heapify(heap)

    def wheel_one() -> None:
        cancel = single.cancel
        for h in hs:
            cancel(h)

    def lazy() -> None:
        for e in entries:
            e[2] = None

    fig = {
        "shmwheel core cancel_many": ops_per_s(n, lambda: batch.cancel_many(hb)),
        "shmwheel core cancel": ops_per_s(n, wheel_one),
        "heapq lazy cancel": ops_per_s(n, lazy),
    }
    fig["ratio: core cancel / heapq lazy cancel"] = (
        fig["shmwheel core cancel"] / fig["heapq lazy cancel"]
    )
    return fig


def core_expire(n: int) -> Figures:
    """Collect every due entry. shmwheel does the work its reaper does: pre-cascade steps
    while idle, then advance; both are timed. heapq pops in order."""
    d = _deadlines(n)
    core = WheelCore(1, 4096, 0, n, growable=False)
    core.insert_many(d)
    out = np.empty(n, dtype=np.int64)

    def wheel() -> None:
        t = 0
        got = 0
        while got < n:
            t += 1000
            while core.cascade_step(1 << 16):
                pass
            got += core.advance_into(t, out[got:], True)

    heap = [(x, i) for i, x in enumerate(d.tolist())]
    heapq.heapify(heap)

    def pop() -> None:
        pop_ = heapq.heappop
        while heap:
            pop_(heap)

    return {"shmwheel core advance": ops_per_s(n, wheel), "heapq heappop": ops_per_s(n, pop)}


def core_memory(n: int) -> Figures:
    """Bytes per pending timer: the wheel array for shmwheel; traced allocations of the
    pending entries for the Python peers (a heap entry; an asyncio TimerHandle; a
    SystemTimer TimerTask with its entry, which the caller owns)."""
    core = WheelCore(1, 4096, 0, n, growable=False)
    core.insert_many(_deadlines(n))
    figures = {"shmwheel core": core.mem.nbytes / n}

    m = min(n, 50_000)  # per-object bytes do not depend on n; tracing 1 M objects is slow

    def traced(build: Callable[[], object]) -> float:
        return bytes_per_object(build, m)

    d = _deadlines(m).tolist()
    figures["heapq entry"] = traced(lambda: [[x, i, None] for i, x in enumerate(d)])
    with event_loop() as loop:
        figures["asyncio call_later"] = traced(lambda: [loop.call_later(x / 1000, noop) for x in d])
    return figures


# -- in-process timers ---------------------------------------------------------------


class _Count(TimerTask):
    __slots__ = ("box",)

    def __init__(self, delay_ms: int, box: list) -> None:
        super().__init__(delay_ms)
        self.box = box

    def run(self) -> None:
        self.box[0] += 1


def timer_schedule_cancel(n: int) -> Figures:
    """Per-call add, then cancel of everything added, for each in-process timer."""
    delays = _deadlines(n).tolist()
    box = [0]
    tasks = [_Count(x, box) for x in delays]
    timer = SystemTimer("bench", tick_ms=1, wheel_size=4096)
    loop = asyncio_loop()
    ht = HeapTimer()

    def add_tasks() -> list:
        each(timer.add, tasks)
        return tasks

    systems: list[tuple[str, Callable[[], list], Callable[[Any], None]]] = [
        ("shmwheel SystemTimer", add_tasks, TimerTask.cancel),
        (
            "asyncio call_later",
            lambda: [loop.call_later(x / 1000, noop) for x in delays],
            lambda h: h.cancel(),
        ),
        ("heapq+thread", lambda: [ht.schedule(x / 1000, noop) for x in delays], ht.cancel),
    ]
    fig: Figures = {}
    try:
        for name, add_all, cancel in systems:
            added: list = []
            fig[f"add: {name}"] = ops_per_s(n, lambda: added.extend(add_all()))  # noqa: B023
            fig[f"cancel: {name}"] = ops_per_s(n, lambda: each(cancel, added))  # noqa: B023
    finally:
        timer.shutdown()
        loop.close()
        ht.stop()
    for op, peer in (
        ("add", "asyncio call_later"),
        ("add", "heapq+thread"),
        ("cancel", "asyncio call_later"),
    ):
        fig[f"ratio: {op} / {peer}"] = fig[f"{op}: shmwheel SystemTimer"] / fig[f"{op}: {peer}"]
    return fig


def timer_fire(n: int) -> Figures:
    """Fired-and-run no-op tasks per second. Every system gets n timers whose deadlines lie
    at one absolute time after all are scheduled, spread over 20 ms; the rate is n over the
    time from the first deadline to the last run."""
    fig: Figures = {}
    spread = [i % 20 for i in range(n)]
    margin_s = 0.2 + n * 10e-6  # comfortably longer than scheduling n timers takes

    def wait_until(t: float) -> None:
        time.sleep(max(0.0, t - time.monotonic()))

    box = [0]
    timer = SystemTimer("bench-fire", tick_ms=1, wheel_size=4096)
    try:
        base = time.monotonic() + margin_s
        for s in spread:
            timer.add(_Count(int((base - time.monotonic()) * 1000) + s, box))
        wait_until(base)
        t0 = time.monotonic()
        while box[0] < n:
            timer.advance_clock(5)
        fig["shmwheel SystemTimer"] = n / (time.monotonic() - t0)
    finally:
        timer.shutdown()
    with event_loop() as loop:
        count = [0]
        done = loop.create_future()

        def bump() -> None:
            count[0] += 1
            if count[0] == n:
                done.set_result(None)

        base = time.monotonic() + margin_s  # asyncio's loop.time() is time.monotonic()
        for s in spread:
            loop.call_at(base + s / 1000, bump)
        wait_until(base)
        t0 = time.monotonic()
        loop.run_until_complete(done)
        fig["asyncio call_later"] = n / (time.monotonic() - t0)
    with HeapTimer() as ht:
        hcount = [0]

        def hbump() -> None:
            hcount[0] += 1

        base = time.monotonic() + margin_s
        for s in spread:
            ht.schedule(base + s / 1000 - time.monotonic(), hbump)
        wait_until(base)
        t0 = time.monotonic()
        while hcount[0] < n:
            time.sleep(0.0005)
        fig["heapq+thread"] = n / (time.monotonic() - t0)
    fig["ratio: fire->run / asyncio"] = fig["shmwheel SystemTimer"] / fig["asyncio call_later"]
    return fig


def cascade_stall(n: int) -> Figures:
    """Longest single clock step (µs) while n timers over [1, 60] s come due 1 ms at a time,
    wheel_size 20 (Kafka's default). shmwheel's reaper pre-cascades (advance, then a bounded
    cascade_step); Kafka's way re-inserts a coarse bucket only when it expires (advance
    alone, which then cascades the whole bucket). Same kernels, same timers."""
    d = _deadlines(n)
    fig: Figures = {}
    for label, pre in (("pre-cascade", True), ("cascade at expiry (Kafka)", False)):
        core = WheelCore(1, 20, 0, n, growable=False)
        core.insert_many(d)
        out = np.empty(n, dtype=np.int64)
        steps = np.empty(60_001, dtype=np.int64)
        clock = time.perf_counter_ns
        for t in range(60_001):
            t0 = clock()
            core.advance_into(t, out, True)
            if pre:
                core.cascade_step(4096)
            steps[t] = clock() - t0
        fig[f"max step: {label}"] = steps.max() / 1000
        fig[f"p99.9 step: {label}"] = float(np.percentile(steps, 99.9)) / 1000
    return fig
