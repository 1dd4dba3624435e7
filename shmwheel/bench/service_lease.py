"""W12, leases (``Client.lease``): beats per second and how soon an expiry runs, beside W11
(the heartbeat, service_heartbeat.py) and asyncio's ``Timeout.reschedule`` in one process.

``svc_lease`` (beats): N = n // 10 leases with 30-60 s ttls on one service. In this
process, ``Lease.beat()`` on every lease and ``TimerHandle.reset(d)`` on as many plain
timers, ROUNDS rounds each (alternating which goes first: beat is reset plus the lease's
own Python, and its goal is 0.9x reset's rate); then the leases, pickled, are handed to K
spawned holder processes, which beat their share ROUNDS rounds, released by one barrier
(aggregate rate: all beats over first start to last finish). The peer is asyncio's
``Timeout.reschedule`` on N ``asyncio.timeout`` contexts in one running loop, turning every
YIELD_EVERY beats. None may expire, and every beat must be True.

``svc_lease_expiry`` (delay): M = n // 50 leases (at least 100) held by K spawned
processes, each beating its share BEATS times with a far ttl and then once more with a
short ttl, staggered so that the expiries spread over SPREAD_MS from AHEAD_MS on. Each
expiry task stores its start minus the deadline its lease's last beat set (the
deadline is that beat's monotonic now plus its ttl, rounded up to the ms) in a shared
file: p50 / p99 / max of those, in ms. The peer: M asyncio timeouts rescheduled the same
way in one loop, each measured from its ``when`` to its ``except TimeoutError`` block.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing as mp
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from ..service.processes.context import context
from ..service.supervisor.supervisor import TimerService
from .baselines import event_loop
from .service_common import TASKS, S, _capacity_for, _far_delays, owned, warm
from .service_producers import run_processes
from .workloads import Figures, _rate

ROUNDS = 10
K = 2  # holder processes
BEATS = 3  # far beats of each lease before its last, short one (svc_lease_expiry)
AHEAD_MS, SPREAD_MS = 300, 1000  # the short ttls: AHEAD_MS + [0, SPREAD_MS)
YIELD_EVERY = 256  # beats per turn of the asyncio loop

BEAT = f"{S} Lease.beat, 1 process"
BEAT_K = f"{S} Lease.beat, {K} processes"
RESET = f"{S} TimerHandle.reset, 1 process"
ASYNCIO = "asyncio Timeout.reschedule"
R_RESET = "ratio: Lease.beat / TimerHandle.reset"
LEASES = f"timers (N): leases, each beaten {ROUNDS} times"
EXPIRE = "expiry delay"  # + " p50: shmwheel" ...
QS = ("p50", "p99", "max")

_order = itertools.count()
_delays: dict[str, np.ndarray] = {}  # an executor's view of each delay file


def record_expiry(payload: list[Any]) -> None:
    """The expiry task: delays[i] = its start - the deadline of its lease's last beat (ns),
    payload = [path, i]."""
    start = time.monotonic_ns()
    path, i = payload
    arr = _delays.get(path)
    if arr is None:
        arr = _delays[path] = np.memmap(path, dtype=np.int64, mode="r+")
    arr[i] = start - context().deadline_ms * 1_000_000


def _service(capacity: int) -> TimerService:
    return TimerService(tasks={**TASKS, "expired": record_expiry}, capacity=capacity)


def _holder(leases: list[Any], rounds: int, last: list[float] | None, go: Any, out: Any) -> None:
    """A holder process: beat each lease once (warm), wait at `go`, beat all `rounds` times
    (timed), then once more with ttl last[i] if `last`. Puts ("ok", t0, t1) or an error."""
    try:
        for lease in leases:
            if not lease.beat():
                raise RuntimeError(f"{lease} was not held at the start")
        go.wait(120)
        t0 = time.monotonic()
        for _ in range(rounds):
            for lease in leases:
                if not lease.beat():
                    raise RuntimeError(f"a beat of held {lease} lost")
        t1 = time.monotonic()
        for lease, ttl in zip(leases, last or [], strict=False):
            if not lease.beat(ttl):
                raise RuntimeError(f"the last beat of held {lease} lost")
        out.put(("ok", t0, t1))
    except Exception:  # noqa: BLE001 - reported to the parent, which raises
        out.put(("error", traceback.format_exc(), 0.0))


def _holders(leases: list[Any], rounds: int, last: list[float] | None) -> float:
    """K spawned holders, each with every K-th lease (and its last ttl), released by one
    barrier; the aggregate beat rate over first start to last finish."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Barrier(K + 1), ctx.Queue()
    procs = [
        ctx.Process(
            target=_holder,
            args=(leases[j::K], rounds, None if last is None else last[j::K], go, out),
            daemon=True,
        )
        for j in range(K)
    ]
    results = run_processes(procs, out, "holder", started=lambda: go.wait(120))
    return len(leases) * rounds / (max(r[2] for r in results) - min(r[1] for r in results))


