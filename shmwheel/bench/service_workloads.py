"""One repetition of each multiprocess-service workload, for shmwheel and its peers.

Like ``workloads``: every function takes a size and returns ``{figure: value}`` for one
repetition. Each workload starts its own ``TimerService`` (default executors, so the
pool is sized from nproc), measures it, stops it in a ``finally`` (which ends every
service process and unlinks its segment and semaphores), and only then measures the
baselines, so the idle service does not share the CPU with them.

The producer in the single-producer workloads is this process (the bench), a separate
process from the service's coordinator, reaper and executors. Timers that must not fire
while they are measured get delays of 30-60 s; stopping the service drops them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import itertools
import math
import multiprocessing as mp
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..segment import layout as L
from ..segment import shm
from ..service.client import Client, now_ms
from ..service.supervisor import TimerService
from .baselines import (
    HeapTimer,
    RedisDelayQueue,
    asyncio_loop,
    event_loop,
    sched_scheduler,
    zero_sleep_ms,
)
from .workloads import _each, bytes_per_object

Figures = dict[str, float]
S = "shmwheel"

FAR_LO_MS, FAR_HI_MS = 30_000, 60_000  # never due while measured
MEMORY_CAPACITY = 1_000_000  # the service's default capacity
BATCH = 100_000  # schedule_many batch size
POOL_N = 10_000  # ProcessPoolExecutor no-ops per repetition (it is slow)
POOL_MAP_N = 100_000  # multiprocessing.Pool.imap_unordered no-ops per repetition
POOL_CHUNK = 256  # its chunksize: tasks travel in batches, as the service's do
TRACE_N = 50_000  # entries traced for the Python peers' bytes per timer

services_started: list[str] = []  # every service name this process started (for leak checks)
leaked: list[str] = []  # services that left files in /dev/shm after stop()
# W4 raw lateness for --plot: system -> per-repetition arrays of ms (peers, exact) and the
# shmwheel service's lateness histogram counts per repetition (stats()["lateness_histogram"])
lateness_samples: dict[str, list[np.ndarray]] = {}
lateness_hists: list[list[int]] = []
SCHED_CANCEL_BUDGET_S = 0.2  # sched.cancel is O(n): cancel for this long, not all n

# The Redis sorted-set peer (baselines.RedisDelayQueue) runs only when main() sets this
# (redis-server on PATH, the redis module importable, and a probe server answered PING).
use_redis = False
R = "redis"
REDIS_CALL_N = 10_000  # per-call ZADD / ZREM are round-trip bound (~15k/s): at most this many
REDIS_BATCH_N = 100_000  # pipelined ZADD / ZREM: at most this many per repetition


def _redis_members(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def noop_task(payload: Any) -> None:
    """The task every service workload registers: does nothing."""


TASKS = {"noop": noop_task}  # executors import it as shmwheel.bench.service_workloads:noop_task


def _noop() -> None:
    pass


def _far_delays(n: int, seed: int = 1) -> np.ndarray:
    """n delays (ms, float) uniform in [30, 60] s."""
    return np.random.default_rng(seed).uniform(FAR_LO_MS, FAR_HI_MS, n)


def _rate(n: int, fn: Callable[[], object]) -> float:
    gc.collect()
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


@contextmanager
def _service(capacity: int = MEMORY_CAPACITY, **options: Any) -> Iterator[TimerService]:
    """A started service, stopped on exit; complains (stderr) if stop() left files."""
    with owned(TimerService(tasks=TASKS, capacity=capacity, **options)) as svc:
        svc.start()
        yield svc


@contextmanager
def owned(svc: TimerService) -> Iterator[TimerService]:
    """`svc`, which the caller starts (and may time), stopped on exit whatever happens;
    complains (stderr) if stop() left files."""
    services_started.append(svc.name)
    try:
        try:
            yield svc
        finally:
            svc.stop()  # a no-op if it never started or is stopped already
    finally:
        left = shm.service_files(svc.name)
        if left:
            leaked.append(svc.name)
            print(
                f"bench: service {svc.name} left {[str(p) for p in left]} after stop()",
                flush=True,
                file=sys.stderr,
            )


def _wait_completed(
    svc: TimerService, n: int, deadline_s: float, poll_s: float = 0.002
) -> tuple[dict[str, Any], float]:
    """Poll stats() until `completed` reaches n or time.monotonic() passes deadline_s;
    (the last stats, the monotonic time they were read)."""
    while True:
        st = svc.stats()
        t = time.monotonic()
        if st["completed"] >= n or t > deadline_s:
            return st, t
        time.sleep(poll_s)


def warm(c: Client) -> None:
    """Run every client call once or twice before timing (the first calls fill the client's
    caches of reserved slots and arena blocks); leaves nothing scheduled."""
    hs = [c.schedule("noop", delay_ms=FAR_HI_MS) for _ in range(600)]  # > one slot batch
    c.cancel(hs.pop())
    c.cancel_many(np.array([h.id for h in hs], np.int64))
    c.cancel_many(c.schedule_many("noop", np.full(600, float(FAR_HI_MS))))


def _capacity_for(n: int) -> int:
    """Room for n timers and the clients' reserved-slot caches (a start formats the whole
    wheel, so a smaller capacity starts faster)."""
    return int(n * 1.1) + 16_384


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
    with _service(_capacity_for(n)) as svc, svc.client() as c:
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
    if use_redis:
        m = min(n, REDIS_CALL_N)
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
    if use_redis:
        m = min(total, REDIS_BATCH_N)
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


# -- c. two producer processes ----------------------------------------------------------


def _producer(name: str, n: int, seed: int, barrier: Any, out: Any) -> None:
    """A producer process: connect, wait at the barrier, schedule n timers per call."""
    try:
        from shmwheel import connect

        delays = _far_delays(n, seed).tolist()
        with connect(name) as c:
            warm(c)
            sched = c.schedule
            barrier.wait(60)
            t0 = time.monotonic()
            handles = [sched("noop", delay_ms=d) for d in delays]
            t1 = time.monotonic()
            out.put(("ok", t0, t1, len(handles)))
    except Exception:  # noqa: BLE001 - reported to the parent, which raises
        out.put(("error", traceback.format_exc(), 0.0, 0))


def _collect(out: Any, procs: list[Any], timeout_s: float) -> list[tuple]:
    """One result per process from `out`, failing early if a process dies without one."""
    results: list[tuple] = []
    end = time.monotonic() + timeout_s
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=0.2))
            continue
        except queue.Empty:
            pass
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead or time.monotonic() > end:
            raise RuntimeError(
                f"producer processes failed (exit codes {dead}) or timed out "
                f"after {timeout_s} s; see stderr"
            )
    return results


def _threads(k: int, work: Callable[[int], None]) -> tuple[float, float]:
    """Run work(i) in k threads released together; (first start, last finish).

    If this thread is interrupted (Ctrl-C) or fails before the release, the barrier is
    broken so no worker is left waiting on it; the workers are daemons, so one still
    working never holds up the interpreter's exit (a worker left at the barrier did: the
    bench printed "interrupted" and then waited forever in threading._shutdown)."""
    barrier = threading.Barrier(k + 1)
    ends = [0.0] * k

    def body(i: int) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return  # the caller gave up before the release
        work(i)
        ends[i] = time.monotonic()

    ts = [
        threading.Thread(target=body, args=(i,), name=f"bench-worker-{i}", daemon=True)
        for i in range(k)
    ]
    try:
        for t in ts:
            t.start()
        gc.collect()
        barrier.wait()
    except BaseException:
        barrier.abort()
        raise
    t0 = time.monotonic()
    for t in ts:
        t.join()
    return t0, max(ends)


def producer_counts(spec: str = "1,2,nproc") -> list[int]:
    """ "1,2,nproc" -> [1, 2, os.cpu_count()], sorted, duplicates dropped."""
    ks = set()
    for x in (x.strip() for x in spec.split(",")):
        if not x:
            continue
        k = (os.cpu_count() or 1) if x == "nproc" else int(x)
        if k < 1:
            raise ValueError(f"producer counts must be >= 1, got {x!r}")
        ks.add(k)
    if not ks:
        raise ValueError("no producer counts given")
    return sorted(ks)


def _stop_procs(procs: list[Any], grace_s: float) -> None:
    """Join the producer processes for up to grace_s, then kill what is left."""
    end = time.monotonic() + grace_s
    for p in procs:
        if p.pid is None:
            continue
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _service_producers(svc: TimerService, k: int, n: int) -> tuple[float, float]:
    """k spawned producer processes each schedule n timers per call into svc, released by
    one barrier; (aggregate rate: k*n over first start to last finish, mean per-producer
    rate)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(k)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_producer, args=(svc.name, n, 10 + i, barrier, out), daemon=True)
        for i in range(k)
    ]
    ok = False
    try:
        for p in procs:
            p.start()
        results = _collect(out, procs, 120.0)
        ok = True
    finally:
        # on an error or Ctrl-C, do not wait for producers that may never finish
        _stop_procs(procs, 30.0 if ok else 0.5)
        out.close()
        out.join_thread()
    errors = [r[1] for r in results if r[0] != "ok"]
    if errors:
        raise RuntimeError("a producer process failed:\n" + errors[0])
    t0 = min(r[1] for r in results)
    t1 = max(r[2] for r in results)
    return k * n / (t1 - t0), statistics.mean([n / (r[2] - r[1]) for r in results])


