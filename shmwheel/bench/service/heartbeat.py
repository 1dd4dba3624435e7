"""W11, the heartbeat: N timers, each pushed back at a steady rate and none firing (a
worker's liveness deadline, moved on every heartbeat). shmwheel's ``TimerHandle.reset``
against the two calls that do the same without it, shmwheel's own ``cancel`` +
``schedule`` and each peer's: asyncio's ``TimerHandle.cancel()`` + ``loop.call_later``
in one running loop, and the heapq + thread timer's cancel + schedule.

A repetition makes N = n // 10 timers with heartbeat timeouts of 30-60 s, then runs
ROUNDS rounds; each round moves every timer once, in the same order (so each timer is
reset at the same steady rate), as fast as the caller can. Figures are calls (or pairs)
per second over all N * ROUNDS heartbeats. shmwheel's two ways run on one service, each
after its client's ring has drained (the coordinator relinks each reset, and retires each
cancelled slot and links each schedule, from that ring: with more records than the ring
holds, the rate includes its work, as W1's does), in alternating order from one repetition
to the next; the coordinator's CPU time for each way is a figure too. None may fire, and
every reset and cancel must win.
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import time
from collections.abc import Callable

from ..baselines import HeapTimer, event_loop
from ..measure import Figures, noop, ops_per_s
from .common import S, _capacity_for, _far_delays, _service, warm

ROUNDS = 10
YIELD_EVERY = 256  # heartbeats handled per turn of the asyncio loop (it runs between)
RESET = f"{S} TimerHandle.reset"
PAIR = f"{S} cancel + schedule"
ASYNCIO = "asyncio cancel + call_later"
HEAP = "heapq+thread cancel + schedule"
R_PAIR = "ratio: reset / cancel + schedule"
R_ASYNCIO = "ratio: reset / asyncio cancel + call_later"
TIMERS = f"timers (N), each moved {ROUNDS} times"
CPU = ", coordinator CPU us per timer"  # per heartbeat: what relinking costs the coordinator

_order = itertools.count()  # which shmwheel way goes first: alternates by repetition


def heartbeat_size(n: int) -> int:
    """N for a repetition of size n: n // 10 timers (at least 100)."""
    return max(100, n // 10)


def cpu_ns(pid: int) -> int:
    """CPU time process `pid` has run, ns, from its POSIX CPU clock (psutil's 10 ms ticks
    are too coarse for the ~10 ms the coordinator spends on a repetition)."""
    clock = ctypes.c_int()
    if _libc.clock_getcpuclockid(pid, ctypes.byref(clock)) == 0:
        return time.clock_gettime_ns(clock.value)
    import psutil  # no CPU clock for it here: user + system time, in ticks

    return int(sum(psutil.Process(pid).cpu_times()[:2]) * 1e9)


_libc = ctypes.CDLL(None)


def svc_heartbeat(n: int) -> Figures:
    """One repetition of W11 (see the module docstring)."""
    timers = heartbeat_size(n)
    calls = timers * ROUNDS
    delays = _far_delays(timers, seed=11).tolist()
    fig: Figures = {TIMERS: float(timers)}
    with _service(_capacity_for(2 * timers)) as svc, svc.client() as c:
        warm(c)
        handles = [c.schedule("noop", delay_ms=d) for d in delays]
        ring = svc.mem.producer[c.ring]
        coordinator = svc.procs["coordinator"].pid

        def drain() -> None:  # the coordinator has taken every record of the client's
            while ring.pending():
                time.sleep(0.001)

        def reset_all() -> None:
            for _ in range(ROUNDS):
                for h, d in zip(handles, delays, strict=True):
                    if not h.reset(d):
                        raise RuntimeError(f"a reset of pending timer {h} lost")

        def cancel_schedule_all() -> None:
            cancel, schedule = c.cancel, c.schedule
            for _ in range(ROUNDS):
                for i, d in enumerate(delays):
                    if not cancel(handles[i]):
                        raise RuntimeError(f"a cancel of pending timer {handles[i]} lost")
                    handles[i] = schedule("noop", delay_ms=d)

        ways: list[tuple[str, Callable[[], None]]] = [
            (RESET, reset_all),
            (PAIR, cancel_schedule_all),
        ]
        if next(_order) % 2:
            ways.reverse()
        for name, run in ways:
            drain()
            cpu = cpu_ns(coordinator)
            fig[name] = ops_per_s(calls, run)
            drain()
            fig[name + CPU] = (cpu_ns(coordinator) - cpu) / 1e3 / calls
        fired = svc.stats()["fired"]
        if fired:
            raise RuntimeError(f"{fired} heartbeat timers fired: the workload is wrong")
    fig[ASYNCIO] = asyncio_heartbeat(delays)
    fig[HEAP] = heap_heartbeat(delays)
    fig[R_PAIR] = fig[RESET] / fig[PAIR]
    fig[R_ASYNCIO] = fig[RESET] / fig[ASYNCIO]
    return fig


def asyncio_heartbeat(delays_ms: list[float]) -> float:
    """Heartbeats per second in one running event loop, as an asyncio user writes it:
    ``handle.cancel(); handle = loop.call_later(timeout, on_expire)``, the loop turning
    every YIELD_EVERY heartbeats (a server's loop runs between the events it handles:
    there it drops the cancelled handles from its heap, as it does in production)."""
    delays = [d / 1000 for d in delays_ms]

    async def run() -> float:
        loop = asyncio.get_running_loop()
        handles = [loop.call_later(d, noop) for d in delays]
        later, sleep = loop.call_later, asyncio.sleep
        done = 0
        t = time.perf_counter()
        for _ in range(ROUNDS):
            for i, d in enumerate(delays):
                handles[i].cancel()
                handles[i] = later(d, noop)
                done += 1
                if not done % YIELD_EVERY:
                    await sleep(0)
        rate = done / (time.perf_counter() - t)
        for h in handles:
            h.cancel()
        return rate

    with event_loop() as loop:
        return loop.run_until_complete(run())


def heap_heartbeat(delays_ms: list[float]) -> float:
    """Heartbeats per second on the heapq + thread timer: cancel (the heapq docs' lazy
    deletion: the entry is marked) and schedule a new entry, under its lock."""
    delays = [d / 1000 for d in delays_ms]
    with HeapTimer() as ht:
        entries = [ht.schedule(d, noop) for d in delays]
        cancel, schedule = ht.cancel, ht.schedule

        def beat() -> None:
            for _ in range(ROUNDS):
                for i, d in enumerate(delays):
                    cancel(entries[i])
                    entries[i] = schedule(d, noop)

        rate = ops_per_s(len(delays) * ROUNDS, beat)
        for e in entries:
            cancel(e)
    return rate
