"""W13, jobs bounded in time: shmwheel's ``Executor`` beside ``ProcessPoolExecutor`` and
pebble's ``ProcessPool`` (when installed), each with 2 workers in one run.

* Throughput: J no-op jobs (J = n // 10), each with a 10 s time limit where the pool has
  one (``ProcessPoolExecutor`` has none), all submitted, then every result taken; jobs/s.
* Stop latency: a job that sleeps 60 s with a 0.2 s time limit, submitted to an idle
  pool; how long past its limit the caller's wait ends (ms), the median of STOPS.
* Lanes: a service with 1 executor and 2 job workers, both busy on jobs that sleep; T
  timers due in 1-10 ms run meanwhile; their lateness (p50, p99, ms) from the service.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import statistics
import time

import numpy as np

from ...examples import jobs
from ...service.jobs.executor import Executor
from ..measure import Figures, ops_per_s
from .common import _service

WORKERS = 2
LIMIT_S = 10.0
HANG_LIMIT_S = 0.2
STOPS = 3
LANE_TIMERS = 2000
SW = "shmwheel Executor"
PPE = "ProcessPoolExecutor"
PEBBLE = "pebble ProcessPool"
SW_STOP = f"{SW}: hung job's wait ends past its limit (ms)"
PEBBLE_STOP = f"{PEBBLE}: hung job's wait ends past its limit (ms)"
LANE_P50, LANE_P99 = (
    "timers' lateness p50, job workers busy (ms)",
    ("timers' lateness p99, job workers busy (ms)"),
)
R_PPE, R_PEBBLE = f"ratio: {SW} / {PPE}", f"ratio: {SW} / {PEBBLE}"


def jobs_size(n: int) -> int:
    return max(1000, n // 10)


def _pebble() -> object | None:
    try:
        import pebble
    except ImportError:
        return None
    return pebble


def _drain(futures: list[cf.Future[object]]) -> None:
    for f in futures:
        f.result()


def svc_jobs(n: int) -> Figures:
    """One repetition of W13 (see the module docstring)."""
    count = jobs_size(n)
    fig: Figures = {}
    with Executor(WORKERS, time_limit=LIMIT_S) as ex:
        _drain([ex.submit(jobs.noop) for _ in range(200)])  # warm: every worker has imported
        fig[SW] = ops_per_s(count, lambda: _drain([ex.submit(jobs.noop) for _ in range(count)]))
        fig[SW_STOP] = statistics.median(_overrun(ex.submit) for _ in range(STOPS))
    with cf.ProcessPoolExecutor(WORKERS) as ppe:
        _drain([ppe.submit(jobs.noop) for _ in range(200)])
        fig[PPE] = ops_per_s(count, lambda: _drain([ppe.submit(jobs.noop) for _ in range(count)]))
    fig[R_PPE] = fig[SW] / fig[PPE]
    pebble = _pebble()
    if pebble is not None:
        pool = pebble.ProcessPool(max_workers=WORKERS)  # type: ignore[attr-defined]
        try:
            _drain([pool.schedule(jobs.noop, timeout=LIMIT_S) for _ in range(200)])
            fig[PEBBLE] = ops_per_s(
                count,
                lambda: _drain([pool.schedule(jobs.noop, timeout=LIMIT_S) for _ in range(count)]),
            )
            fig[PEBBLE_STOP] = statistics.median(
                _overrun(lambda f, s: pool.schedule(f, args=(s,), timeout=HANG_LIMIT_S))
                for _ in range(STOPS)
            )
        finally:
            pool.stop()
            pool.join()
        fig[R_PEBBLE] = fig[SW] / fig[PEBBLE]
    fig[LANE_P50], fig[LANE_P99] = _lanes()
    return fig


def _overrun(submit: object) -> float:
    """ms past HANG_LIMIT_S at which the caller's wait for a hung job ends (its planned
    failure is not logged)."""
    quiet = logging.getLogger("shmwheel.jobs")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        return _overrun_once(submit)
    finally:
        quiet.setLevel(level)


def _overrun_once(submit: object) -> float:
    t = time.perf_counter()
    if submit.__name__ == "submit":  # type: ignore[attr-defined]
        job = submit(jobs.hang, 60.0, time_limit=HANG_LIMIT_S)  # type: ignore[operator]
    else:
        job = submit(jobs.hang, 60.0)  # type: ignore[operator]
    try:
        job.result(30)
    except BaseException:
        pass
    return (time.perf_counter() - t - HANG_LIMIT_S) * 1000.0


def _lanes() -> tuple[float, float]:
    """Timers' lateness p50 / p99 (ms) while both job workers sleep."""
    with _service(executors=1, job_workers=WORKERS) as svc, svc.client() as c:
        ex = svc.executor()
        busy = [ex.submit(jobs.hang, 60.0) for _ in range(WORKERS)]
        end = time.monotonic() + 10
        while not all(j.running() for j in busy) and time.monotonic() < end:
            time.sleep(0.001)
        delays = np.random.default_rng(12).uniform(1.0, 10.0, LANE_TIMERS)
        before = svc.stats()["completed"]
        for d in delays:
            c.schedule("noop", delay_ms=float(d))
        # every timer's run counted (an outcome nobody asked for before it ended is not kept)
        end = time.monotonic() + 30
        while svc.stats()["completed"] < before + LANE_TIMERS:
            if time.monotonic() > end:
                raise RuntimeError(f"W13's {LANE_TIMERS} timers did not all run within 30 s")
            time.sleep(0.005)
        late = svc.stats()["lateness_ms"]
        for j in busy:
            j.stop()
        return float(late["p50"]), float(late["p99"])
