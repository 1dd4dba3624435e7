"""W3 and W8: what having the service costs. Bytes per pending timer (the segment beside
the peers' traced allocations, RSS growth and Redis memory, W3), and the time to import
shmwheel and to start and stop a service (W8), each beside its peers.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from ..segment import layout as L
from ..segment import shm
from ..service.supervisor.supervisor import TimerService
from . import service_common as common
from .baselines import HeapTimer, RedisDelayQueue, event_loop, sched_scheduler
from .service_common import R, S, _far_delays, _redis_members, _service
from .workloads import Figures, _noop, bytes_per_object

TRACE_N = 50_000  # entries traced for the Python peers' bytes per timer


# -- e. memory --------------------------------------------------------------------------


def svc_memory(n: int) -> Figures:
    """Bytes per pending timer at the default capacity (1 M): the whole segment
    (os.path.getsize of /dev/shm/shmwheel.<name>) over capacity, and the wheel + side
    tables alone (their layout sizes), and what one more timer of capacity adds to the
    segment (the layout for capacity + 1024, the other regions as they are, less the
    layout, over 1024). The segment also holds regions not sized by capacity by default
    (segment/sizes.py): the rings, the watch and waiter tables, and the payload
    arena (4 MiB up to about 1 M timers, then 4 bytes a timer). Peers: traced allocations of
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
        fig[f"{S} payload arena / capacity"] = (off["anchors"] - off["arena_meta"]) * 8 / cap
        fig[f"{S} fixed regions / capacity"] = size / cap - (more - off["total"]) * 8 / 1024
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
    if common.use_redis:
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


# -- start-up ------------------------------------------------------------------------------


def svc_startup(n: int) -> Figures:
    """What a user waits for before the first timer: ``import shmwheel`` in a fresh
    interpreter (wall time of the import statement alone, median of 5; and with the first
    use of TimerService, which loads the service layer and numpy), and
    ``TimerService.start()`` of a 1M-capacity service (the default, with a stdlib no-op
    task: LIGHT_TASKS) until every process is ready, the replacement of a SIGKILLed
    executor (``replacement_ms``), its stop(), and how many of shmwheel's modules have no
    bytecode cache for the zygote (``uncached_modules``). Peer: ``import asyncio`` in a fresh
    interpreter, and starting a ProcessPoolExecutor with as many workers and running one
    no-op in each."""
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
    svc = TimerService(tasks=LIGHT_TASKS)
    svc.start()
    t1 = time.perf_counter()
    try:
        fig[f"{S} executor replaced: SIGKILL -> next timer run"] = replacement_ms(svc)
    finally:
        t2 = time.perf_counter()
        svc.stop()
        t3 = time.perf_counter()
    fig[f"{S} TimerService.start() (1M capacity)"] = (t1 - t0) * 1000
    fig[f"{S} modules without a bytecode cache"] = float(uncached_modules())
    fig[f"{S} TimerService.stop()"] = (t3 - t2) * 1000
    t0 = time.perf_counter()
    with ProcessPoolExecutor(svc.config.executors) as pool:
        list(pool.map(_noop_pool, range(svc.config.executors)))
    fig["ProcessPoolExecutor start + one task per worker"] = (time.perf_counter() - t0) * 1000
    return fig


def _noop_pool(i: int) -> int:
    return i


def uncached_modules() -> int:
    """shmwheel's modules loaded in this process whose bytecode cache is missing or older
    than the source while Python writes none (PYTHONDONTWRITEBYTECODE): every service's
    zygote, which has this process's environment, compiles each of them from source on
    every start() (20-40 ms of CPU for the roles' 25 modules on the 2-core VM;
    docs/performance.md)."""
    if not sys.flags.dont_write_bytecode:
        return 0  # the first start wrote them (or the install did)
    n = 0
    for name, module in list(sys.modules.items()):
        source = getattr(module, "__file__", None) or ""
        if not (name == "shmwheel" or name.startswith("shmwheel.")) or not source.endswith(".py"):
            continue
        cache = importlib.util.cache_from_source(source)
        try:
            fresh = os.stat(cache).st_mtime >= os.stat(source).st_mtime
        except OSError:
            fresh = False
        n += not fresh
    return n


REPLACE_N = 5  # kills per repetition (median)
# W8's task: a stdlib function, imported already, so start() and the replacement are the
# service's own figures (each executor imports its task modules after it starts: a task
# module adds its import time to both; the bench's own, service_common, about 35 ms)
LIGHT_TASKS = {"noop": "builtins:id"}


def replacement_ms(svc: TimerService) -> float:
    """SIGKILL every executor, at once, with a no-op timer due now: the time until it has
    run, i.e. until a replacement executor is up and running timers (median of
    REPLACE_N kills; the supervisor sees the death, restarts the role, the new process
    attaches and takes the timer)."""
    times = []
    with svc.client() as c:
        c.schedule("noop", delay_ms=0).result(timeout=30)  # the executors are up
        for _ in range(REPLACE_N):
            old = [p.pid for role, p in svc.procs.items() if role.startswith("exec")]
            t0 = time.perf_counter()
            for pid in old:
                os.kill(pid, signal.SIGKILL)
            c.schedule("noop", delay_ms=0).result(timeout=30)
            times.append((time.perf_counter() - t0) * 1000)
            # a replacement can run the timer before the supervisor has recorded its pid
            # (or, with several executors, the others'): the next kill must find every
            # executor replaced
            end = time.monotonic() + 30
            while any(svc.procs[f"exec{i}"].pid == pid for i, pid in enumerate(old)):
                if time.monotonic() > end:
                    raise RuntimeError("the killed executors were not replaced within 30 s")
                time.sleep(0.001)
    return float(np.median(times))
