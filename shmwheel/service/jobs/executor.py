"""``Executor``: a ``concurrent.futures.Executor`` whose jobs run in job worker processes,
each with an optional time limit that stops it and a ``Retry`` policy. Runs in the
caller's process; the work is the pool's (pool.py).

``Executor(service=svc)`` submits to the job workers of a running ``TimerService`` (made
with ``job_workers=N``; ``svc.executor()`` is the same); ``Executor()`` starts a job
service of its own, a ``JobPool`` of ``max_workers`` workers that ``shutdown`` stops.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from .job import Job
from .pool import JobPool
from .retry import Retry

__all__ = ["Executor"]

_names = itertools.count(1)  # an own pool's job link name: executor-<pid>-<n>


class HasJobPool(Protocol):
    """A service whose job workers an Executor can use (``TimerService`` is one)."""

    def job_pool(self) -> JobPool: ...


def _run_chunk(fn: Callable[..., Any], chunk: list[tuple[Any, ...]]) -> list[Any]:
    """One job of ``map(chunksize=n)``: `fn` over up to n argument tuples."""
    return [fn(*args) for args in chunk]


class Executor(concurrent.futures.Executor):
    """Run module-level functions as jobs in worker processes.

    ``time_limit`` (seconds) and ``retry`` are the defaults of every ``submit`` and
    ``map``; ``service_options`` (``grace``, ``max_message_bytes``, ``outcome_ttl``)
    configure the pool this Executor starts when ``service`` is None. See docs/api.md,
    "Jobs".
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        service: HasJobPool | None = None,
        time_limit: float | None = None,
        retry: Retry | None = None,
        **service_options: Any,
    ) -> None:
        self._defaults = (time_limit, retry)
        if time_limit is not None or retry is not None:  # checked now, not at the first submit
            JobPool.check_options(time_limit, retry)
        self._lock = threading.Lock()
        self._jobs: set[Job] = set()
        self._shutdown = False
        if service is None:
            self._pool = JobPool(max_workers, **service_options).start()
            self._own = True
            try:  # its jobs pickle: their copies reach the pool by this name's job link
                self._pool.listen(f"executor-{os.getpid()}-{next(_names)}", {})
            except BaseException:
                self._pool.shutdown(wait=True, kill=True)
                raise
        else:
            if service_options:
                raise TypeError(
                    f"service options {sorted(service_options)} apply only to the pool an "
                    "Executor starts itself (service=None)"
                )
            self._pool = service.job_pool()
            self._own = False
            if max_workers is not None and max_workers != self._pool.size:
                raise ValueError(
                    f"max_workers={max_workers}, but the service has {self._pool.size} job "
                    "workers (TimerService(job_workers=N) sets them)"
                )

    @property
    def max_workers(self) -> int:
        return self._pool.size

    def submit(  # type: ignore[override]
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        time_limit: float | None = None,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Job:
        """Run ``fn(*args, **kwargs)`` as a job; its ``Job`` future. ``time_limit`` and
        ``retry`` default to the Executor's."""
        if not self._own:  # an own pool refuses after its shutdown itself, under its lock
            with self._lock:
                if self._shutdown:
                    raise RuntimeError("cannot schedule new jobs after shutdown")
        job = self._pool.submit(
            fn,
            args,
            kwargs,
            self._defaults[0] if time_limit is None else time_limit,
            self._defaults[1] if retry is None else retry,
        )
        if not self._own:  # jobs of a shared pool are tracked per Executor for shutdown
            with self._lock:
                self._jobs.add(job)
            job.add_done_callback(self._forget)
        return job

    def _forget(self, job: Any) -> None:
        with self._lock:
            self._jobs.discard(job)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        time_limit: float | None = None,
        retry: Retry | None = None,
    ) -> Iterator[Any]:
        """Like ``concurrent.futures.Executor.map``: every call submitted now, the results
        yielded in order; ``timeout`` bounds the whole wait from this call (TimeoutError).
        With ``chunksize`` > 1 each job runs that many calls (its time limit and retries
        apply to the chunk)."""
        if not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        end = None if timeout is None else time.monotonic() + timeout
        calls = zip(*iterables, strict=False)
        if chunksize == 1:
            jobs = [self.submit(fn, *a, time_limit=time_limit, retry=retry) for a in calls]
        else:
            jobs = []
            while chunk := list(itertools.islice(calls, chunksize)):
                jobs.append(self.submit(_run_chunk, fn, chunk, time_limit=time_limit, retry=retry))

        def results() -> Iterator[Any]:
            try:
                jobs.reverse()
                while jobs:
                    job = jobs.pop()
                    left = None if end is None else end - time.monotonic()
                    value = job.result(left)
                    if chunksize == 1:
                        yield value
                    else:
                        yield from value
            finally:
                for job in jobs:
                    job.cancel()

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new job after this (RuntimeError). `cancel_futures`: cancel the jobs not yet
        started (queued or backing off). `wait`: return once the jobs are done (the
        Executor's own pool also ends its workers)."""
        with self._lock:
            self._shutdown = True
            mine = list(self._jobs)
        if self._own:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
            return
        if cancel_futures:
            for job in mine:
                job.cancel()
        if wait:
            concurrent.futures.wait(mine)

    def stats(self) -> dict[str, Any]:
        """The pool's counts (submitted, succeeded, failed, timed_out, retried, stopped,
        cancelled, queued, backing_off, running) and its workers."""
        return self._pool.stats()

    def __repr__(self) -> str:
        state = "shut down" if self._shutdown else "running"
        return f"<shmwheel.Executor {state}, {self._pool.size} workers>"
