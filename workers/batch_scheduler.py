"""A multi-core batch scheduler built only on shmwheel's public API.

    python workers/batch_scheduler.py [--jobs 200] [--workers N] [--seed 1] [--kill-one]

Jobs (fake work: sleeps, some fail at random) run on a service's job workers through a
``shmwheel.Executor``:

- a **time limit** (``time_limit=``) that stops an attempt running past RUN_TIMEOUT_S: the
  pool raises ``JobTimeout`` inside it and kills its worker after the grace, so an
  abandoned attempt never runs on beside its retry;
- a **retry with exponential back-off** (``shmwheel.Retry``) for a flaky failure, a time
  limit or a worker that died, up to MAX_ATTEMPTS, one ``Job`` future across them all;
- a **heartbeat**: one lease per job (``Client.lease``), made by the scheduler and handed
  to the job (a lease pickles), beaten every HEARTBEAT_MS from the worker's own process.
  It expires only when the worker goes silent for HEARTBEAT_DEADLINE_MS (its ``silent``
  task runs once, ``context().holder`` naming the job); one timer slot per job, O(1) a
  beat; the scheduler releases it when the job ends.

The scheduler learns every outcome through the jobs' futures. ``--kill-one`` SIGKILLs the
worker in the middle of a job: the pool fails that attempt alone ("its worker died"), its
heartbeat goes silent, the job is retried on the successor worker and finishes once. A
summary is printed at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import shmwheel

HEARTBEAT_MS = 50  # a worker beats this often
HEARTBEAT_DEADLINE_MS = 400  # silent this long: its lease expires
QUEUED_TTL_MS = 60_000  # a lease's first ttl: a job waiting for a worker is not silent
RUN_TIMEOUT_S = 3.0  # an attempt running longer is stopped
MAX_ATTEMPTS = 6
POLICY = shmwheel.Retry(MAX_ATTEMPTS, backoff=0.02, factor=2.0, max_backoff=1.0, jitter=0.1)
TASKS = {"silent": "shmwheel.examples.tasks:noop"}


class Flaky(Exception):
    """A job's planned failure (retried)."""


def work(job: int, work_ms: int, fail_first: bool, beat: Any, marks: str) -> int:
    """One attempt of a job, in a job worker: beats `beat` while it works, appends
    "job attempt pid start" and, if it returns, "... end" to `marks` (what the summary
    counts), fails its first attempt when `fail_first`. Returns the worker's pid."""
    path = Path(marks)
    attempt = 1 + sum(line.split()[::3] == [str(job), "start"] for line in _lines(path))
    _mark(path, f"{job} {attempt} {os.getpid()} start")
    end = time.monotonic() + work_ms / 1000
    while time.monotonic() < end:
        beat.beat(HEARTBEAT_DEADLINE_MS)
        time.sleep(min(HEARTBEAT_MS / 1000, max(0.0, end - time.monotonic())))
    if fail_first and attempt == 1:
        raise Flaky(f"job {job}: planned failure")
    _mark(path, f"{job} {attempt} {os.getpid()} end")
    return os.getpid()


def _mark(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # one write a line
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def run(
    jobs: int = 200,
    workers: int | None = None,
    seed: int = 1,
    kill_one: bool = False,
    work_ms: tuple[int, int] = (20, 200),
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Run the batch to the end; returns the summary (also what the script prints)."""
    workers = workers or max(1, os.cpu_count() or 1)
    rng = random.Random(seed)
    home = tempfile.mkdtemp(prefix="shmwheel-batch-")  # this user's own (mode 0700)
    marks = os.path.join(home, "marks")
    t0 = time.monotonic()
    specs = [(j, rng.randint(*work_ms), rng.random() < 0.1) for j in range(jobs)]
    victim = jobs // 2
    if kill_one:
        specs[victim] = (victim, max(specs[victim][1], 800), False)  # time to kill it
    killed: dict[str, Any] = {}
    try:
        with (
            shmwheel.TimerService(
                tasks=TASKS, capacity=10_000, executors=1, job_workers=workers
            ) as svc,
            svc.client() as client,
        ):
            pool = svc.executor(time_limit=RUN_TIMEOUT_S, retry=POLICY)
            beats = [
                client.lease(QUEUED_TTL_MS, on_expire="silent", holder=f"job {j}")
                for j in range(jobs)
            ]
            futures = {pool.submit(work, j, ms, fail, beats[j], marks): j for j, ms, fail in specs}
            if kill_one:
                killed = _kill_mid_job(victim, marks, timeout_s)
            done, late = cf.wait(futures, timeout=timeout_s)
            if late:
                raise RuntimeError(f"{len(late)} jobs did not finish in {timeout_s} s")
            silent = [b.release() for b in beats].count(False)  # expired: a silent worker
            stats = pool.stats()
            failed = [futures[f] for f in done if f.exception() is not None]
    finally:
        rows = [line.split() for line in _lines(Path(marks))]
        shutil.rmtree(home, ignore_errors=True)
    history: dict[int, list[str]] = {}
    ends: dict[int, int] = {}
    for job, attempt, pid, what in rows:
        history.setdefault(int(job), []).append(f"attempt {attempt} on worker {pid}: {what}")
        ends[int(job)] = ends.get(int(job), 0) + (what == "end")
    return {
        "jobs": jobs,
        "workers": workers,
        "finished once": sum(n == 1 for n in ends.values()) if not failed else jobs - len(failed),
        "finished twice or more": sum(n > 1 for n in ends.values()),
        "gave up": len(failed),
        "attempts": sum(r[3] == "start" for r in rows),
        "retries": stats["retried"],
        "heartbeats silent": silent,
        "killed": killed,
        "killed job history": history.get(victim, []) if killed else [],
        "wall s": round(time.monotonic() - t0, 2),
    }


def _kill_mid_job(job: int, marks: str, timeout_s: float) -> dict[str, Any]:
    """SIGKILL the worker running `job`'s first attempt, once it is under way."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for line in _lines(Path(marks)):
            j, attempt, pid, what = line.split()
            if int(j) == job and attempt == "1" and what == "start":
                pid = int(pid)
                time.sleep(0.1)  # mid-job
                os.kill(pid, signal.SIGKILL)
                return {"job": job, "pid": pid}
        time.sleep(0.005)
    raise RuntimeError(f"job {job} never started")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=None, help="default: os.cpu_count()")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kill-one", action="store_true", help="SIGKILL a worker mid-job")
    a = ap.parse_args(argv)
    if a.jobs < 1 or (a.workers is not None and a.workers < 1):
        ap.error("--jobs and --workers must be >= 1")
    summary = run(a.jobs, a.workers, a.seed, a.kill_one)
    width = max(len(k) for k in summary)
    for k, v in summary.items():
        print(f"{k:<{width}}  {v}")
    return 0 if summary["finished once"] == a.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
