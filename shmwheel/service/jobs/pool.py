"""``JobPool``: job workers and the thread that serves them, in the process that owns the
pool (the supervisor's, ``TimerService(job_workers=N)``, or an ``Executor``'s own).

Theory of operation. Callers put jobs on one queue (``submit``). One manager thread owns
everything else: it sends jobs to workers in batches, reads their outcome frames, keeps
the pool's timers in a ``WheelCore`` (the shmwheel wheel, tick 1 ms), and starts a new
worker for every one that dies. Workers are forked from multiprocessing's fork server
(started once, with this package imported), so a replacement costs a fork, not a Python
start-up.

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

Locking. ``_lock`` guards the queue, every job's ``where`` and the wheel; outcomes are
decided under it and the futures are set after it is released (a done-callback may
submit again).
"""

from __future__ import annotations

import collections
import logging
import math
import os
import pickle
import selectors
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ...errors import JobTimeout, ShmwheelError
from . import worker as W
from .failures import KILLED, attempt_error
from .job import BACKOFF, DONE, QUEUED, RUNNING, Job
from .remote import Listener
from .retry import Retry, check_job, check_pool
from .timers import Timers, now_ms
from .workers import WorkerProc, fork_server

log = logging.getLogger("shmwheel.jobs")

DEFAULT_GRACE_S = 1.0
DEFAULT_MAX_BYTES = 64 << 20
SWEEP_S = 0.1  # the safety net's period (a lost wake-up byte costs at most this)
RESTART_BACKOFF_MAX_S = 5.0
COUNTS = (
    "submitted",
    "succeeded",
    "failed",
    "timed_out",
    "retried",
    "stopped",
    "cancelled",
    "worker_restarts",
)


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
        name: str = "jobs",
    ) -> None:
        n = default_workers() if workers is None else workers
        self.check_pool_options(n, grace)
        if not isinstance(max_message_bytes, int) or max_message_bytes < 1024:
            raise ValueError(
                f"max_message_bytes must be an integer >= 1024, got {max_message_bytes!r}"
            )
        self.size = n
        self.grace = float(grace)
        self.max_bytes = max_message_bytes
        self.name = name
        self._lock = threading.Lock()
        self._queue: collections.deque[Job] = collections.deque()
        self._workers = [WorkerProc(i) for i in range(n)]
        self._timers = Timers()
        self._link: Listener | None = None  # Client.submit's server, when listen() was called
        self._ids = 0
        self._closing = False  # no new job is accepted
        self._thread: threading.Thread | None = None
        self._sel = selectors.DefaultSelector()
        self._ctl_r, self._ctl_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poked = False
        self._idle = threading.Condition(self._lock)
        self._restart_pause = [0.0] * n
        self.counts = dict.fromkeys(COUNTS, 0)
        self._ctx = fork_server()

    check_pool_options = staticmethod(check_pool)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> JobPool:
        self._sel.register(self._ctl_r, selectors.EVENT_READ, ("ctl", None))
        for w in self._workers:
            self._spawn(w)
        self._thread = threading.Thread(
            target=self._serve, name=f"shmwheel-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def shutdown(self, wait: bool = True, cancel_futures: bool = False, kill: bool = False) -> None:
        """Accept no new job; with `cancel_futures` cancel what has not started; with
        `wait` return once every job is done and the workers have exited. `kill` (the
        service's stop) also stops running attempts: they fail with ShmwheelError."""
        with self._lock:
            self._closing = True
            cancelled = self._drop_waiting() if (cancel_futures or kill) else []
        for job in cancelled:
            job._cancel_future()
        if kill:
            with self._lock:
                running = [j for w in self._workers for j in w.inflight]
            for w in self._workers:
                if w.proc is not None and w.proc.is_alive():
                    w.kill_reason = (-1, "shutdown")
                    w.proc.kill()
            self._poke()
            for job in running:
                try:
                    job.exception(timeout=5.0)
                except BaseException:
                    pass
        self._poke()
        if wait or kill:
            with self._lock:
                self._idle.wait_for(self._all_done, timeout=None if not kill else 5.0)
            self._stop_thread()

    def _all_done(self) -> bool:
        return (
            not self._queue
            and not self._timers.count("retry")
            and all(not w.inflight for w in self._workers)
        )

    def _drop_waiting(self) -> list[Job]:
        """Under the lock: every job queued or backing off is DONE; returns them."""
        out = [j for j in self._queue if j.where == QUEUED]
        self._queue.clear()
        out += self._timers.drop("retry")
        for j in out:
            j.where = DONE
        self.counts["cancelled"] += len(out)
        return out

    def listen(self, service: str, tasks: dict[str, str]) -> None:
        """Serve ``Client.submit`` of `service`'s processes (remote.py): `tasks` maps the
        service's task names to their specs."""
        self._link = Listener(self, service, tasks, self._watch, self._unwatch)

    def _watch(self, sock: Any, data: Any, write: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        try:
            self._sel.modify(sock, events, data)
        except KeyError:
            self._sel.register(sock, events, data)

    def _unwatch(self, sock: Any) -> None:
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _stop_thread(self) -> None:
        t = self._thread
        if t is None:
            return
        self._thread = None
        self._poke()
        t.join()
        for w in self._workers:
            self._close_worker(w, wait=True)
        if self._link is not None:
            self._link.close()
            self._link = None
        self._sel.close()
        os.close(self._ctl_r)
        os.close(self._ctl_w)

    # -- the callers' side ----------------------------------------------------------------
    check_options = staticmethod(check_job)

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
        if not callable(fn):
            raise TypeError(f"fn must be a module-level function, got {fn!r}")
        self.check_options(time_limit, retry)
        try:
            blob = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise TypeError(
                f"a job's function and arguments travel pickled (the function by reference, "
                f"so it must be a module-level function): {e!r}"
            ) from None
        if len(blob) > self.max_bytes:
            raise ValueError(
                f"the job's function and arguments pickle to {len(blob)} bytes, over the bound "
                f"of {self.max_bytes} (max_message_bytes)"
            )
        name = name or str(getattr(fn, "__qualname__", type(fn).__name__))
        with self._lock:
            if self._closing:
                raise RuntimeError("cannot schedule new jobs after shutdown")
            self._ids += 1
            job = Job(self, self._ids, name, blob, time_limit, retry)
            if delay_s > 0:
                job.where = BACKOFF
                due = math.ceil((time.monotonic_ns() + delay_s * 1e9) / 1e6)
                job.timer = self._timers.add(due, "retry", job)
            else:
                self._queue.append(job)
            self.counts["submitted"] += 1
            poke = not self._poked
            self._poked = True
        if poke:
            self._poke()
        return job

    def cancel(self, job: Job, stop: bool) -> bool:
        signal_worker = None
        with self._lock:
            if job.where == DONE:
                return job.cancelled()
            if job.where == RUNNING:
                if not stop:
                    return False
                w = self._workers[job.worker]
                w.slot[W.STOP] = job.id
                signal_worker = w
                self.counts["stopped"] += 1
            elif job.where == BACKOFF:
                self._timers.cancel(job.timer)
                job.timer = -1
                self.counts["cancelled"] += 1
            else:
                self.counts["cancelled"] += 1
            job.where = DONE  # a queued job is skipped where it stands in the queue
            self._idle.notify_all()
        if signal_worker is not None:
            self._stop_attempt(signal_worker, job.id, "stop")
        job._cancel_future()
        return True

    def _stop_attempt(self, w: WorkerProc, job_id: int, reason: str) -> None:
        """The soft stop of `w`'s attempt of `job_id` (SIGUSR1; a time limit is the
        worker's own SIGALRM), and its hard stop armed at now + grace."""
        try:
            if w.proc is not None:
                os.kill(w.proc.pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
        with self._lock:
            self._arm_hard_stop(w, job_id, reason)
        self._poke()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            running = sum(1 for w in self._workers if w.inflight and w.running() >= 0)
            out: dict[str, Any] = dict(self.counts)
            out.update(
                queued=sum(1 for j in self._queue if j.where == QUEUED),
                backing_off=self._timers.count("retry"),
                running=running,
                workers={f"job{w.index}": w.describe() for w in self._workers},
            )
        return out

    # -- the manager thread ---------------------------------------------------------------
    def _poke(self) -> None:
        try:
            os.write(self._ctl_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _serve(self) -> None:
        next_sweep = time.monotonic() + SWEEP_S
        while self._thread is not None:
            wake = self._timers.next_ms()
            t = time.monotonic()
            timeout = next_sweep - t
            if wake is not None:
                timeout = min(timeout, (wake - now_ms() + 1) / 1000.0)
            for key, ev in self._sel.select(max(0.0, timeout)):
                kind, w = key.data
                if kind == "r":
                    self._read_results(w)
                elif kind == "k":
                    self._read_wake(w)
                elif kind == "s":
                    self._on_death(w)
                elif kind == "l":
                    self._link.accept()  # type: ignore[union-attr]
                elif kind == "c":
                    if ev & selectors.EVENT_READ:
                        self._link.readable(w)  # type: ignore[union-attr]
                    if ev & selectors.EVENT_WRITE:
                        self._link.writable(w)  # type: ignore[union-attr]
                else:
                    try:
                        while os.read(self._ctl_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
            self._fire_timers()
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + SWEEP_S
                self._sweep()
            self._dispatch()

    def _dispatch(self) -> None:
        sends: list[tuple[WorkerProc, list[tuple[int, float, bytes]]]] = []
        starts: list[Job] = []
        with self._lock:
            self._poked = False
            if not self._queue:
                return
            for w in sorted(self._workers, key=lambda x: len(x.inflight)):
                if w.dead or w.proc is None:
                    continue
                room = w.window() - len(w.inflight)
                batch = []
                while room > 0 and self._queue:
                    job = self._queue.popleft()
                    if job.where != QUEUED:
                        continue  # cancelled where it stood
                    job.where, job.worker = RUNNING, w.index
                    job.attempts += 1
                    if not w.inflight:
                        w.last_s = time.monotonic()
                    w.inflight.append(job)
                    batch.append((job.id, float(job.time_limit or 0.0), job._blob))
                    if job.on_start is not None:
                        starts.append(job)
                    room -= 1
                if batch:
                    sends.append((w, batch))
        for w, batch in sends:
            w.send(batch)
        for job in starts:
            job.on_start(job)

    def _read_results(self, w: WorkerProc) -> bool:
        """Settle what `w`'s result pipe holds; False at its end (the worker is gone)."""
        frames = w.read_frames()
        if frames:
            self._on_frames(w, frames)
        return frames is not None

    def _on_frames(self, w: WorkerProc, frames: list[tuple[int, int, Any]]) -> None:
        finished: list[tuple[Job, str, Any]] = []
        t = time.monotonic()
        with self._lock:
            per = (t - w.last_s) / len(frames)
            w.avg_s = 0.8 * w.avg_s + 0.2 * per
            w.last_s = t
            for job_id, kind, value in frames:
                job = w.inflight.popleft()
                if job.id != job_id:  # a worker that breaks the protocol is not trusted
                    log.error(
                        "job worker %d answered job %d for %d: killed", w.index, job_id, job.id
                    )
                    w.inflight.appendleft(job)
                    w.proc.kill()
                    break
                if w.hard_timer >= 0 and w.kill_reason and w.kill_reason[0] == job_id:
                    self._timers.cancel(w.hard_timer)
                    w.hard_timer, w.kill_reason = -1, None
                finished.extend(self._decide(job, kind, value))
            self._idle.notify_all()
        self._settle(finished)

    def _decide(self, job: Job, kind: int, value: Any) -> list[tuple[Job, str, Any]]:
        """Under the lock: the outcome of `job`'s attempt; what to set on futures."""
        if job.where == DONE:  # stopped or cancelled meanwhile: its future is decided
            return []
        if kind == W.OK:
            job.where = DONE
            self.counts["succeeded"] += 1
            return [(job, "ok", value)]
        if kind == W.STOPPED:
            job.where = DONE
            return [(job, "cancel", None)]
        summary, error, match, text = attempt_error(job, kind, value, self.grace)
        if job.retry is not None and job.retry.retries(match, job.attempts):
            pause = job.retry.backoff_s(job.attempts)
            due = math.ceil((time.monotonic_ns() + pause * 1e9) / 1e6)
            job.where = BACKOFF
            job.timer = self._timers.add(due, "retry", job)
            self.counts["retried"] += 1
            log.warning("%s failed: %s; retrying in %.3f s", job.label(), summary, pause)
            if text:
                log.debug("job %d attempt %d:\n%s", job.id, job.attempts, text)
            return []
        job.where = DONE
        self.counts["timed_out" if isinstance(error, JobTimeout) else "failed"] += 1
        log.error("%s failed: %s%s", job.label(), summary, f"\n{text}" if text else "")
        return [(job, "error", error)]

    def _settle(self, finished: list[tuple[Job, str, Any]]) -> None:
        for job, how, value in finished:
            if how == "ok":
                job.set_result(value)
            elif how == "cancel":
                job._cancel_future()
            else:
                job.set_exception(value)

    def _read_wake(self, w: WorkerProc) -> None:
        if signal.SIGALRM in w.read_wake():
            self._check_limit(w, arm=True)

    def _check_limit(self, w: WorkerProc, arm: bool) -> None:
        """`w`'s running attempt passed its limit: arm its hard stop (once)."""
        with self._lock:
            if w.slot is None or not w.inflight or w.hard_timer >= 0:
                return
            running = w.slot[W.RUNNING]
            head = w.inflight[0]
            if running != head.id or not head.time_limit:
                return
            if arm:
                self._arm_hard_stop(w, head.id, "timeout")

    def _arm_hard_stop(self, w: WorkerProc, job_id: int, reason: str) -> None:
        if w.hard_timer >= 0:
            return
        w.kill_reason = (job_id, reason)
        w.hard_timer = self._timers.add(now_ms() + math.ceil(self.grace * 1000), "hard", w)

    def _sweep(self) -> None:
        """The safety net: a running attempt past limit + grace whose wake-up byte was
        lost gets its hard stop armed now."""
        t = time.monotonic()
        for w in self._workers:
            head = w.inflight[0] if w.inflight else None
            limit = head.time_limit if head is not None else None
            late = limit is not None and t - w.last_s > limit + self.grace
            if late and w.hard_timer < 0 and head is not None and w.running() == head.id:
                self._check_limit(w, arm=True)

    def _fire_timers(self) -> None:
        kills: list[WorkerProc] = []
        with self._lock:
            for kind, target in self._timers.due(now_ms()):
                if kind == "retry":
                    job: Job = target
                    if job.where == BACKOFF:
                        job.where, job.timer = QUEUED, -1
                        self._queue.append(job)
                else:
                    w: WorkerProc = target
                    w.hard_timer = -1
                    reason = w.kill_reason
                    if reason and w.slot[W.RUNNING] == reason[0] and not w.dead:
                        kills.append(w)
                    else:
                        w.kill_reason = None
        for w in kills:
            log.warning(
                "job worker %d did not end job %d within the grace of %g s: killing it",
                w.index,
                w.kill_reason[0] if w.kill_reason else -1,
                self.grace,
            )
            w.proc.kill()

    # -- workers ------------------------------------------------------------------------------
    def _spawn(self, w: WorkerProc) -> None:
        w.start(self._ctx, self.name, self.max_bytes)
        for fd, kind in zip(w.fds(), ("r", "k", "s"), strict=True):
            self._sel.register(fd, selectors.EVENT_READ, (kind, w))

    def _close_worker(self, w: WorkerProc, wait: bool) -> None:
        if w.proc is None:
            return
        for fd in w.fds():
            try:
                self._sel.unregister(fd)
            except (KeyError, ValueError):
                pass
        w.close(wait)

    def _on_death(self, w: WorkerProc) -> None:
        """`w` exited: settle its running attempt, requeue what it never started, and
        start its successor."""
        while self._read_results(w):
            pass
        w.proc.join(0)
        code = w.proc.exitcode
        finished: list[tuple[Job, str, Any]] = []
        with self._lock:
            w.dead = True
            if w.hard_timer >= 0:
                self._timers.cancel(w.hard_timer)
                w.hard_timer = -1
            reason, w.kill_reason = w.kill_reason, None
            running = int(w.slot[W.RUNNING])
            if w.inflight and w.inflight[0].id == running:
                job = w.inflight.popleft()
                if reason is not None and reason[0] == job.id and reason[1] == "timeout":
                    finished += self._decide(job, KILLED, None)
                elif reason is not None and reason[1] == "shutdown":
                    job.where = DONE
                    finished.append(
                        (
                            job,
                            "error",
                            ShmwheelError(
                                f"job {job.id} ({job.name}) was running when its service stopped"
                            ),
                        )
                    )
                else:
                    how = (
                        f"exit code {code}"
                        if code is None or code >= 0
                        else f"signal {signal.Signals(-code).name}"
                    )
                    finished += self._decide(job, W.REFUSED, f"its worker died ({how})")
            for job in reversed(w.inflight):  # never started: back to the front, uncounted
                if job.where == RUNNING:
                    job.where, job.attempts = QUEUED, job.attempts - 1
                    self._queue.appendleft(job)
            w.inflight.clear()
            self._idle.notify_all()
            closing = self._closing and not self._queue
        self._settle(finished)
        self._close_worker(w, wait=True)
        if self._thread is None or (closing and self._all_done()):
            return
        self.counts["worker_restarts"] += 1
        early = time.monotonic() - w.started_s < 1.0 and reason is None and running < 0
        pause = self._restart_pause[w.index]
        self._restart_pause[w.index] = (
            min(RESTART_BACKOFF_MAX_S, max(0.05, 2 * pause)) if early else 0.0
        )
        if early and pause:
            log.warning("job worker %d exited at once again; next start in %.2f s", w.index, pause)
            time.sleep(pause)  # bounded; only for a worker that cannot stay up
        self._spawn(w)