def svc_lease(n: int) -> Figures:
    """One repetition of W12's beats (see the module docstring)."""
    leases_n = max(100, n // 10)
    ttls = _far_delays(leases_n, seed=12).tolist()
    fig: Figures = {LEASES: float(leases_n)}
    with owned(_service(_capacity_for(2 * leases_n))) as svc:
        svc.start()
        with svc.client() as c:
            warm(c)
            leases = [c.lease(t, on_expire="noop") for t in ttls]
            handles = [c.schedule("noop", delay_ms=t) for t in ttls]

            def beat_all() -> None:
                for _ in range(ROUNDS):
                    for lease in leases:
                        if not lease.beat():
                            raise RuntimeError(f"a beat of held {lease} lost")

            def reset_all() -> None:
                for _ in range(ROUNDS):
                    for h, t in zip(handles, ttls, strict=True):
                        if not h.reset(t):
                            raise RuntimeError(f"a reset of pending {h} lost")

            ways: list[tuple[str, Callable[[], None]]] = [(BEAT, beat_all), (RESET, reset_all)]
            if next(_order) % 2:
                ways.reverse()
            for name, run in ways:
                fig[name] = _rate(leases_n * ROUNDS, run)
            c.cancel_many(handles)
            fig[BEAT_K] = _holders(leases, ROUNDS, None)
            fired = svc.stats()["fired"]
            if fired:
                raise RuntimeError(f"{fired} leases expired while beaten: the workload is wrong")
    fig[ASYNCIO] = _asyncio_beats([t / 1000 for t in ttls])
    fig[R_RESET] = fig[BEAT] / fig[RESET]
    return fig


def _asyncio_beats(ttls: list[float]) -> float:
    """Timeout.reschedule calls per second on len(ttls) asyncio.timeout contexts (each a
    task waiting inside one), in one running loop that turns every YIELD_EVERY beats."""

    async def run() -> float:
        loop = asyncio.get_running_loop()
        ready: list[asyncio.Timeout] = []
        stop = loop.create_future()

        async def hold(ttl: float) -> None:
            async with asyncio.timeout(ttl) as cm:
                ready.append(cm)
                await asyncio.shield(stop)

        tasks = [asyncio.ensure_future(hold(t)) for t in ttls]
        while len(ready) < len(ttls):
            await asyncio.sleep(0)
        done = 0
        t0 = time.perf_counter()
        for _ in range(ROUNDS):
            for cm, ttl in zip(ready, ttls, strict=True):
                cm.reschedule(loop.time() + ttl)
                done += 1
                if not done % YIELD_EVERY:
                    await asyncio.sleep(0)
        rate = done / (time.perf_counter() - t0)
        stop.set_result(None)
        await asyncio.gather(*tasks)
        return rate

    with event_loop() as loop:
        return loop.run_until_complete(run())


def svc_lease_expiry(n: int) -> Figures:
    """One repetition of W12's expiry delay (see the module docstring)."""
    m = max(100, n // 50)
    far = _far_delays(m, seed=13).tolist()
    last = (AHEAD_MS + np.arange(m) * (SPREAD_MS / m)).tolist()
    fig: Figures = {}
    fd, path = tempfile.mkstemp(prefix="shmwheel-lease-", suffix=".i64")
    try:
        os.ftruncate(fd, 8 * m)
        delays = np.memmap(path, dtype=np.int64, mode="r+")
        delays[:] = -1
        with owned(_service(_capacity_for(m))) as svc:
            svc.start()
            with svc.client() as c:
                leases = [
                    c.lease(t, on_expire="expired", payload=[path, i]) for i, t in enumerate(far)
                ]
                _holders(leases, BEATS, last)
                give_up = time.monotonic() + AHEAD_MS / 1000 + SPREAD_MS / 1000 + 30
                while (delays < 0).any():
                    if time.monotonic() > give_up:
                        raise RuntimeError(f"{int((delays < 0).sum())} leases never expired")
                    time.sleep(0.01)
        ms = np.asarray(delays, np.float64) / 1e6
        del delays
    finally:
        os.close(fd)
        os.unlink(path)
    for q, v in zip(QS, np.percentile(ms, [50, 99, 100]).tolist(), strict=True):
        fig[f"{EXPIRE} {q}: {S}"] = v
    aio = _asyncio_expiry(far, last)
    for q, v in zip(QS, np.percentile(aio, [50, 99, 100]).tolist(), strict=True):
        fig[f"{EXPIRE} {q}: asyncio"] = v
    return fig


def _asyncio_expiry(far_ms: list[float], last_ms: list[float]) -> np.ndarray:
    """ms from each asyncio timeout's `when` to its ``except TimeoutError`` block, for
    timeouts rescheduled BEATS times with a far ttl and then once with last_ms[i]."""

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        out: list[float] = []
        ready: list[asyncio.Timeout] = []

        async def hold(ttl: float) -> None:
            try:
                async with asyncio.timeout(ttl) as cm:
                    ready.append(cm)
                    await asyncio.sleep(3600)
            except TimeoutError:
                out.append((loop.time() - (cm.when() or 0.0)) * 1000)

        tasks = [asyncio.ensure_future(hold(t / 1000)) for t in far_ms]
        while len(ready) < len(far_ms):
            await asyncio.sleep(0)
        for _ in range(BEATS):
            for cm, ttl in zip(ready, far_ms, strict=True):
                cm.reschedule(loop.time() + ttl / 1000)
        for cm, ttl in zip(ready, last_ms, strict=True):
            cm.reschedule(loop.time() + ttl / 1000)
        await asyncio.gather(*tasks)
        return out

    with event_loop() as loop:
        return np.array(loop.run_until_complete(run()))