def svc_producers(n: int, ks: list[int] | None = None) -> Figures:
    """W5: for each k in ks (default 1, 2, nproc), k producer processes (spawned) each
    schedule n timers per call into one service, released by one barrier; the rate is k*n
    over first start to last finish. Baselines (n/2 each, to save time; their per-call
    rates do not depend on n): k threads of this process scheduling into one heapq+thread
    timer; and into one asyncio loop running in another thread
    (call_soon_threadsafe(call_later), the thread-safe way), until the loop has made every
    call_later."""
    ks = ks or producer_counts()
    fig: Figures = {}
    with _service(_capacity_for(sum(ks) * n)) as svc:
        import psutil

        coordinator = psutil.Process(svc.procs["coordinator"].pid)
        for k in ks:
            before = sum(coordinator.cpu_times()[:2])
            agg, each = _service_producers(svc, k, n)
            fig[f"{S} {k} producer processes"] = agg
            fig[f"{S} {k} producers, per producer (mean)"] = each
            # what linking costs the coordinator: the CPU the producers cannot have
            fig[f"{S} {k} producers, coordinator CPU us per timer"] = (
                (sum(coordinator.cpu_times()[:2]) - before) * 1e6 / (k * n)
            )
    m = max(1, n // 2)
    for k in ks:
        delays = [(_far_delays(m, 10 + i) / 1000).tolist() for i in range(k)]
        fig[f"heapq+thread {k} threads"] = _heap_threads(k, m, delays)
        fig[f"asyncio {k} threads (call_soon_threadsafe)"] = _asyncio_threads(k, delays)
    if 1 in ks and 2 in ks:
        fig["ratio: 2 producers / 1 producer"] = (
            fig[f"{S} 2 producer processes"] / fig[f"{S} 1 producer processes"]
        )
    return fig


def _heap_threads(k: int, m: int, delays: list[list[float]]) -> float:
    with HeapTimer() as ht:

        def heap_work(i: int) -> None:
            sched = ht.schedule
            [sched(d, _noop) for d in delays[i]]

        t0, t1 = _threads(k, heap_work)
        return k * m / (t1 - t0)


def _asyncio_threads(k: int, delays: list[list[float]]) -> float:
    loop = asyncio_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        handles: list[asyncio.TimerHandle] = []

        def add(d: float) -> None:
            handles.append(loop.call_later(d, _noop))

        def aio_work(i: int) -> None:
            soon = loop.call_soon_threadsafe
            for d in delays[i]:
                soon(add, d)

        t0, _ = _threads(k, aio_work)
        done = threading.Event()
        end = [0.0]

        def finish() -> None:  # queued after every add: runs when all have run
            end[0] = time.monotonic()
            done.set()

        loop.call_soon_threadsafe(finish)
        if not done.wait(120):
            raise RuntimeError("the asyncio loop did not drain its calls in 120 s")
        return len(handles) / (end[0] - t0)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(30)
        loop.close()


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
    if use_redis:
        m = min(n, REDIS_CALL_N)
        mb = min(n, REDIS_BATCH_N)
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


# -- e. memory --------------------------------------------------------------------------


def svc_memory(n: int) -> Figures:
    """Bytes per pending timer at the default capacity (1 M): the whole segment
    (os.path.getsize of /dev/shm/shmwheel.<name>) over capacity, and the wheel + side
    tables alone (their layout sizes), and what one more timer of capacity adds to the
    segment (the layout for capacity + 1024, less the layout, over 1024). The segment also
    holds the 16 MiB payload arena,
    the rings and counters, which do not grow with capacity. Peers: traced allocations of
    50k pending entries (heapq+thread entry; asyncio TimerHandle; sched event), and the
    resident-memory growth per entry of 100k entries built in a fresh process (measured
    once per run); Redis:
    used_memory growth per member. n is the capacity."""
    fig: Figures = {}
    with _service(n) as svc:
        cap = svc.config.capacity
        size = os.path.getsize(shm.SHM_DIR / (shm.PREFIX + svc.name))
        off = L.segment_layout(svc.config)
        words = dict(zip(list(off)[:-1], np.diff(list(off.values())).tolist(), strict=True))
        fig[f"{S} segment / capacity"] = size / cap
        fig[f"{S} wheel+side / capacity"] = (words["wheel"] + words["side"]) * 8 / cap
        more = L.segment_layout(dataclasses.replace(svc.config, capacity=cap + 1024))["total"]
        fig[f"{S} segment bytes per added timer"] = (more - off["total"]) * 8 / 1024
        fig[f"{S} payload arena / capacity"] = (off["total"] - off["arena_meta"]) * 8 / cap
        fig[f"{S} segment bytes"] = float(size)

    m = TRACE_N
    ds = (_far_delays(m) / 1000).tolist()

    def traced(build: Callable[[], object]) -> float:
        return bytes_per_object(build, m)

    with HeapTimer() as ht:
        fig["heapq+thread entry"] = traced(lambda: [ht.schedule(x, _noop) for x in ds])
    with event_loop() as loop:
        fig["asyncio call_later"] = traced(lambda: [loop.call_later(x, _noop) for x in ds])
    s = sched_scheduler()
    fig["sched event"] = traced(lambda: [s.enter(x, 0, _noop) for x in ds])
    if not _rss_measured:  # once per bench run: it does not drift between repetitions
        ctx = mp.get_context("spawn")  # a fresh process has no free arenas to reuse
        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            for peer in RSS_PEERS:
                _rss_measured[peer] = pool.submit(_rss_per_entry, peer, RSS_N).result()
    for peer in RSS_PEERS:
        fig[f"{peer} RSS delta"] = _rss_measured[peer]
    if use_redis:
        members = _redis_members(m)
        with RedisDelayQueue() as q:
            before = q.used_memory()
            q.schedule_many(ds, members)
            fig[f"{R} used_memory / member"] = (q.used_memory() - before) / m
    return fig


RSS_N = 100_000  # entries per RSS measurement: a 1 MiB arena is 10 B per entry at most
RSS_PEERS = ("heapq+thread entry", "asyncio call_later", "sched event")
_rss_measured: dict[str, float] = {}


def _rss_per_entry(peer: str, n: int) -> float:
    """In a fresh process: resident-memory growth per pending entry of a peer (W3 as the
    issue asks it: an RSS delta, beside the traced Python allocations)."""
    import psutil

    ds = (_far_delays(n) / 1000).tolist()
    proc = psutil.Process()
    gc.collect()
    before = proc.memory_info().rss
    if peer == "heapq+thread entry":
        with HeapTimer() as ht:
            keep: list[Any] = [ht.schedule(x, _noop) for x in ds]
            gc.collect()
            return (proc.memory_info().rss - before) / n
    if peer == "asyncio call_later":
        with event_loop() as loop:
            keep = [loop.call_later(x, _noop) for x in ds]
            gc.collect()
            return (proc.memory_info().rss - before) / n
    s = sched_scheduler()
    keep = [s.enter(x, 0, _noop) for x in ds]
    gc.collect()
    del keep
    return (proc.memory_info().rss - before) / n


# -- f. lateness ------------------------------------------------------------------------

LATENESS_MARGIN_MS = 1000  # W4: the window starts 1 s after scheduling starts ...
QUICK_MARGIN_MS = 300  # ... or 0.3 s for small runs (--quick), which schedule in < 50 ms


def _margin_ms(n: int) -> int:
    return LATENESS_MARGIN_MS if n >= 100_000 else QUICK_MARGIN_MS


def _check_margin(deadlines_s: list[float], who: str) -> None:
    if time.monotonic() > min(deadlines_s):
        print(
            f"bench: lateness: {who} finished scheduling after its first deadline; its "
            f"figures include scheduling time",
            file=sys.stderr,
            flush=True,
        )


def _spread_ms(n: int) -> float:
    """The window the lateness timers are spread over: 2 s for 200k, down to 0.5 s."""
    return max(500.0, min(2000.0, n / 100.0))


def _percentiles(late_ms: np.ndarray, label: str) -> Figures:
    lateness_samples.setdefault(label, []).append(late_ms)
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
        lateness_hists.append([int(x) for x in st["lateness_histogram"]])
        if st["completed"] < n:
            print(
                f"bench: lateness: only {st['completed']} of {n} timers completed in the "
                f"bounded wait",
                file=sys.stderr,
                flush=True,
            )

    def targets() -> list[float]:
        """Absolute deadlines (s) rounded up to a whole ms, from now."""
        now = time.monotonic() * 1000 + _margin_ms(n)
        return [math.ceil(now + x) / 1000 for x in offsets.tolist()]

    with HeapTimer() as ht:
        got = np.full(n, np.nan)
        count = [0]
        dl = targets()

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
        fig.update(_percentiles((got[done] - np.array(dl)[done]) * 1000, "heapq+thread"))

    with event_loop() as loop:
        got = np.full(n, np.nan)
        left = [n]
        fut = loop.create_future()

        def arec(i: int) -> None:
            got[i] = time.monotonic()
            left[0] -= 1
            if left[0] == 0:
                fut.set_result(None)

        dl = targets()
        for i, t in enumerate(dl):
            loop.call_at(t, arec, i)
        _check_margin(dl, "asyncio")
        loop.run_until_complete(asyncio.wait_for(fut, max(dl) - time.monotonic() + 10))
        fig.update(_percentiles((got - np.array(dl)) * 1000, "asyncio call_at"))

    s = sched_scheduler(skip_zero_sleep=True)
    got = np.full(n, np.nan)

    def srec(i: int) -> None:
        got[i] = time.monotonic()

    dl = targets()
    for i, t in enumerate(dl):
        s.enterabs(t, 0, srec, (i,))
    _check_margin(dl, "sched")
    s.run()
    fig.update(_percentiles((got - np.array(dl)) * 1000, "sched run()"))
    fig["sched default delayfunc: time.sleep(0) per event"] = zero_sleep_ms()
    if use_redis:
        fig.update(_redis_lateness(n, offsets))
    return fig


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
                "bench: lateness: redis finished scheduling after its first deadline; "
                "its figures include scheduling time",
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

    m = min(n, POOL_N)
    with ProcessPoolExecutor(max_workers=execs, mp_context=mp.get_context("spawn")) as pool:
        wait_futures([pool.submit(noop_task, None) for _ in range(execs * 4)])
        fig["ProcessPoolExecutor.submit"] = _rate(
            m, lambda: wait_futures([pool.submit(noop_task, None) for _ in range(m)])
        )

    p = min(n, POOL_MAP_N)
    with mp.get_context("spawn").Pool(execs) as mpool:
        list(mpool.imap_unordered(noop_task, [None] * (execs * 4)))
        fig["multiprocessing.Pool.imap_unordered"] = _rate(
            p,
            lambda: list(
                mpool.imap_unordered(noop_task, itertools.repeat(None, p), chunksize=POOL_CHUNK)
            ),
        )

    margin_s = 0.05 + n * 6e-6
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
        fig["heapq+thread (in-process)"] = count[0] / (time.monotonic() - t0)

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
        fig["asyncio call_at (in-process)"] = n / (time.monotonic() - t0)
    if use_redis:
        fig[f"{R} ZSET + Lua claim"] = _redis_fire(n)
    return fig


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


# -- W7. scale --------------------------------------------------------------------------

SCALE_OPS = 10_000  # per-call schedules (then cancels) timed at each pending level


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


# -- start-up ------------------------------------------------------------------------------


def svc_startup(n: int) -> Figures:
    """What a user waits for before the first timer: ``import shmwheel`` in a fresh
    interpreter (wall time of the import statement alone, median of 5; and with the first
    use of TimerService, which loads the service layer and numpy), and
    ``TimerService.start()`` of a 1M-capacity service (the default) until every process
    is ready, and its stop(). Peer: ``import asyncio`` in a fresh interpreter, and
    starting a ProcessPoolExecutor with as many workers and running one no-op in each."""
    code = "import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"

    def import_s(mod: str) -> float:
        runs = [
            float(
                subprocess.run(
                    [sys.executable, "-c", code.format(mod=mod)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            for _ in range(5)
        ]
        return sorted(runs)[2]

    fig: Figures = {
        "import shmwheel": import_s("shmwheel") * 1000,
        "import asyncio": import_s("asyncio") * 1000,
        # names load on first use (PEP 562): what the service layer costs
        "import shmwheel + first use of TimerService": import_s("shmwheel; shmwheel.TimerService")
        * 1000,
    }
    t0 = time.perf_counter()
    svc = TimerService(tasks=TASKS)
    svc.start()
    t1 = time.perf_counter()
    svc.stop()
    t2 = time.perf_counter()
    fig[f"{S} TimerService.start() (1M capacity)"] = (t1 - t0) * 1000
    fig[f"{S} TimerService.stop()"] = (t2 - t1) * 1000
    t0 = time.perf_counter()
    with ProcessPoolExecutor(svc.config.executors) as pool:
        list(pool.map(_noop_pool, range(svc.config.executors)))
    fig["ProcessPoolExecutor start + one task per worker"] = (time.perf_counter() - t0) * 1000
    return fig


def _noop_pool(i: int) -> int:
    return i
