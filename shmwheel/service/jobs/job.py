"""``Job``: the future of one job, across all its attempts. Lives in the caller's process;
the pool (pool.py) decides its outcome and is the only one that sets it.

States (``where``, changed only under the pool's lock): QUEUED (waiting for a worker) ->
RUNNING (sent to a worker) -> DONE; a failed attempt with retries left goes RUNNING ->
BACKOFF (a timer in the pool's wheel) -> QUEUED. ``cancel()`` wins in QUEUED and BACKOFF;
``stop()`` also in RUNNING (the attempt is stopped). The ``concurrent.futures`` state
stays PENDING until the outcome is set, so the stdlib's waiters (``wait``,
``as_completed``) see a job finish exactly once.

The ``concurrent.futures`` fields are the stdlib's, with one difference: the condition
that guards them (and its lists of waiters and done-callbacks) is made on first use
(``_condition``), by the first waiter, done-callback or cancel, and never for a job whose
outcome is set before anyone waits (most of a busy pool's); every stdlib path takes the
condition before it touches either list. The rule that keeps this safe: the outcome is
written (``_result`` or ``_exception``, then ``_state``) before ``_wake`` looks for the
condition, and every waiter makes the condition before it reads ``_state``; so a waiter
either sees the outcome or is woken under the condition. ``_state`` FINISHED is final, so
``done()`` and ``result()`` of a finished job read it without the condition.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Generator
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from .retry import Retry


class JobOwner(Protocol):
    """What decides a job's cancel and how it pickles: its pool (pool.py), or the job
    link to one (link.py: a ``Client.submit`` job, or a job unpickled in this process)."""

    def cancel(self, job: Job, stop: bool) -> bool: ...
    def reduce(self, job: Job) -> tuple[Any, ...]: ...


QUEUED, RUNNING, BACKOFF, DONE = "queued", "running", "backoff", "done"
_MAKING = threading.Lock()  # held while a job's condition is made (once a job, if at all)


class Job(concurrent.futures.Future[Any]):
    """One job: ``result()`` is its function's value, or raises ``TaskError`` (the last
    attempt raised, or its worker died), ``JobTimeout`` (the last attempt passed its time
    limit) or ``CancelledError`` (cancelled or stopped). ``attempts`` counts the
    attempts started so far. Awaitable in an event loop. Picklable: another process of
    the same user that unpickles it follows the same job (docs/api.md, "Jobs")."""

    # A busy pool makes and drops tens of thousands of jobs a second: their fields are
    # slots (set once in __init__, no dict to grow as an attempt is dispatched); the
    # stdlib's condition is None until first use, its two lists unset until then.
    __slots__ = (
        "_state", "_result", "_exception", "id", "name", "attempts", "time_limit", "retry",
        "_pool", "_fn", "_blob", "where", "worker", "began_us", "timer", "on_start", "_token",
        "_cond", "_waiters", "_done_callbacks",
    )  # fmt: skip

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
        # concurrent.futures.Future.__init__'s fields, but no condition yet (module header)
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self.id = id
        self.name = name  # the function's qualified name, for messages and logs
        self.attempts = 0  # the attempts started so far
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
        self._token = 0  # its pool's instance token, in a process the link told it (link.py)
        self._cond: threading.Condition | None = None

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        """The stdlib's condition, made by whoever needs it first (the module header),
        with the waiters' and callbacks' lists before it: whoever finds it finds them."""
        cond = self._cond
        if cond is None:
            with _MAKING:
                cond = self._cond
                if cond is None:
                    self._waiters: list[Any] = []
                    self._done_callbacks: list[Any] = []
                    cond = self._cond = threading.Condition()
        return cond

    def done(self) -> bool:
        return self._state in (FINISHED, CANCELLED, CANCELLED_AND_NOTIFIED)

    def result(self, timeout: float | None = None) -> Any:
        """The function's value (the stdlib's ``result``: see the class docstring)."""
        if self._state == FINISHED and self._exception is None:  # final: no lock needed
            return self._result
        return super().result(timeout)

    def _outcome(self, value: Any, error: BaseException | None) -> None:
        """Write the outcome the pool decided (once); ``_wake()`` then tells the waiters.
        The stdlib's ``set_result`` / ``set_exception`` in two steps, so that a batch of
        outcomes is written before anyone is woken (state.py, ``settle``)."""
        self._result, self._exception = value, error
        self._state = FINISHED

    def _end(self, kind: str, value: Any) -> None:
        """Set an outcome as the pool reports it: "ok" (`value` is the result), "cancel",
        or anything else (`value` is the exception); the link's jobs end this way."""
        if kind == "ok":
            self.set_result(value)
        elif kind == "cancel":
            self._cancel_future()
        else:
            self.set_exception(value)

    def _wake(self) -> None:
        """After the outcome is written: tell the waiters and run the done-callbacks, if
        any made the condition (the module header)."""
        cond = self._cond
        if cond is None:
            return  # nobody has waited or added a callback: none will miss the outcome
        error = self._exception
        with cond:
            for waiter in self._waiters:
                if error is None:
                    waiter.add_result(self)
                else:
                    waiter.add_exception(self)
            cond.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]

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
        import asyncio  # here: a pool whose jobs are never awaited need not import it

        return asyncio.wrap_future(self).__await__()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as (service, id): unpickled in another process of the same user it is a
        Job bound to its pool over the job link (link.py, ``restore``); in this process it
        is this very Job. A job that has ended pickles its outcome with it."""
        return self._pool.reduce(self)

    def label(self) -> str:
        """ "job 7 (fn) attempt 2", for log lines."""
        return f"job {self.id} ({self.name}) attempt {self.attempts}"

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.name} {self.where} attempts={self.attempts}>"
