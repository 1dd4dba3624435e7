"""``JobPool``: job workers and the thread that serves them, in the process that owns the
pool (the supervisor's, ``TimerService(job_workers=N)``, or an ``Executor``'s own).

Theory of operation. Callers put jobs on one queue (``submit``). One manager thread owns
everything else: it sends jobs to workers in batches, reads their outcome frames, keeps
the pool's timers in a ``WheelCore`` (the shmwheel wheel, tick 1 ms), and starts a new
worker for every one that dies. Workers are forked by a zygote (service/forkserver.py,
role ``job``): the service's, or an Executor's own that imports only worker.py; a
replacement costs a fork, not a Python start-up.

Time limits. A worker arms its own interval timer at an attempt's start (worker.py); at
the limit ``JobTimeout`` is raised inside the job (the soft stop). The same signal writes
a byte to the worker's wake-up pipe at once; the manager then arms the **hard stop**, a
wheel timer at now + ``grace``: if the worker still runs that attempt then, it is killed
(SIGKILL) and replaced, and the job fails with ``JobTimeout(killed=True)``. A safety net
re-reads every worker's slot each ``SWEEP_S`` in case a wake-up byte was lost.

Retries. A failed attempt whose error the job's ``Retry`` accepts goes to BACKOFF: a wheel
timer at ``ceil(now + pause)`` ms; when it fires the job is queued again. The pause counts
from when the manager learned of the failure, never before the attempt ended, so an
attempt never starts early.

Exactly once per attempt. Every job sent to a worker is in that worker's ``inflight``
queue, in order; frames come back in the same order, one per job. When a worker dies, the
manager first reads its result pipe to the end; the job at the head of ``inflight`` is
then the one it was running if the worker's RUNNING word names it (it gets the outcome
"worker died", or the timeout or stop that killed it), and every other job in
``inflight`` never started: they are queued again with their attempt not counted.

Where it lives. ``JobPool`` (here) is the callers' face: submit, cancel, shutdown,
stats. ``Manager`` (manager.py) is the thread that does all the I/O. ``PoolState``
(state.py) is what they share, under one lock, with ``decide`` (and ``succeeded``, its
common case), the one place an attempt's outcome changes its job.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any

from ...errors import ShmwheelError, TaskError
from . import ledger as LG
from . import worker as W
from .job import BACKOFF, DONE, QUEUED, RUNNING, Job
from .ledger.compact import compact
from .manager import Manager
from .remote import DEFAULT_TTL_S
from .retry import Retry, check_job, check_pool
from .state import PoolState
from .workers import Forks

if TYPE_CHECKING:  # pragma: no cover  (an Executor's pool never imports the journal: numpy)
    from ...journal.directory import JournalOptions

log = logging.getLogger("shmwheel.jobs")

DEFAULT_GRACE_S = 1.0
DEFAULT_MAX_BYTES = 64 << 20
SENDABLE_KEPT = 1024  # functions kept pickled (plain functions only: a partial is new each time)


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


class JobPool:
    """`workers` job worker processes and their manager thread (see the module header)."""

    def __init__(
        self,
        workers: int | None = None,
        *,
        grace: float = DEFAULT_GRACE_S,
        max_message_bytes: int = DEFAULT_MAX_BYTES,
        outcome_ttl: float = DEFAULT_TTL_S,
        name: str = "jobs",
        forks: Forks | None = None,
    ) -> None:
        n = default_workers() if workers is None else workers
        check_pool(n, grace)
        if not isinstance(max_message_bytes, int) or max_message_bytes < 1024:
            raise ValueError(
                f"max_message_bytes must be an integer >= 1024, got {max_message_bytes!r}"
            )
        if (
            isinstance(outcome_ttl, bool)
            or not isinstance(outcome_ttl, (int, float))
            or not (0 <= outcome_ttl < float("inf"))
        ):
            raise ValueError(f"outcome_ttl must be a number of seconds >= 0, got {outcome_ttl!r}")
        self.size = n
        self._outcome_ttl = float(outcome_ttl)
        self._state = PoolState(name, float(grace), max_message_bytes)
        self._ids = 0
        self._recovered: list[Job] = []  # jobs of an earlier run, re-armed (journal())
        self._sendable: dict[Any, tuple[bytes, str]] = {}  # each function: pickled, its name
        self._checked: tuple[Any, Any] = (None, None)  # the last (time_limit, retry) checked
        self._mgr = Manager(self._state, n, self.submit, forks)

    check_pool_options = staticmethod(check_pool)
    check_options = staticmethod(check_job)

    @property
    def grace(self) -> float:
        return self._state.grace

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> JobPool:
        """Start the workers and the manager thread; returns self."""
        self._mgr.start()
        return self

    def serve(
        self, service: str, tasks: dict[str, str], journal: JournalOptions | None
    ) -> dict[str, dict[str, int]]:
        """Start as `service`'s pool: its journal's ledger first (`journal`: the service's
        journal options, this run's epoch; what earlier runs left undone is re-armed),
        then the workers, then the job link; returns {"jobs": what was re-armed} with a
        journal, else {}."""
        j = journal
        recovered = {"jobs": self.journal(j.directory, j.epoch, j.jobs_bytes, service)} if j else {}
        self.start()
        self.listen(service, tasks)
        return recovered

    def journal(
        self, journal: str, epoch: int, max_bytes: int = LG.DEFAULT_MAX_BYTES, service: str = ""
    ) -> dict[str, int]:
        """Journal this pool's jobs in `journal`'s ledger (ledger/__init__.py), this run's files
        numbered `epoch`, rotated past `max_bytes` (0: never; ledger/compact.py), after re-arming
        the jobs earlier runs left undone; before ``start()``. Returns what it re-armed:
        {"jobs": n, "crashed": attempts}."""
        pending, top = LG.pending(journal)
        st = self._state
        st.ledger = LG.Ledger(journal, epoch, service, top, max_bytes, compactor=compact)
        self._ids = max(self._ids, top)
        crashed = 0
        with st.lock:
            for p in pending:
                crashed += p.crashed
                self._adopt(p)
            st.ledger.flush()
        return {"jobs": len(pending), "crashed": crashed}

    def _adopt(self, p: LG.Pending) -> None:
        """Under the lock: a job of an earlier run, queued or backing off again; an
        attempt it had running at the crash counts as crashed (retried if its policy
        allows, else the job fails)."""
        st = self._state
        lg = st.ledger
        assert lg is not None
        retry = None
        if p.retry is not None:
            try:
                retry = pickle.loads(p.retry)
            except Exception as e:  # its exception classes no longer import
                log.warning("job %d: its retry policy cannot be read (%r): no retry", p.id, e)
        job = Job(self, p.id, p.name, p.fn, p.args, p.limit, retry)
        job.attempts = p.attempts
        due = p.due_ms if p.due_ms > time.monotonic_ns() // 1_000_000 else 0
        if p.crashed:
            text = f"job {p.id} ({p.name}) attempt {p.attempts} was running at a crash"
            crash = TaskError(text, id=p.id, run=p.attempts, task=p.name)
            if retry is None or not retry.retries(crash, p.attempts):
                lg.record(LG.ENDED, p.id, p.attempts, "crashed", LG.now_us(), -1, -1)
                lg.record(LG.DONE, p.id, "error", LG.now_us())
                job.where = DONE
                st.counts["failed"] += 1
                return
            t = LG.now_us()  # before the back-off is drawn: it counts from here
            due = st.later(job, retry.backoff_s(p.attempts))
            lg.record(LG.ENDED, p.id, p.attempts, "crashed", t, due, -1)
            st.counts["retried"] += 1
        elif due:
            st.later(job, 0.0, due)
        if not due:
            st.queue.append(job)
        self._recovered.append(job)

    def listen(self, service: str, tasks: dict[str, str]) -> None:
        """Serve ``Client.submit`` of `service`'s processes and the copies of pickled jobs
        (remote.py): `tasks` maps the service's task names to their specs."""
        self._mgr.listen(service, tasks, self.stats, self._outcome_ttl)

    def reduce(self, job: Job) -> tuple[Any, ...]:
        """How a job of this pool pickles (``Job.__reduce__``): by the job link."""
        link = self._mgr.link
        if link is None:
            raise TypeError(
                f"job {job.id} cannot be pickled: its pool serves no job link (a pool of a "
                "TimerService or an Executor does)"
            )
        return link.reduce(job)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False, kill: bool = False) -> None:
        """Accept no new job; with `cancel_futures` cancel what has not started; with
        `wait` return once every job is done and the workers have exited. `kill` (the
        service's stop) also stops running attempts: they fail with ShmwheelError."""
        st = self._state
        with st.lock:
            st.closing = True
            # a service's stop keeps what waits in its ledger, for the next start
            cancelled = st.drop_waiting(kept=kill) if (cancel_futures or kill) else []
        for job in cancelled:
            job._cancel_future()
        if kill:
            for job in self._mgr.kill_all():
                try:
                    job.exception(timeout=5.0)
                except BaseException:
                    pass
        self._mgr.poke()
        if wait or kill:
            with st.lock:
                st.changed.wait_for(
                    lambda: not st.waiting() and self._mgr.idle(), None if not kill else 5.0
                )
            self._mgr.stop()

    # -- the callers' side ----------------------------------------------------------------
    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        time_limit: float | None,
        retry: Retry | None,
        delay_s: float = 0.0,
        name: str | None = None,
    ) -> Job:
        """A job running ``fn(*args, **kwargs)``, queued now or after `delay_s`."""
        if time_limit is not self._checked[0] or retry is not self._checked[1]:
            check_job(time_limit, retry)  # an Executor's defaults: checked once
            self._checked = (time_limit, retry)
        try:
            sendable = self._sendable.get(fn)
        except TypeError:  # unhashable: pickled each time (or refused there)
            sendable = None
        if sendable is None:  # a function pickles once: by its name
            sendable = self._pickled(fn)
            if len(self._sendable) < SENDABLE_KEPT and isinstance(fn, FunctionType):
                self._sendable[fn] = sendable
        fn_blob, fn_name = sendable
        if not (args or kwargs):
            blob = W.NO_ARGS
        else:
            try:
                blob = pickle.dumps((args, kwargs), 5)
            except Exception as e:
                raise TypeError(f"a job's arguments travel pickled: {e!r}") from None
        st = self._state
        if len(blob) > st.max_bytes:
            raise ValueError(
                f"the job's function and arguments pickle to {len(blob)} bytes, over the bound "
                f"of {st.max_bytes} (max_message_bytes)"
            )
        name = name or fn_name
        with st.lock:
            if st.closing:
                raise RuntimeError("cannot schedule new jobs after shutdown")
            if st.broken:
                raise ShmwheelError(st.broken)
            self._ids += 1
            job = Job(self, self._ids, name, fn_blob, blob, time_limit, retry)
            due = st.later(job, delay_s) if delay_s > 0 else 0
            if not due:
                st.queue.append(job)
            if st.ledger is not None:
                st.ledger.submitted(job, due, st.grace)
            st.counts["submitted"] += 1
            poke, st.poked = not st.poked, True
        if poke:
            self._mgr.poke()
        return job

    @staticmethod
    def _pickled(fn: Callable[..., Any]) -> tuple[bytes, str]:
        """`fn` pickled (by reference) and its name, for every job of it."""
        if not callable(fn):
            raise TypeError(f"fn must be a module-level function, got {fn!r}")
        try:
            blob = pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise TypeError(
                f"a job's function travels pickled by reference, so it must be a "
                f"module-level function: {e!r}"
            ) from None
        return blob, str(getattr(fn, "__qualname__", type(fn).__name__))

    def cancel(self, job: Job, stop: bool) -> bool:
        """``Job.cancel`` (stop False) and ``Job.stop`` (True): see job.py."""
        st, running_on = self._state, None
        with st.lock:
            if job.where == DONE:
                return job.cancelled()
            if job.where == RUNNING:
                if not stop:
                    return False
                running_on = self._mgr.workers[job.worker]
                running_on.ask_stop(job.id)
                st.counts["stopped"] += 1
            else:
                if job.where == BACKOFF:
                    st.timers.cancel(job.timer)
                    job.timer = -1
                st.counts["cancelled"] += 1
            job.where = DONE  # a queued job is skipped where it stands in the queue
            if st.ledger is not None:
                st.ledger.record(LG.DONE, job.id, "cancelled", LG.now_us())
            st.changed.notify_all()
        if running_on is not None:
            self._mgr.stop_attempt(running_on, job.id, "stop")
        job._cancel_future()
        return True

    def stats(self) -> dict[str, Any]:
        """The pool's counts, what waits and runs, and its workers."""
        st = self._state
        with st.lock:
            workers = self._mgr.workers
            out: dict[str, Any] = dict(st.counts)
            out.update(
                queued=sum(1 for j in st.queue if j.where == QUEUED),
                backing_off=st.timers.count("retry"),
                running=sum(1 for w in workers if w.inflight and w.running() >= 0),
                workers={f"job{w.index}": w.describe() for w in workers},
            )
        return out
