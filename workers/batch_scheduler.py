"""A multi-core batch scheduler built only on shmwheel's public API.

    python workers/batch_scheduler.py [--jobs 200] [--workers N] [--seed 1] [--kill-one]

A pool of worker processes runs jobs (fake work: sleeps, some fail at random). For each
attempt of a job the scheduler arms:

- a **run timeout**: a timer (``schedule``) cancelled when the attempt reports back;
- a **heartbeat deadline**: a lease (``Client.lease``) the worker takes as it starts the
  attempt, hands to the scheduler (pickled, with its "started" report) and beats every
  HEARTBEAT_MS from its own process; it expires when the worker goes silent, and a worker
  whose beat is refused knows it was declared dead and drops the attempt;
- on a timeout, a silent worker or a failure, a **retry with exponential back-off**: a timer
  of BACKOFF_MS * 2**attempt (capped), up to MAX_ATTEMPTS.

The scheduler learns every outcome through the handles' futures (``add_done_callback``):
no polling. A job finishes exactly once: reports of an abandoned attempt are ignored.
``--kill-one`` SIGKILLs a worker in the middle of a job; its heartbeat lease expires
and the job is retried elsewhere. A summary is printed at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import shmwheel

HEARTBEAT_MS = 50  # a worker signals this often
HEARTBEAT_DEADLINE_MS = 400  # silent this long: the attempt is abandoned
RUN_TIMEOUT_MS = 3000  # an attempt running longer is abandoned
BACKOFF_MS, BACKOFF_CAP_MS, MAX_ATTEMPTS = 20, 1000, 6
TASKS = {"noop": "shmwheel.examples.tasks:noop"}


def worker(service: str, jobs: Any, results: Any) -> None:
    """A worker process: take (job, attempt, work_ms, fails) items, run them with a
    heartbeat every HEARTBEAT_MS (the attempt's lease), report (job, attempt, ok, pid)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with shmwheel.connect(service) as client:
        while True:
            item = jobs.get()
            if item is None:
                return
            job, attempt, work_ms, fails = item
            lease = client.lease(HEARTBEAT_DEADLINE_MS, holder=str(os.getpid()))
            results.put(("started", job, attempt, os.getpid(), lease))
            end = time.monotonic() + work_ms / 1000
            alive = True
            while alive and time.monotonic() < end:
                time.sleep(min(HEARTBEAT_MS / 1000, max(0.0, end - time.monotonic())))
                alive = lease.beat()  # False: declared dead, the job is retried elsewhere
            if alive:
                results.put(("finished", job, attempt, not fails))


@dataclass
class Job:
    id: int
    work_ms: int
    fail_first: bool  # its first attempt raises (a flaky job)
    attempt: int = 0
    running: bool = False
    done: bool = False
    finished: int = 0  # times it finished (must end at 1)
    pid: int = 0  # the worker running the current attempt
    timeout: Any = None  # the run timeout's TimerHandle
    heartbeat: Any = None  # the current attempt's heartbeat Lease
    history: list[str] = field(default_factory=list)


class Scheduler:
    def __init__(self, client: shmwheel.Client, jobs: Any) -> None:
        self.client = client
        self.jobq = jobs
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()  # from outcome callbacks
        self.jobs: dict[int, Job] = {}
        self.stats = {"retries": 0, "heartbeat_expiries": 0, "run_timeouts": 0, "failures": 0}
        self.leases = 0  # heartbeat leases taken (one per attempt, however many beats)

    # -- arming --------------------------------------------------------------------------
    def start(self, job: Job) -> None:
        job.attempt += 1
        job.running = True
        job.history.append(f"attempt {job.attempt}")
        job.pid, job.timeout, job.heartbeat = 0, None, None
        fails = job.fail_first and job.attempt == 1
        self.jobq.put((job.id, job.attempt, job.work_ms, fails))

    def arm(self, job: Job, lease: shmwheel.Lease) -> None:
        """A worker took the attempt: its run timeout, and the worker's heartbeat lease."""
        a = job.attempt
        job.timeout = self.client.schedule("noop", delay_ms=RUN_TIMEOUT_MS)
        job.timeout.add_done_callback(lambda h: self.events.put(("timeout", job.id, a, h)))
        job.heartbeat = lease
        self.leases += 1
        lease.add_done_callback(lambda le: self.events.put(("heartbeat", job.id, a, le)))

    def retry(self, job: Job, why: str) -> None:
        job.running = False
        job.history.append(why)
        if job.heartbeat is not None:
            job.heartbeat.release()
        if job.timeout is not None:
            job.timeout.cancel()
        if job.attempt >= MAX_ATTEMPTS:
            job.history.append("gave up")
            job.done = True
            return
        self.stats["retries"] += 1
        delay = min(BACKOFF_MS * 2**job.attempt, BACKOFF_CAP_MS)
        backoff = self.client.schedule("noop", delay_ms=delay)
        a = job.attempt
        backoff.add_done_callback(lambda h: self.events.put(("backoff", job.id, a, h)))

    # -- events --------------------------------------------------------------------------
    def on_event(self, kind: str, jid: int, attempt: int, handle: Any) -> None:
        job = self.jobs[jid]
        current = job.running and attempt == job.attempt
        if kind == "heartbeat" and current:
            if handle.result() == "expired":  # (not "released": the attempt ended)
                self.stats["heartbeat_expiries"] += 1
                self.retry(job, f"attempt {attempt}: worker {job.pid} went silent")
        elif kind == "timeout" and current and handle.result() == "ok":
            self.stats["run_timeouts"] += 1
            self.retry(job, f"attempt {attempt}: ran past {RUN_TIMEOUT_MS} ms")
        elif kind == "backoff" and not job.done and not job.running and attempt == job.attempt:
            self.start(job)

    def on_result(self, msg: tuple[Any, ...]) -> None:
        kind, jid, attempt = msg[:3]
        job = self.jobs[jid]
        if not (job.running and attempt == job.attempt):
            if kind == "started":
                msg[4].release()  # nobody watches it
            return  # a report of an abandoned attempt
        if kind == "started":
            job.pid = msg[3]
            self.arm(job, msg[4])
            return
        if msg[3]:
            job.running, job.done = False, True
            job.finished += 1
            job.history.append(f"attempt {attempt}: finished")
            if job.timeout is not None:
                job.timeout.cancel()
            if job.heartbeat is not None:
                job.heartbeat.release()
        else:
            self.stats["failures"] += 1
            self.retry(job, f"attempt {attempt}: failed")


def run(
    jobs: int = 200,
    workers: int | None = None,
    seed: int = 1,
    kill_one: bool = False,
    work_ms: tuple[int, int] = (20, 200),
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Run the scheduler to the end; returns the summary (also what the script prints)."""
    workers = workers or max(1, os.cpu_count() or 1)
    rng = random.Random(seed)
    ctx = mp.get_context("spawn")
    t0 = time.monotonic()
    with shmwheel.TimerService(tasks=TASKS, capacity=10_000) as svc, svc.client() as client:
        jobq, results = ctx.Queue(), ctx.Queue()
        procs = [ctx.Process(target=worker, args=(svc.name, jobq, results)) for _ in range(workers)]
        for p in procs:
            p.start()
        s = Scheduler(client, jobq)
        killed: dict[str, Any] = {}
        try:
            for j in range(jobs):
                s.jobs[j] = Job(j, rng.randint(*work_ms), rng.random() < 0.1)
            victim = jobs // 2
            if kill_one:
                s.jobs[victim].work_ms = max(s.jobs[victim].work_ms, 600)  # time to kill it
                s.jobs[victim].fail_first = False
            for job in s.jobs.values():
                s.start(job)
            end = time.monotonic() + timeout_s
            while not all(j.done for j in s.jobs.values()):
                if time.monotonic() > end:
                    raise RuntimeError("the batch did not finish in time")
                try:
                    s.on_result(results.get(timeout=0.005))
                except queue.Empty:
                    pass
                while not s.events.empty():
                    s.on_event(*s.events.get())
                v = s.jobs[victim]
                if kill_one and not killed and v.running and v.pid and v.attempt == 1:
                    time.sleep(0.1)  # mid-job
                    os.kill(v.pid, signal.SIGKILL)
                    killed.update(job=victim, pid=v.pid)
                    procs.append(ctx.Process(target=worker, args=(svc.name, jobq, results)))
                    procs[-1].start()  # the pool keeps its size
        finally:
            for _ in procs:
                jobq.put(None)
            for p in procs:
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join()
    return {
        "jobs": jobs,
        "workers": workers,
        "finished once": sum(j.finished == 1 for j in s.jobs.values()),
        "finished twice or more": sum(j.finished > 1 for j in s.jobs.values()),
        "gave up": sum(j.finished == 0 for j in s.jobs.values()),
        **s.stats,
        "heartbeat leases": s.leases,
        "killed": killed,
        "killed job history": s.jobs[killed["job"]].history if killed else [],
        "wall s": round(time.monotonic() - t0, 2),
    }


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
