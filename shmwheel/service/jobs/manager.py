"""The job pool's manager thread (pool.py's header is the theory of operation): the only
thread that sends to, reads from, starts and reaps job workers, fires the pool's timers
and serves the job link. Runs in the process that owns the pool.

What it shares with callers is the pool's (its lock, queue, timers, counts); it decides
nothing about a job's outcome itself: ``PoolState.decide`` (state.py) does, under the lock.
"""

from __future__ import annotations

import logging
import math
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ...errors import ShmwheelError
from ...segment.clock import now_ms
from ..forkserver import ForkServer, ForkServerError, RoleProcess, fork_role, zygote_env
from ..tasks import service_path
from . import ledger as LG
from . import worker as W
from .failures import KILLED
from .job import BACKOFF, DONE, QUEUED, RUNNING, Job
from .remote import Listener, Submit
from .state import PoolState
from .workers import WINDOW_TARGET_S, Forks, WorkerProc

log = logging.getLogger("shmwheel.jobs")

SWEEP_S = 0.1  # the safety net's period (a lost wake-up byte costs at most this)
RESTART_BACKOFF_MAX_S = 5.0
BROKEN_AFTER = 5  # every worker died this many times in a row before running a job
START_TIMEOUT_S = 60.0  # a worker's start, the pool's own zygote's imports included


