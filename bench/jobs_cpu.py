"""What a job costs in CPU, the caller's and its workers': an ``Executor(2, time_limit=10)``
warmed by 500 jobs, then N no-op jobs (``shmwheel.examples.jobs.noop``) all submitted and
every result taken. The caller's CPU from ``getrusage`` (both of its threads: the one that
submits and the pool's manager), the workers' from ``psutil``; microseconds a job, and the
wall rate. Prints one JSON line, with the shmwheel it imported (two builds can be
alternated: docs/performance.md, "The caller's cost of a job").

    python bench/jobs_cpu.py [N=50000]

The CPU a job moves far less with the machine's load than the rate does.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import psutil

import shmwheel
from shmwheel.examples import jobs


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def main(n: int) -> dict[str, object]:
    with shmwheel.Executor(2, time_limit=10) as ex:
        for job in [ex.submit(jobs.noop) for _ in range(500)]:
            job.result()
        workers = psutil.Process().children(recursive=True)
        workers_before = sum(sum(p.cpu_times()[:2]) for p in workers)
        before, start = _cpu(resource.getrusage(resource.RUSAGE_SELF)), time.perf_counter()
        submitted = [ex.submit(jobs.noop) for _ in range(n)]
        for job in submitted:
            job.result()
        wall = time.perf_counter() - start
        caller = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - before
        kids = sum(sum(p.cpu_times()[:2]) for p in workers) - workers_before
    return {
        "shmwheel": os.path.dirname(shmwheel.__file__),
        "jobs": n,
        "jobs_per_s": round(n / wall),
        "caller_us_per_job": round(caller / n * 1e6, 2),
        "workers_us_per_job": round(kids / n * 1e6, 2),
        "load": os.getloadavg()[0],
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)))
