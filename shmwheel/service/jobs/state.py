"""What a job pool's callers and its manager thread share, and the one place that decides
what an attempt's outcome does to its job (the state machine of job.py's header, as code:
``decide``, and ``succeeded``, its common case made cheap). Everything here changes under
``lock``; waiters are woken and done-callbacks run only after it is released (``settle``),
since a done-callback may submit again.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import Any

from ...errors import JobTimeout
from . import ledger as L
from . import worker as W
from .failures import KILLED, attempt_error
from .job import BACKOFF, DONE, QUEUED, RUNNING, Job
from .timers import Timers

log = logging.getLogger("shmwheel.jobs")

COUNTS = ("submitted", "succeeded", "failed", "timed_out", "retried", "stopped",
          "cancelled", "worker_restarts")  # fmt: skip

# how an attempt ended, in the ledger
HOW = {W.OK: "ok", W.RAISED: "raised", W.TIMED_OUT: "timeout", KILLED: "timeout",
       W.STOPPED: "stopped", W.REFUSED: "failed"}  # fmt: skip

Settled = list[tuple[Job, str, Any]]  # (job, "ok" | "cancel" | "error", value or error)


class PoolState:
    """A pool's shared state.

    * ``queue``: jobs waiting for a worker, in order (a cancelled one is skipped where it
      stands: its ``where`` is DONE).
    * ``timers``: back-offs and delays ("retry", target a BACKOFF job), hard stops
      ("hard", target a worker) and restarts ("spawn", target a worker).
    * ``counts``: the figures ``stats()`` reports.
    * ``poked``: the manager was woken and has not dispatched since (a submit wakes it
      only when this is False: one wake-up for a burst of submits).
    * ``closing``: no new job is accepted; ``broken``: why not, when the workers cannot
      start.
    * ``changed``: notified whenever a job leaves a worker or the queue (``shutdown``
      waits on it).
    """

    def __init__(self, name: str, grace: float, max_bytes: int) -> None:
        self.name, self.grace, self.max_bytes = name, grace, max_bytes
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.queue: collections.deque[Job] = collections.deque()
        self.timers = Timers()
        self.counts = dict.fromkeys(COUNTS, 0)
        self.poked = False
        self.closing = False
        self.broken = ""
        self.ledger: L.Ledger | None = None  # with a journal (ledger/__init__.py)

    def waiting(self) -> bool:
        """Jobs queued or backing off remain."""
        return bool(self.queue) or self.timers.count("retry") > 0

    def decide(self, job: Job, kind: int, value: Any) -> Settled:
        """The outcome of `job`'s attempt (an outcome kind of worker.py, or KILLED): done,
        or backing off before its next attempt."""
        lg = self.ledger
        t, began = L.now_us(), job.began_us  # the outcome's time, before any back-off's
        how = HOW.get(kind, "failed")
        if job.where == DONE:  # stopped or cancelled meanwhile: its future is decided
            if lg is not None:
                lg.record(L.ENDED, job.id, job.attempts, how, t, -1, began)
            return []
        if kind == W.OK:
            job.where = DONE
            self.counts["succeeded"] += 1
            if lg is not None:
                lg.record(L.ENDED, job.id, job.attempts, "ok", t, -1, began)
                lg.record(L.DONE, job.id, "ok", L.now_us())
            return [(job, "ok", value)]
        if kind == W.STOPPED:
            job.where = DONE
            if lg is not None:
                lg.record(L.ENDED, job.id, job.attempts, "stopped", t, -1, began)
            return [(job, "cancel", None)]
        summary, error, match, text = attempt_error(job, kind, value, self.grace)
        if job.retry is not None and job.retry.retries(match, job.attempts):
            pause = job.retry.backoff_s(job.attempts)
            due = self.later(job, pause)
            if lg is not None:
                lg.record(L.ENDED, job.id, job.attempts, how, t, due, began)
            self.counts["retried"] += 1
            log.warning("%s failed: %s; retrying in %.3f s", job.label(), summary, pause)
            if text:
                log.debug("job %d attempt %d:\n%s", job.id, job.attempts, text)
            return []
        job.where = DONE
        self.counts["timed_out" if isinstance(error, JobTimeout) else "failed"] += 1
        if lg is not None:
            lg.record(L.ENDED, job.id, job.attempts, how, t, -1, began)
            lg.record(L.DONE, job.id, "error", L.now_us())
        log.error("%s failed: %s%s", job.label(), summary, f"\n{text}" if text else "")
        return [(job, "error", error)]

    def succeeded(self, job: Job, value: Any) -> bool:
        """``decide`` for its common case, without its lists: an attempt of a running job
        returned `value` in a pool that keeps no ledger. The outcome is written now (the
        caller wakes the job through ``settle``'s `woken` once the lock is released);
        False, with nothing changed, when ``decide`` must judge it."""
        if self.ledger is not None or job.where != RUNNING:
            return False
        job.where = DONE
        job._outcome(value, None)
        self.counts["succeeded"] += 1
        return True

    def later(self, job: Job, pause_s: float, due_ms: int = 0) -> int:
        """`job` waits `pause_s` (or until monotonic `due_ms`: a wheel timer at the next
        whole ms, never early), then is queued; returns the ms it is due."""
        job.where = BACKOFF
        due = due_ms or math.ceil((time.monotonic_ns() + pause_s * 1e9) / 1e6)
        job.timer = self.timers.add(due, "retry", job)
        return due

    def drop_waiting(self, kept: bool = False) -> list[Job]:
        """Every job queued or backing off is DONE (counted cancelled); returns them.
        `kept`: the service stops, and its ledger keeps them for the next start (no DONE
        record), else each is recorded cancelled."""
        out = [j for j in self.queue if j.where == QUEUED]
        self.queue.clear()
        out += self.timers.drop("retry")
        for j in out:
            j.where = DONE
            if self.ledger is not None and not kept:
                self.ledger.record(L.DONE, j.id, "cancelled", L.now_us())
        self.counts["cancelled"] += len(out)
        return out

    @staticmethod
    def settle(finished: Settled, woken: list[Job] | None = None) -> None:
        """Set the futures of what ``decide`` finished (the lock released): every outcome
        written first, then the waiters woken, so that a caller woken for one job finds
        the others of the batch done without waiting again. `woken`: jobs whose outcome
        is already written (manager.py's succeeded attempts), to wake with the rest."""
        woken = [] if woken is None else woken
        for job, how, value in finished:
            if job.done():  # decided once, under the lock; never set twice
                continue
            if how == "cancel":
                job._cancel_future()
                continue
            job._outcome(value, None) if how == "ok" else job._outcome(None, value)
            woken.append(job)
        for job in woken:
            job._wake()