class Manager:
    """The manager of `size` workers of the pool whose shared state is `state`; `submit`
    is the pool's (the job link submits through it). `forks` forks a worker from its
    service's zygote; without it (an Executor's own pool) the manager starts a zygote of
    its own that imports only the job worker's module, and ends it in ``stop``."""

    def __init__(
        self, state: PoolState, size: int, submit: Submit, forks: Forks | None = None
    ) -> None:
        if W.loading_main():
            raise ShmwheelError(
                "a job worker is loading the main script to find a job's function, and that "
                "script starts job workers at its top level: guard it with "
                'if __name__ == "__main__":'
            )
        self.state = state
        self.submit = submit
        self.workers = [WorkerProc(i) for i in range(size)]
        self._forks = forks
        self._zygote: ForkServer | None = None  # its own, when `forks` is None
        self._env: dict[str, str] = {}
        self._sel = selectors.DefaultSelector()
        self._ctl_r, self._ctl_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.link: Listener | None = None  # the job link's server, once listen() ran
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._forks is None:
            level = logging.getLevelName(logging.getLogger("shmwheel").getEffectiveLevel())
            self._env = zygote_env(service_path(), level)
        self._sel.register(self._ctl_r, selectors.EVENT_READ, ("ctl", None))
        try:
            for w in self.workers:
                self._spawn(w)
        except BaseException:
            for w in self.workers:
                self._close_worker(w, wait=True)
            self._close_zygote()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"shmwheel-{self.state.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """End the thread, close every worker (killed after 2 s) and the link."""
        t = self._thread
        if t is None:
            return
        self._thread = None
        self.poke()
        t.join()
        for w in self.workers:
            self._close_worker(w, wait=True)
        if self.state.ledger is not None:
            with self.state.lock:
                self.state.ledger.close()
                self.state.ledger = None
        self._close_zygote()
        if self.link is not None:  # kept: an ended job still pickles with its outcome
            self.link.close()
        self._sel.close()
        os.close(self._ctl_r)
        os.close(self._ctl_w)

    def listen(
        self, service: str, tasks: dict[str, str], stats: Callable[[], dict[str, Any]],
        ttl: float,
    ) -> None:  # fmt: skip
        """Serve ``Client.submit``, the pool's `stats()` and pickled jobs' copies (their
        outcomes kept `ttl` s) to `service`'s processes (remote.py)."""
        self.link = Listener(self.submit, service, tasks, self.watch, self.unwatch, stats, ttl)

    def idle(self) -> bool:
        """No worker holds a job (caller holds the pool's lock)."""
        return all(not w.inflight for w in self.workers)

    def kill_all(self) -> list[Job]:
        """The service stops: every worker killed; the jobs they held."""
        with self.state.lock:
            running = [j for w in self.workers for j in w.inflight]
        for w in self.workers:
            if not w.dead:
                w.kill_reason = (-1, "shutdown")
                w.kill()
        self.poke()
        return running

    def stop_attempt(self, w: WorkerProc, job_id: int, reason: str) -> None:
        """The soft stop of `w`'s attempt of `job_id` (SIGUSR1; a time limit is the
        worker's own SIGALRM), and its hard stop armed at now + grace."""
        w.signal(signal.SIGUSR1)
        with self.state.lock:
            self._arm_hard_stop(w, job_id, reason)
        self.poke()

    def poke(self) -> None:
        try:
            os.write(self._ctl_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _run(self) -> None:
        next_sweep = time.monotonic() + SWEEP_S
        while self._thread is not None:
            wake = self.state.timers.next_ms()
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
                    self.link.accept()  # type: ignore[union-attr]
                elif kind == "c":
                    if ev & selectors.EVENT_READ:
                        self.link.readable(w)  # type: ignore[union-attr]
                    if ev & selectors.EVENT_WRITE:
                        self.link.writable(w)  # type: ignore[union-attr]
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
            if self.state.ledger is not None:
                with self.state.lock:
                    self.state.ledger.flush()

    def _dispatch(self) -> None:
        sends: list[tuple[WorkerProc, list[tuple[int, float, bytes, bytes]]]] = []
        starts: list[Job] = []
        with self.state.lock:
            now = time.monotonic()
            ledger = self.state.ledger
            self.state.poked = False
            if not self.state.queue:
                return
            for w in sorted(self.workers, key=lambda x: len(x.inflight)):
                if w.dead or w.proc is None:
                    continue
                window = w.window()
                if len(w.inflight) > window // 2:  # it has work: send a fuller batch later
                    continue
                if w.inflight and now - w.last_s > WINDOW_TARGET_S:
                    continue  # its job runs long: what waits may go to another worker
                room = window - len(w.inflight)
                if not w.inflight:
                    w.last_s = time.monotonic()
                batch, index, queue, take = [], w.index, self.state.queue, w.inflight.append
                while room > 0 and queue:
                    job = queue.popleft()
                    if job.where != QUEUED:
                        continue  # cancelled where it stood
                    job.where, job.worker, job.began_us = RUNNING, index, -1
                    job.attempts += 1
                    take(job)
                    if ledger is not None:
                        ledger.record(LG.STARTED, job.id, job.attempts, LG.now_us())
                    batch.append((job.id, float(job.time_limit or 0.0), job._fn, job._blob))
                    if job.on_start is not None:
                        starts.append(job)
                    room -= 1
                if batch:
                    sends.append((w, batch))
            if ledger is not None:  # what is sent is on file first
                ledger.flush()
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
        woken: list[Job] = []
        st = self.state
        t = time.monotonic()
        with st.lock:
            per = (t - w.last_s) / len(frames)
            w.avg_s = 0.8 * w.avg_s + 0.2 * per
            # the first began by the last read (or its dispatch); the rest, as late as t
            began, rest = int(w.last_s * 1e6), int(t * 1e6)
            w.last_s = t
            for job_id, kind, value in frames:
                job = w.inflight.popleft()
                job.began_us, began = began, rest
                if job.id != job_id:  # a worker that breaks the protocol is not trusted
                    log.error(
                        "job worker %d answered job %d for %d: killed", w.index, job_id, job.id
                    )
                    w.inflight.appendleft(job)
                    w.proc.kill()
                    break
                if w.hard_timer >= 0 and w.kill_reason and w.kill_reason[0] == job_id:
                    st.timers.cancel(w.hard_timer)
                    w.hard_timer, w.kill_reason = -1, None
                if kind == W.OK and st.succeeded(job, value):
                    woken.append(job)
                else:
                    finished.extend(st.decide(job, kind, value))
            st.changed.notify_all()
        st.settle(finished, woken)

    def _read_wake(self, w: WorkerProc) -> None:
        if signal.SIGALRM in w.read_wake():
            self._check_limit(w, arm=True)

    def _check_limit(self, w: WorkerProc, arm: bool) -> None:
        """`w`'s running attempt passed its limit: arm its hard stop (once)."""
        with self.state.lock:
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
        w.hard_timer = self.state.timers.add(
            now_ms() + math.ceil(self.state.grace * 1000), "hard", w
        )

    def _sweep(self) -> None:
        """The safety net: a running attempt past limit + grace whose wake-up byte was
        lost gets its hard stop armed now."""
        t = time.monotonic()
        for w in self.workers:
            head = w.inflight[0] if w.inflight else None
            limit = head.time_limit if head is not None else None
            late = limit is not None and t - w.last_s > limit + self.state.grace
            if late and w.hard_timer < 0 and head is not None and w.running() == head.id:
                self._check_limit(w, arm=True)

    def _fire_timers(self) -> None:
        kills: list[WorkerProc] = []
        spawns: list[WorkerProc] = []
        with self.state.lock:
            for kind, target in self.state.timers.due(now_ms()):
                if kind == "retry":
                    job: Job = target
                    if job.where == BACKOFF:
                        job.where, job.timer = QUEUED, -1
                        self.state.queue.append(job)
                elif kind == "spawn":
                    spawns.append(target)
                else:
                    w: WorkerProc = target
                    w.hard_timer = -1
                    reason = w.kill_reason
                    if reason and w.running() == reason[0] and not w.dead:
                        kills.append(w)
                    else:
                        w.kill_reason = None
        for w in kills:
            log.warning(
                "job worker %d did not end job %d within the grace of %g s: killing it",
                w.index,
                w.kill_reason[0] if w.kill_reason else -1,
                self.state.grace,
            )
            w.proc.kill()
        for w in spawns:
            if self._thread is not None and not self.state.broken:
                self._spawn(w)

    def _fork(self, argv: list[str], fds: tuple[int, ...]) -> RoleProcess:
        """Fork a worker: from the service's zygote, or from this pool's own (started
        again if it died)."""
        if self._forks is not None:
            return self._forks(argv, fds)
        # the worker's environment is this process's as of now, as a multiprocessing child's
        # (its zygote's is zygote_env's: the path, one thread for libraries it never loads)
        env = dict(os.environ)
        return fork_role(self._live_zygote, argv, env, fds, START_TIMEOUT_S, True)

    def _live_zygote(self) -> ForkServer:
        if self._zygote is not None and self._zygote.dead:
            self._close_zygote()
        if self._zygote is None:
            self._zygote = ForkServer(self.state.name, self._env, jobs_only=True)
        return self._zygote

    def _close_zygote(self) -> None:
        if self._zygote is not None:
            self._zygote.close(2.0)
            self._zygote = None

    def _spawn(self, w: WorkerProc) -> None:
        """Start `w`. Raises if it cannot while the pool starts; later (a restart) a
        failed start counts as a worker that died at once."""
        try:
            w.start(self._fork, self.state.name, self.state.max_bytes)
        except (OSError, ForkServerError, ShmwheelError) as e:
            if self._thread is None:  # start(): the caller sees why
                raise ShmwheelError(
                    f"job pool {self.state.name}: cannot start a worker: {e}"
                ) from e
            log.error("job pool %s: cannot start worker %d: %s", self.state.name, w.index, e)
            w.started_s = time.monotonic()
            self._after_death(w, early=True, how=f"no start: {e}", finished=[])
            return
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
        start its successor (at once, or after a doubling pause if it died before running
        anything; when every worker keeps dying so, the pool is broken)."""
        while self._read_results(w):
            pass
        how = w.how_it_ended()
        finished: list[tuple[Job, str, Any]] = []
        with self.state.lock:
            w.dead = True
            self.state.timers.cancel(w.hard_timer)
            w.hard_timer = -1
            reason, w.kill_reason = w.kill_reason, None
            running = w.running()
            if w.inflight and w.inflight[0].id == running:
                head = w.inflight.popleft()
                head.began_us = int(w.last_s * 1e6)  # its start, or the last job's end
                finished += self._died_in(head, reason, how)
            for job in reversed(w.inflight):  # never started: back to the front, uncounted
                if job.where == RUNNING:
                    job.where, job.attempts = QUEUED, job.attempts - 1
                    self.state.queue.appendleft(job)
            w.inflight.clear()
            early = time.monotonic() - w.started_s < 1.0 and reason is None and running < 0
        self._close_worker(w, wait=True)
        self._after_death(w, early, how, finished)

    def _after_death(
        self, w: WorkerProc, early: bool, how: str, finished: list[tuple[Job, str, Any]]
    ) -> None:
        """Count `w`'s death (`early`: before it ran anything), break the pool if every
        worker keeps dying so, settle `finished`, and start its successor."""
        with self.state.lock:
            w.failures = w.failures + 1 if early else 0
            if all(x.failures >= BROKEN_AFTER for x in self.workers):
                self.state.broken = (
                    f"job workers cannot start (the last exited with {how}; see stderr)"
                )
                finished += [
                    (j, "error", ShmwheelError(self.state.broken))
                    for j in self.state.drop_waiting()
                ]
            self.state.changed.notify_all()
            closing = self.state.closing and not self.state.queue
        self.state.settle(finished)
        if (
            self._thread is None
            or self.state.broken
            or (closing and (not self.state.waiting() and self.idle()))
        ):
            return
        self.state.counts["worker_restarts"] += 1
        if w.failures:
            pause = min(RESTART_BACKOFF_MAX_S, 0.05 * 2 ** (w.failures - 1))
            log.warning(
                "job worker %d exited at once (%s); next start in %.2f s", w.index, how, pause
            )
            with self.state.lock:
                self.state.timers.add(now_ms() + math.ceil(pause * 1000), "spawn", w)
        else:
            self._spawn(w)

    def _died_in(
        self, job: Job, reason: tuple[int, str] | None, how: str
    ) -> list[tuple[Job, str, Any]]:
        """Under the lock: the outcome of `job`, whose worker died while running it."""
        if reason is not None and reason[0] == job.id and reason[1] == "timeout":
            return self.state.decide(job, KILLED, None)
        if reason is not None and reason[1] == "shutdown":
            if job.where == DONE:  # stopped meanwhile: its future is decided
                return []
            job.where = DONE
            text = f"job {job.id} ({job.name}) was running when its service stopped"
            return [(job, "error", ShmwheelError(text))]
        return self.state.decide(job, W.REFUSED, f"its worker died ({how})")

    def watch(self, sock: Any, data: Any, write: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        try:
            self._sel.modify(sock, events, data)
        except KeyError:
            self._sel.register(sock, events, data)

    def unwatch(self, sock: Any) -> None:
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass
