"""W1, W2 and W7: what one client operation costs a single producer process. Schedule per
call and in schedule_many batches (W1), cancel per call and in cancel_many batches (W2),
and both per call at rising numbers of pending timers (W7), each beside its peers.

Every function takes a size and returns ``{figure: value}`` for one repetition (see
``service_common``); the service runs first and is stopped before the peers are timed.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import numpy as np

from ..segment.sizes import default_arena_bytes
from ..service.caller.client import Client
from . import service_common as common
from .baselines import HeapTimer, RedisDelayQueue, asyncio_loop, event_loop, sched_scheduler
from .service_common import BATCH, R, S, _capacity_for, _far_delays, _redis_members, _service, warm
from .workloads import Figures, _each, _noop, _rate

SCHED_CANCEL_BUDGET_S = 0.2  # sched.cancel is O(n): cancel for this long, not all n
SCALE_OPS = 10_000  # per-call schedules (then cancels) timed at each pending level


# -- a. schedule, per call --------------------------------------------------------------


def svc_schedule_call(n: int) -> Figures:
    """Per-call schedule of n timers (delays 30-60 s) from one producer process, handles
    kept. The producer waits when its ring is full, so this is bounded by the
    coordinator's link rate too."""
    delays = _far_delays(n).tolist()
    fig: Figures = {}
    with _service(_capacity_for(n)) as svc, svc.client() as c:
        warm(c)
        fig[f"{S} Client.schedule"] = schedule_call_rate(c, delays)
    # n payloads pending at once: the default arena (4 MiB up to 1 M timers) holds 32,768
    # small ones, so this run's arena gives its smallest class (half the bytes) n blocks
    arena = max(default_arena_bytes(n), 2 * 64 * n)
    with _service(_capacity_for(n), arena_bytes=arena) as svc, svc.client() as c:
        warm(c)
        payload = {"job": 12345, "try": 2, "queue": "default"}  # 3 fields, 29 bytes packed
        fig[f"{S} Client.schedule, 3-field dict payload"] = schedule_call_rate(c, delays, payload)
    with HeapTimer() as ht:
        fig["heapq+thread schedule"] = _rate(
            n, lambda: [ht.schedule(d / 1000, _noop) for d in delays]
        )
    with event_loop() as loop:
        fig["asyncio call_later"] = _rate(
            n, lambda: [loop.call_later(d / 1000, _noop) for d in delays]
        )
    s = sched_scheduler()
    fig["sched enter"] = _rate(n, lambda: [s.enter(d / 1000, 0, _noop) for d in delays])
    fig["ratio: Client.schedule / heapq+thread"] = (
        fig[f"{S} Client.schedule"] / fig["heapq+thread schedule"]
    )
    if common.use_redis:
        m = min(n, common.REDIS_CALL_N)
        members = _redis_members(m)
        with RedisDelayQueue() as q:
            zadd = q.schedule
            fig[f"{R} ZADD"] = _rate(
                m, lambda: [zadd(d / 1000, k) for d, k in zip(delays, members, strict=True)]
            )
        fig[f"{R} timers (per call)"] = float(m)
    return fig


def schedule_call_rate(c: Client, delays: list[float], payload: Any = None) -> float:
    """W1's measurement: one Client.schedule call per delay (ms) of the no-op task,
    handles kept; timers per second. Call warm(c) first. `payload` None passes none."""
    sched = c.schedule
    if payload is None:
        return _rate(len(delays), lambda: [sched("noop", delay_ms=d) for d in delays])
    return _rate(len(delays), lambda: [sched("noop", payload, delay_ms=d) for d in delays])


# -- b. schedule_many -------------------------------------------------------------------


