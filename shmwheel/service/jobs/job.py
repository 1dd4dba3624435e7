"""``Job``: the future of one job, across all its attempts. Lives in the caller's process;
the pool (pool.py) decides its outcome and is the only one that sets it.

States (``where``, changed only under the pool's lock): QUEUED (waiting for a worker) ->
RUNNING (sent to a worker) -> DONE; a failed attempt with retries left goes RUNNING ->
BACKOFF (a timer in the pool's wheel) -> QUEUED. ``cancel()`` wins in QUEUED and BACKOFF;
``stop()`` also in RUNNING (the attempt is stopped). The ``concurrent.futures`` state
stays PENDING until the outcome is set, so the stdlib's waiters (``wait``,
``as_completed``) see a job finish exactly once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from .retry import Retry


class JobOwner(Protocol):
    """What decides a job's cancel: its pool (pool.py), or the job link to one (link.py)."""

    def cancel(self, job: Job, stop: bool) -> bool: ...


QUEUED, RUNNING, BACKOFF, DONE = "queued", "running", "backoff", "done"


class Job(concurrent.futures.Future[Any]):
    """One job: ``result()`` is its function's value, or raises ``TaskError`` (the last
    attempt raised, or its worker died), ``JobTimeout`` (the last attempt passed its time
    limit) or ``CancelledError`` (cancelled or stopped). ``attempts`` counts the
    attempts started so far. Awaitable in an event loop."""

    def __init__(
        self,
        pool: JobOwner,
        id: int,
        name: str,
        fn: bytes,
        blob: bytes,
        time_limit: float | None,
        retry: Retry | None,
    ) -> None:
        super().__init__()
        self.id = id
        self.name = name  # the function's qualified name, for messages and logs
        self.attempts = 0
        self.time_limit = time_limit
        self.retry = retry
        self._pool = pool
        self._fn = fn  # the function pickled (by reference), the same bytes for each job of it
        self._blob = blob  # its arguments pickled (worker.NO_ARGS: none)
        self.where = QUEUED
        self.worker = -1  # the worker running the current attempt (RUNNING)
        self.began_us = -1  # when its worker began the current attempt, as the pool saw it
        self.timer = -1  # the back-off timer's wheel handle (BACKOFF)
        self.on_start: Any = None  # called with the job as each attempt is sent (remote.py)

    def running(self) -> bool:
        """True while an attempt runs in a worker."""
        return self.where == RUNNING and not self.done()

    def cancel(self) -> bool:
        """True iff the job will never run again: it was queued or backing off (or was
        already cancelled). A running attempt is not stopped: see ``stop()``."""
        return self._pool.cancel(self, stop=False)

    def stop(self) -> bool:
        """Like ``cancel()``, and a running attempt is stopped too: ``StopRequested`` is
        raised inside it, and its worker is killed and replaced if it has not ended
        after the pool's grace. No further attempt starts; ``cancelled()`` is True from
        now on. False only when the job had already finished."""
        return self._pool.cancel(self, stop=True)

    def _cancel_future(self) -> None:
        """The pool decided the cancel: the stdlib's cancel, and its waiters told."""
        concurrent.futures.Future.cancel(self)
        self.set_running_or_notify_cancel()

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self).__await__()

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(
            "a Job cannot be pickled: it is bound to the pool of the process that "
            "submitted it (docs/api.md, Jobs)"
        )

    def label(self) -> str:
        """ "job 7 (fn) attempt 2", for log lines."""
        return f"job {self.id} ({self.name}) attempt {self.attempts}"

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.name} {self.where} attempts={self.attempts}>"
