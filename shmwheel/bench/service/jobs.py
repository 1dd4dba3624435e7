"""W13, jobs bounded in time: shmwheel's ``Executor`` beside ``ProcessPoolExecutor`` and
pebble's ``ProcessPool`` (when installed), each with 2 workers in one run.

* Throughput: J no-op jobs (J = n // 10), each with a 10 s time limit where the pool has
  one (``ProcessPoolExecutor`` has none), all submitted, then every result taken; jobs/s.
* Stop latency: a job that sleeps 60 s with a 0.2 s time limit, submitted to an idle
  pool; how long past its limit the caller's wait ends (ms), the median of STOPS.
* Lanes: a service with 1 executor and 2 job workers. LANE_TIMERS no-op timers, due
  uniformly over LANE_SPAN_MS from LANE_MARGIN_MS after they are scheduled in one batch
  (W4's density: about 4 a ms), run twice: first with the job workers idle (the control),
  then with both busy on jobs that sleep; each round's lateness (p50, p99, ms) from the
  difference of the service's lateness histogram across it.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import statistics
import time

import numpy as np

from ...examples import jobs
from ...service.caller.client import Client
from ...service.jobs.executor import Executor
from ...service.stats import lateness_summary
from ...service.supervisor.supervisor import TimerService
from ..measure import Figures, ops_per_s
from .common import _service, _wait_completed

WORKERS = 2
LIMIT_S = 10.0
HANG_LIMIT_S = 0.2
STOPS = 3
LANE_TIMERS = 2000
LANE_SPAN_MS, LANE_MARGIN_MS = 500.0, 100.0
SW = "shmwheel Executor"
PPE = "ProcessPoolExecutor"
PEBBLE = "pebble ProcessPool"
SW_STOP = f"{SW}: hung job's wait ends past its limit (ms)"
PEBBLE_STOP = f"{PEBBLE}: hung job's wait ends past its limit (ms)"
LANE_P50, LANE_P99 = (
    "timers' lateness p50, job workers busy (ms)",
    ("timers' lateness p99, job workers busy (ms)"),
)
LANE_IDLE_P99 = "timers' lateness p99, job workers idle (ms)"
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
    fig.update(_lanes())
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


def _lanes() -> Figures:
    """Timers' lateness p50 / p99 (ms) while both job workers sleep, and p99 while they are
    idle, in one service (see the module docstring)."""
    offsets = np.random.default_rng(12).uniform(0.0, LANE_SPAN_MS, LANE_TIMERS)
    with _service(executors=1, job_workers=WORKERS) as svc, svc.client() as c:
        idle = _lane_round(svc, c, offsets)
        ex = svc.executor()
        busy = [ex.submit(jobs.hang, 60.0) for _ in range(WORKERS)]
        end = time.monotonic() + 10
        while not all(j.running() for j in busy) and time.monotonic() < end:
            time.sleep(0.001)
        late = _lane_round(svc, c, offsets)
        for j in busy:
            j.stop()
    return {LANE_P50: late["p50"], LANE_P99: late["p99"], LANE_IDLE_P99: idle["p99"]}


def _lane_round(svc: TimerService, c: Client, offsets: np.ndarray) -> dict[str, float]:
    """`offsets` (ms) as no-op timers, LANE_MARGIN_MS from now, scheduled in one batch; once
    every one has run, the lateness of this round alone (the histogram's difference)."""
    before = svc.stats()
    c.schedule_many("noop", offsets + LANE_MARGIN_MS)
    time.sleep((LANE_MARGIN_MS + LANE_SPAN_MS) / 1000)  # no polling while they run
    want = before["completed"] + len(offsets)
    st, _ = _wait_completed(svc, want, time.monotonic() + 30, 0.005)
    if st["completed"] < want:  # every timer's run counted: each one's outcome is unasked
        raise RuntimeError(f"W13's {len(offsets)} timers did not all run within 30 s")
    hist = np.subtract(st["lateness_histogram"], before["lateness_histogram"])
    return lateness_summary(hist)
