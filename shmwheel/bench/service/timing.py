"""W4 and W6: when timers run. Lateness of timers due over a short window, measured in the
executors for shmwheel and exactly in this process for the peers (W4), and the rate from
a deadline to the tasks having run, for n timers due at once (W6), each beside its peers.
W4's raw figures are kept for --plot in ``common.lateness_samples`` and
``common.lateness_hists``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import multiprocessing as mp
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import wait as wait_futures

import numpy as np

from ...segment.clock import now_ms
from ..baselines import HeapTimer, RedisDelayQueue, event_loop, sched_scheduler, zero_sleep_ms
from ..measure import Figures, ops_per_s
from . import common as common
from .common import R, S, _capacity_for, _redis_members, _service, _wait_completed, noop_task

POOL_N = 10_000  # ProcessPoolExecutor no-ops per repetition (it is slow)
POOL_MAP_N = 100_000  # multiprocessing.Pool.imap_unordered no-ops per repetition
POOL_CHUNK = 256  # its chunksize: tasks travel in batches, as the service's do


# -- f. lateness ------------------------------------------------------------------------

LATENESS_MARGIN_MS = 1000  # W4: the window starts 1 s after scheduling starts ...
QUICK_MARGIN_MS = 300  # ... or 0.3 s for small runs (--quick), which schedule in < 50 ms


def _margin_ms(n: int) -> int:
    return LATENESS_MARGIN_MS if n >= 100_000 else QUICK_MARGIN_MS


def _check_margin(deadlines_s: list[float], who: str) -> None:
    if time.monotonic() > min(deadlines_s):
        print(
            f"bench: lateness: {who} still scheduling at its first deadline "
            f"(its figures include that)",
            file=sys.stderr,
            flush=True,
        )


def _spread_ms(n: int) -> float:
    """The window the lateness timers are spread over: 2 s for 200k, down to 0.5 s."""
    return max(500.0, min(2000.0, n / 100.0))


def _percentiles(late_ms: np.ndarray, label: str) -> Figures:
    common.lateness_samples.setdefault(label, []).append(late_ms)
    return {
        f"p50: {label}": float(np.percentile(late_ms, 50)),
        f"p99: {label}": float(np.percentile(late_ms, 99)),
        f"p99.9: {label}": float(np.percentile(late_ms, 99.9)),
        f"max: {label}": float(late_ms.max()),
        f"early: {label}": float((late_ms < 0).sum()),
    }


def svc_lateness(n: int) -> Figures:
    """W4: n no-op timers due uniformly over a 2 s window (n=200k; 0.5-2 s for smaller n,
    n/100 ms) that starts 1 s after scheduling starts (0.3 s for n < 100k). shmwheel:
    schedule_many from this process, measured in the executors: their lateness histogram
    (stats()['lateness_ms'], the upper edge of a log bucket, 8 per octave, so up to 9 %
    high) and stats()['early'], once `completed` reaches n. Every system's deadline is
    rounded up to a whole ms (the service's clock) and lateness is measured from it to
    the moment the task or callback starts; the peers run in this process and record it
    exactly: heapq+thread (schedule each, its thread runs them), asyncio (call_at each,
    then run the loop), sched (enterabs each, then run(), with a delayfunc that skips
    sched's sleep(0) after every event, whose cost is reported beside it)."""
    span = _spread_ms(n)
    offsets = np.random.default_rng(3).uniform(0, span, n)
    fig = _service_lateness(n, offsets)
    fig.update(_heapq_lateness(n, offsets))
    fig.update(_asyncio_lateness(n, offsets))
    fig.update(_sched_lateness(n, offsets))
    fig["sched default delayfunc: time.sleep(0) per event"] = zero_sleep_ms()
    if common.use_redis:
        fig.update(_redis_lateness(n, offsets))
    return fig


def _service_lateness(n: int, offsets: np.ndarray) -> Figures:
    """W4 on the service: its executors' lateness histogram once `completed` reaches n."""
    fig: Figures = {}
    label = f"{S} service"
    with _service(_capacity_for(n)) as svc, svc.client() as c:
        h = c.schedule_many("noop", offsets + _margin_ms(n))
        last = int(h.deadlines_ms.max())
        time.sleep(max(0.0, last / 1000 - time.monotonic()))  # no polling while they run
        st, _ = _wait_completed(svc, n, last / 1000 + 10 + n / 20_000)
        late = st["lateness_ms"]
        fig[f"p50: {label}"] = late["p50"]
        fig[f"p99: {label}"] = late["p99"]
        fig[f"p99.9: {label}"] = late["p999"]
        fig[f"max: {label}"] = late["max"]
        fig[f"early: {label}"] = float(st["early"])
        fig[f"completed: {label}"] = float(st["completed"])
        common.lateness_hists.append([int(x) for x in st["lateness_histogram"]])
        if st["completed"] < n:
            print(
                f"bench: lateness: only {st['completed']} of {n} timers completed in the "
                f"bounded wait",
                file=sys.stderr,
                flush=True,
            )
    return fig


def _targets(n: int, offsets: np.ndarray) -> list[float]:
    """Absolute deadlines (s) rounded up to a whole ms, from now."""
    now = time.monotonic() * 1000 + _margin_ms(n)
    return [math.ceil(now + x) / 1000 for x in offsets.tolist()]


def _heapq_lateness(n: int, offsets: np.ndarray) -> Figures:
    """W4 on the heapq+thread timer: each timer scheduled, its thread runs them."""
    with HeapTimer() as ht:
        got = np.full(n, np.nan)
        count = [0]
        dl = _targets(n, offsets)

        def rec(i: int) -> None:
            got[i] = time.monotonic()
            count[0] += 1

        for i, t in enumerate(dl):
            ht.schedule(t - time.monotonic(), functools.partial(rec, i))
        _check_margin(dl, "heapq+thread")
        end = max(dl) + 10
        while count[0] < n and time.monotonic() < end:
            time.sleep(0.01)
        done = ~np.isnan(got)
        return _percentiles((got[done] - np.array(dl)[done]) * 1000, "heapq+thread")


def _asyncio_lateness(n: int, offsets: np.ndarray) -> Figures:
    """W4 on asyncio: call_at each, then run the loop until the last callback."""
    with event_loop() as loop:
        got = np.full(n, np.nan)
        left = [n]
        fut = loop.create_future()

        def arec(i: int) -> None:
            got[i] = time.monotonic()
            left[0] -= 1
            if left[0] == 0:
                fut.set_result(None)

        dl = _targets(n, offsets)
        for i, t in enumerate(dl):
            loop.call_at(t, arec, i)
        _check_margin(dl, "asyncio")
        loop.run_until_complete(asyncio.wait_for(fut, max(dl) - time.monotonic() + 10))
        return _percentiles((got - np.array(dl)) * 1000, "asyncio call_at")


def _sched_lateness(n: int, offsets: np.ndarray) -> Figures:
    """W4 on sched: enterabs each, then run() (without its sleep(0) after every event)."""
    s = sched_scheduler(skip_zero_sleep=True)
    got = np.full(n, np.nan)

    def srec(i: int) -> None:
        got[i] = time.monotonic()

    dl = _targets(n, offsets)
    for i, t in enumerate(dl):
        s.enterabs(t, 0, srec, (i,))
    _check_margin(dl, "sched")
    s.run()
    return _percentiles((got - np.array(dl)) * 1000, "sched run()")


def _redis_lateness(n: int, offsets: np.ndarray) -> Figures:
    """W4 on the Redis peer: the same window in Unix time (deadlines rounded up to a
    whole ms), scheduled with pipelined ZADDs while the dispatcher thread already polls;
    lateness taken when the dispatcher calls back."""
    got = np.full(n, np.nan)
    count = [0]

    def rec(m: bytes) -> None:
        got[int(m)] = time.time()
        count[0] += 1

    with RedisDelayQueue() as q:
        q.start_dispatcher(rec)
        now = time.time() * 1000 + _margin_ms(n)
        dl = [math.ceil(now + x) / 1000 for x in offsets.tolist()]
        q.schedule_many_at(dl, _redis_members(n))
        if time.time() > min(dl):
            print(
                "bench: lateness: redis still scheduling at its first deadline "
                "(its figures include that)",
                file=sys.stderr,
                flush=True,
            )
        end = max(dl) + 10
        while count[0] < n and time.time() < end:
            q.check()
            time.sleep(0.01)
    done = ~np.isnan(got)
    fig = _percentiles((got[done] - np.array(dl)[done]) * 1000, f"{R} ZSET + Lua claim")
    fig[f"completed: {R} ZSET + Lua claim"] = float(done.sum())
    return fig


# -- g. fired -> executed ---------------------------------------------------------------


def svc_fire(n: int) -> Figures:
    """n no-op timers all due at one deadline (schedule_many, deadline after scheduling
    and linking are done); the rate is n over the deadline to the moment stats() shows
    `completed` = n. Peers: ProcessPoolExecutor.submit of the no-op (as many workers as
    the service has executors, pool started beforehand; 10k submits, until every future
    is done); the heapq+thread timer and asyncio running n no-op callbacks due at one
    time, in this process, timed from that time or from the end of scheduling if that
    came later."""
    fig, execs = _service_fire(n)
    fig.update(_pool_fire(n, execs))
    margin_s = 0.05 + n * 6e-6
    fig["heapq+thread (in-process)"] = _heapq_fire(n, margin_s)
    fig["asyncio call_at (in-process)"] = _asyncio_fire(n, margin_s)
    if common.use_redis:
        fig[f"{R} ZSET + Lua claim"] = _redis_fire(n)
    return fig


def _service_fire(n: int) -> tuple[Figures, int]:
    """The service's fired->executed rate of n timers due at once; its executor count."""
    fig: Figures = {}
    with _service(_capacity_for(n)) as svc, svc.client() as c:
        execs = svc.config.executors
        delay = 300 + n / 500  # ms: leaves time to schedule and link n timers
        h = c.schedule_many("noop", np.full(n, float(delay)))
        due = int(h.deadlines_ms[0])
        if now_ms() >= due:
            raise RuntimeError("scheduling took longer than the margin before the deadline")
        time.sleep(max(0.0, due / 1000 - time.monotonic()))
        st, t1 = _wait_completed(svc, n, due / 1000 + 30 + n / 10_000)
        fig[f"{S} fired->executed"] = st["completed"] / (t1 - due / 1000)
        fig[f"{S} executors"] = float(execs)
        if st["completed"] < n:
            print(
                f"bench: fire: only {st['completed']} of {n} timers completed in the bounded wait",
                file=sys.stderr,
                flush=True,
            )
    return fig, execs


def _pool_fire(n: int, execs: int) -> Figures:
    """The process pools' rates of no-op tasks, as many workers as the service's executors
    (each pool started and warmed beforehand)."""
    fig: Figures = {}
    m = min(n, POOL_N)
    with ProcessPoolExecutor(max_workers=execs, mp_context=mp.get_context("spawn")) as pool:
        wait_futures([pool.submit(noop_task, None) for _ in range(execs * 4)])
        fig["ProcessPoolExecutor.submit"] = ops_per_s(
            m, lambda: wait_futures([pool.submit(noop_task, None) for _ in range(m)])
        )

    p = min(n, POOL_MAP_N)
    with mp.get_context("spawn").Pool(execs) as mpool:
        list(mpool.imap_unordered(noop_task, [None] * (execs * 4)))
        fig["multiprocessing.Pool.imap_unordered"] = ops_per_s(
            p,
            lambda: list(
                mpool.imap_unordered(noop_task, itertools.repeat(None, p), chunksize=POOL_CHUNK)
            ),
        )
    return fig


def _heapq_fire(n: int, margin_s: float) -> float:
    """The heapq+thread timer's rate of n no-op callbacks due `margin_s` from now."""
    with HeapTimer() as ht:
        count = [0]

        def bump() -> None:
            count[0] += 1

        base = time.monotonic() + margin_s
        for _ in range(n):
            ht.schedule(base - time.monotonic(), bump)
        t0 = max(base, time.monotonic())
        time.sleep(max(0.0, base - time.monotonic()))
        while count[0] < n and time.monotonic() < t0 + 60:
            time.sleep(0.0005)
        return count[0] / (time.monotonic() - t0)


def _asyncio_fire(n: int, margin_s: float) -> float:
    """asyncio's rate of n no-op callbacks due `margin_s` from now (call_at)."""
    with event_loop() as loop:
        left = [n]
        fut = loop.create_future()

        def abump() -> None:
            left[0] -= 1
            if left[0] == 0:
                fut.set_result(None)

        base = time.monotonic() + margin_s
        for _ in range(n):
            loop.call_at(base, abump)
        t0 = max(base, time.monotonic())
        time.sleep(max(0.0, base - time.monotonic()))
        loop.run_until_complete(fut)
        return n / (time.monotonic() - t0)


def _redis_fire(n: int) -> float:
    """n members due at one time (pipelined ZADD, the same margin after scheduling as the
    in-process peers); the dispatcher claims them CLAIM at a time and runs a no-op
    callback for each; n over the due time to the last callback."""
    count = [0]
    done = threading.Event()

    def bump(m: bytes) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    with RedisDelayQueue() as q:
        base = time.time() + 0.05 + n * 6e-6
        q.schedule_many_at([base] * n, _redis_members(n))
        t0 = max(base, time.time())
        q.start_dispatcher(bump)
        time.sleep(max(0.0, base - time.time()))
        end = t0 + 60
        while not done.wait(0.05) and time.time() < end:
            q.check()
        t1 = time.time()
    return count[0] / (t1 - t0)
