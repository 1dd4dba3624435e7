"""W5: several producer processes scheduling into one service at once, released by one
barrier, beside threads of this process scheduling into one heapq+thread timer or one
asyncio loop; and the thread and process plumbing that runs them (``_threads``,
``_producer``, ``_collect``, ``_stop_procs``).
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import os
import queue
import statistics
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..service.supervisor.supervisor import TimerService
from .baselines import HeapTimer, asyncio_loop
from .service_common import S, _capacity_for, _far_delays, _service, warm
from .workloads import Figures, _noop

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
    bench printed "interrupted" and then waited forever in threading._shutdown). A
    worker's exception is raised here once every worker is done."""
    barrier = threading.Barrier(k + 1)
    ends = [0.0] * k
    failed: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return  # the caller gave up before the release
        try:
            work(i)
        except BaseException as e:  # re-raised by the caller: no rate from a failed run
            failed.append(e)
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
    if failed:
        raise failed[0]
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


def run_processes(
    procs: list[Any], out: Any, what: str, started: Callable[[], object] | None = None
) -> list[tuple]:
    """Start `procs`, call `started` (if any), collect each one's ("ok", t0, t1) from
    `out`; RuntimeError naming `what` if one failed. On an error or Ctrl-C it does not
    wait for processes that may never finish."""
    ok = False
    try:
        for p in procs:
            p.start()
        if started is not None:
            started()
        results = _collect(out, procs, 120.0)
        ok = True
    finally:
        _stop_procs(procs, 30.0 if ok else 0.5)
        out.close()
        out.join_thread()
    errors = [r[1] for r in results if r[0] != "ok"]
    if errors:
        raise RuntimeError(f"a {what} process failed:\n" + errors[0])
    return results


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
    results = run_processes(procs, out, "producer")
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
