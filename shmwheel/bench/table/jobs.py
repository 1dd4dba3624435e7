"""W13 of the bench table: jobs bounded in time (``service.jobs``), with its notes and
goals; ``ROWS``, at the end, is the table.
"""

from __future__ import annotations

from ..service import jobs
from ..workload import Goal, Workload
from .row import Row, Terms


def jobs_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "jobs with a time limit",
        row.run,
        "service",
        [(jobs.SW, jobs.PPE), (jobs.SW, jobs.PEBBLE)],
        notes=[jobs.SW_STOP, jobs.PEBBLE_STOP, jobs.LANE_P50, jobs.LANE_P99],
        goals=[
            Goal(
                "jobs/s / ProcessPoolExecutor",
                jobs.R_PPE,
                ">=",
                10.0,
                "issue 34: a batch scheduler's pool runs many short jobs; shmwheel "
                "sends them in batches and times them in the worker",
                "each job is still a concurrent.futures.Future made, pickled, sent and "
                "set in Python in the caller's process (about 6-9 us of its CPU a job "
                "on this VM): that process, not the workers, caps the rate",
            ),
            Goal(
                "jobs/s / pebble ProcessPool",
                jobs.R_PEBBLE,
                ">=",
                10.0,
                "issue 34: pebble is the time-limited pool a Python user reaches for",
                "as for ProcessPoolExecutor: the caller's process caps the rate",
            ),
            Goal(
                "hung job stopped past its limit (ms)",
                jobs.SW_STOP,
                "<=",
                20.0,
                "issue 34: a time limit stops the job at the limit (pebble checks its "
                "timeouts every 0.1 s)",
                "the soft stop is the worker's own interval timer: a miss is the "
                "machine's scheduling delay",
            ),
            Goal(
                "timers' lateness p99 with job workers busy (ms)",
                jobs.LANE_P99,
                "<=",
                1.0,
                "issue 34: lanes: timers keep their goals while every job worker is busy",
                "timers were late although jobs run in processes of their own: compare "
                "W4's lateness in this run (the VM's own jitter)",
            ),
        ],
        wid=row.id,
        about=f"J = n/10 no-op jobs with a {jobs.LIMIT_S:g} s time limit (none for "
        f"ProcessPoolExecutor, which has no such option), all submitted then every result "
        f"taken, {jobs.WORKERS} workers each; a job sleeping 60 s with a "
        f"{jobs.HANG_LIMIT_S:g} s limit, how long past the limit its wait ends; timers' "
        f"lateness while both job workers sleep",
        explain={
            jobs.PEBBLE: "pebble is an optional peer (pip install pebble, or the bench "
            "extra): without it its rows are left out.",
        },
    )


ROWS = [
    # id,   name,       measured by,   spec: peers, notes, goals
    Row("W13", "svc_jobs", jobs.svc_jobs, jobs_spec),
]  # fmt: skip