def batch_delays(n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """W1's batch: 5n delays (30-60 s) and their schedule_many batches of up to 100k."""
    total, batch = 5 * n, min(BATCH, n)
    delays = _far_delays(total)
    return delays, [delays[i : i + batch] for i in range(0, total, batch)]


def schedule_many_rate(c: Client, chunks: list[np.ndarray]) -> float:
    """W1's batch measurement: one Client.schedule_many of the no-op task per chunk of
    delays (ms); timers per second. Call warm(c) first."""
    many = c.schedule_many
    return _rate(sum(map(len, chunks)), lambda: [many("noop", d) for d in chunks])


def svc_schedule_many(n: int) -> Figures:
    """5n timers (delays 30-60 s) in schedule_many batches of up to 100k. Baselines: a
    batch method on the heapq+thread timer (extend + heapify or push under one lock, the
    best a heap can do) on the same 5n; asyncio has no batch API, so call_later in a loop
    on n."""
    total = 5 * n
    batch = min(BATCH, n)
    delays, chunks = batch_delays(n)
    fig: Figures = {}
    with _service(_capacity_for(total)) as svc, svc.client() as c:
        warm(c)
        fig[f"{S} Client.schedule_many"] = schedule_many_rate(c, chunks)
    chunks_s = [(d / 1000).tolist() for d in chunks]
    with HeapTimer() as ht:
        fig["heapq+thread schedule_many"] = _rate(
            total, lambda: [ht.schedule_many(d, _noop) for d in chunks_s]
        )
    loop = asyncio_loop()
    few = (delays[:n] / 1000).tolist()
    try:
        fig["asyncio call_later loop"] = _rate(n, lambda: [loop.call_later(d, _noop) for d in few])
    finally:
        loop.close()
    s = sched_scheduler()
    fig["sched enter loop"] = _rate(n, lambda: [s.enter(d, 0, _noop) for d in few])
    if common.use_redis:
        m = min(total, common.REDIS_BATCH_N)
        members = _redis_members(m)
        ds = (delays[:m] / 1000).tolist()
        with RedisDelayQueue() as q:
            fig[f"{R} ZADD pipelined"] = _rate(
                m,
                lambda: _each(
                    lambda i: q.schedule_many(ds[i : i + batch], members[i : i + batch]),
                    list(range(0, m, batch)),
                ),
            )
        fig[f"{R} timers (batch)"] = float(m)
    return fig


# -- d. cancel --------------------------------------------------------------------------


def svc_cancel(n: int) -> Figures:
    """Cancel n pending timers (delays 30-60 s) per call with Client.cancel(handle), and
    another n with one cancel_many; every cancel must return True. Baselines cancel the
    same number of their own handles (heapq+thread marks the entry; asyncio's
    TimerHandle.cancel)."""
    d = _far_delays(n)
    fig: Figures = {}
    with _service(_capacity_for(2 * n)) as svc, svc.client() as c:
        warm(c)
        one = list(c.schedule_many("noop", d))  # TimerHandle objects, made outside the timing
        many = c.schedule_many("noop", d)
        cancel = c.cancel
        ok: list[bool] = []
        fig[f"{S} Client.cancel"] = _rate(n, lambda: ok.extend([cancel(h) for h in one]))
        res: list[np.ndarray] = []
        fig[f"{S} Client.cancel_many"] = _rate(n, lambda: res.append(c.cancel_many(many)))
        if not all(ok) or not res[0].all():
            raise RuntimeError(
                f"cancel returned False for {ok.count(False)} per-call and "
                f"{int((~res[0]).sum())} batch handles of pending timers"
            )
    ds = (d / 1000).tolist()
    with HeapTimer() as ht:
        entries = [ht.schedule(x, _noop) for x in ds]
        fig["heapq+thread cancel"] = _rate(n, lambda: _each(ht.cancel, entries))
    with event_loop() as loop:
        handles = [loop.call_later(x, _noop) for x in ds]
        fig["asyncio TimerHandle.cancel"] = _rate(
            n, lambda: _each(asyncio.TimerHandle.cancel, handles)
        )
    fig["sched cancel"] = sched_cancel_rate(ds)
    if common.use_redis:
        m = min(n, common.REDIS_CALL_N)
        mb = min(n, common.REDIS_BATCH_N)
        one_ids, many_ids = _redis_members(m, "a"), _redis_members(mb, "b")
        with RedisDelayQueue() as q:
            q.schedule_many(ds[:m], one_ids)
            q.schedule_many(ds[:mb], many_ids)
            zrem = q.cancel
            removed: list[bool] = []
            fig[f"{R} ZREM"] = _rate(m, lambda: removed.extend([zrem(k) for k in one_ids]))
            got: list[int] = []
            fig[f"{R} ZREM pipelined"] = _rate(mb, lambda: got.append(q.cancel_many(many_ids)))
            if not all(removed) or got[0] != mb:
                raise RuntimeError("redis ZREM did not remove every pending member")
        fig[f"{R} timers (per call)"] = float(m)
        fig[f"{R} timers (batch)"] = float(mb)
    fig["ratio: Client.cancel / asyncio TimerHandle.cancel"] = (
        fig[f"{S} Client.cancel"] / fig["asyncio TimerHandle.cancel"]
    )
    return fig


def sched_cancel_rate(delays_s: list[float]) -> float:
    """sched.scheduler.cancel(event) with len(delays_s) events pending: its cancel removes
    the event from a list and re-heapifies (O(n)), so cancelling all n would take minutes;
    it cancels events in random order for SCHED_CANCEL_BUDGET_S and reports that rate."""
    s = sched_scheduler()
    events = [s.enter(x, 0, _noop) for x in delays_s]
    order = np.random.default_rng(5).permutation(len(events)).tolist()
    gc.collect()
    done = 0
    t0 = time.perf_counter()
    end = t0 + SCHED_CANCEL_BUDGET_S
    cancel = s.cancel
    for i in order:
        cancel(events[i])
        done += 1
        if not done % 8 and time.perf_counter() > end:
            break
    return done / (time.perf_counter() - t0)


# -- W7. scale --------------------------------------------------------------------------


def level_label(n: int) -> str:
    for scale, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return f"{n:,}"


def svc_scale(n: int, levels: list[int] | None = None) -> Figures:
    """W7: per-operation cost (µs) of Client.schedule and Client.cancel, per call, with
    10k, 100k, 1M (and, under --full, 10M) timers pending. One service sized for the
    largest level is filled by schedule_many (delays 30-60 s) up to each level in turn;
    at each level SCALE_OPS timers are scheduled one call at a time and then cancelled one
    call at a time. Peer: the heapq+thread timer filled (schedule_many) to the same levels,
    then HeapTimer.schedule / HeapTimer.cancel on SCALE_OPS entries. n is unused."""
    levels = sorted(levels or [10_000, 100_000, 1_000_000])
    k = SCALE_OPS
    fig: Figures = {}
    top = levels[-1]
    fill = _far_delays(top, seed=7)
    ops = _far_delays(k, seed=8)
    ops_list = ops.tolist()
    with _service(_capacity_for(top + k)) as svc, svc.client() as c:
        warm(c)
        have = 0
        for lvl in levels:
            for i in range(have, lvl, BATCH):
                c.schedule_many("noop", fill[i : min(lvl, i + BATCH)])
            have = lvl
            sched = c.schedule
            hs: list = []
            fig[f"{S} schedule @ {level_label(lvl)}"] = 1e6 / _rate(
                k,
                lambda: hs.extend([sched("noop", delay_ms=d) for d in ops_list]),  # noqa: B023
            )
            cancel = c.cancel
            fig[f"{S} cancel @ {level_label(lvl)}"] = 1e6 / _rate(k, lambda: _each(cancel, hs))  # noqa: B023
    fill_s = (fill / 1000).tolist()
    ops_s = (ops / 1000).tolist()
    with HeapTimer() as ht:
        have = 0
        for lvl in levels:
            ht.schedule_many(fill_s[have:lvl], _noop)
            have = lvl
            es: list = []
            fig[f"heapq+thread schedule @ {level_label(lvl)}"] = 1e6 / _rate(
                k,
                lambda: es.extend([ht.schedule(d, _noop) for d in ops_s]),  # noqa: B023
            )
            fig[f"heapq+thread cancel @ {level_label(lvl)}"] = 1e6 / _rate(
                k,
                lambda: _each(ht.cancel, es),  # noqa: B023
            )
    del fill_s
    return fig
