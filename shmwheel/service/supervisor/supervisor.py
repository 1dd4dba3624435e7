"""``TimerService``: the supervisor, living in the embedding process. It creates the
service's segment and semaphores, starts the coordinator, the reaper and the executor pool
as separate processes, forked by the service's zygote (service/processes/zygote.py),
restarts any that dies (a monitor thread, woken by the zygote's exit reports), and on
``stop`` ends them all and unlinks every name it created.

Why the supervisor, not the coordinator, creates the segment: a restarted coordinator
must find the shared state intact, so the segment has to outlive it.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ... import _native as N
from ...errors import ShmwheelError
from ...journal.directory import JournalOptions
from ...journal.write import spill
from ...segment import census, clock, shm
from ...segment import layout as L
from ...segment import sizes as Z
from ..caller.client import Client, connect
from ..caller.outcomes import mark_stopped
from ..forkserver import ForkServer, ForkServerError, RoleProcess, fork_roles, zygote_env
from ..jobs.executor import Executor
from ..jobs.pool import DEFAULT_GRACE_S, JobPool
from ..stats import read_stats
from ..tasks import service_path
from . import options as O
from .watchdog import Watchdog

log = logging.getLogger("shmwheel.service")

START_TIMEOUT_S = 60.0
_READY_BITS = {"coordinator": L.READY_COORDINATOR, "reaper": L.READY_REAPER}
MONITOR_S = 0.05


# The journal's lock must not outlive the service in a child the embedding process forks
# (a multiprocessing worker, say): each such child closes its copy at once.
_LOCK_HOLDERS: weakref.WeakSet[TimerService] = weakref.WeakSet()


def _drop_locks_in_child() -> None:
    for svc in list(_LOCK_HOLDERS):
        fd, svc._journal_fd = svc._journal_fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


os.register_at_fork(after_in_child=_drop_locks_in_child)


class TimerService:
    """A multiprocess timer service over shared memory (see docs/quickstart.md)."""

    def __init__(
        self,
        name: str | None = None,
        *,
        tasks: Mapping[str, str | Callable[..., Any]] | None = None,
        capacity: int = 1_000_000,
        executors: int | None = None,
        tick_ms: int = 1,
        wheel_size: int = 64,
        journal: str | os.PathLike[str] | None = None,
        max_clients: int = 32,
        ring_capacity: int = 16384,
        dispatch_capacity: int = 8192,
        arena_bytes: int | None = None,
        journal_fsync: str = "interval",
        journal_fsync_ms: int = 100,
        journal_segment_bytes: int = 64 << 20,
        journal_keep_hours: float = 0.0,
        journal_jobs_bytes: int = 16 << 20,
        watch_capacity: int = Z.DEFAULT_TABLE_CAPACITY,
        waiter_capacity: int = Z.DEFAULT_TABLE_CAPACITY,
        journal_on_damage: str = "refuse",
        job_workers: int = 0,
        job_grace: float = DEFAULT_GRACE_S,
        stuck_after_ms: int = 1000,
    ) -> None:
        # every option is a named keyword-only parameter (no **options): a misspelt one is
        # a TypeError from the call itself and an error to a type checker
        if journal_on_damage not in ("refuse", "salvage"):
            raise ValueError(
                f"journal_on_damage must be 'refuse' or 'salvage', got {journal_on_damage!r}"
            )
        # what start() does with a damaged journal (docs/journal.md, "Damage")
        self.journal_on_damage = journal_on_damage
        self.journal: JournalOptions | None = O.journal_options(
            journal, journal_fsync, journal_fsync_ms, journal_segment_bytes, journal_keep_hours,
            journal_jobs_bytes,
        )  # fmt: skip
        self.name = (
            shm.check_name(name) if name is not None else f"s{os.getpid()}-{secrets.token_hex(4)}"
        )
        self.config = O.service_config(
            tasks, capacity=capacity, executors=executors, tick_ms=tick_ms,
            wheel_size=wheel_size, max_clients=max_clients, ring_capacity=ring_capacity,
            dispatch_capacity=dispatch_capacity, arena_bytes=arena_bytes,
            watch_capacity=watch_capacity, waiter_capacity=waiter_capacity,
            job_workers=job_workers, journal=self.journal, stuck_after_ms=stuck_after_ms,
        )  # fmt: skip
        self.mem: L.ServiceMemory | None = None
        self._owner_pid = 0  # the process that started the service: only it stops it
        self.procs: dict[str, RoleProcess] = {}
        self._zygote: ForkServer | None = None  # forks the processes (service/processes/zygote.py)
        self._wake = (-1, -1)  # a pipe: stop() wakes the monitor thread's wait
        self.restarts: dict[str, int] = {}
        self._monitor: threading.Thread | None = None
        self._watchdog: Watchdog | None = None  # made by start(), run by the monitor thread
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._forking = threading.Lock()  # replacing the zygote, forking from it
        self._journal_fd = -1  # the journal directory's lock, shared with its writers
        self._path: list[str] = []  # the service processes' import path (tasks.service_path)
        self.recovery: dict[str, Any] = {}  # what the last start recovered (journal only)
        self._rate_sample: tuple[float, int] | None = None
        self._started = 0.0
        self._job_options = (job_workers, job_grace)  # a pool made by start() (service/jobs/)
        if job_workers:
            JobPool.check_pool_options(job_workers, job_grace)
        self._jobs: JobPool | None = None

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> TimerService:
        """Recover from the journal if there is one, create the shared memory, start
        the processes; returns self once they are up."""
        if self.mem is not None:
            raise ShmwheelError(f"service {self.name!r} is already started")
        L.check_architecture()
        self._owner_pid = os.getpid()
        self._path = service_path()  # every start and restart of its processes uses it
        try:
            # first: the zygote imports while this process creates the segment
            self._wake = os.pipe()
            self._start_zygote()
            plan = self._recover_plan() if self.journal is not None else None
            from ...journal.recover.salvage import salvage_stale  # a dead journaled service's

            census.sweep_stale(salvage_stale)  # memory goes to its journal first
            self.mem = census.create(self.name, self.config, self._owner_pid, clock.now_ms())
        except BaseException:
            self._close_zygote(1.0)
            self._release_journal()
            raise
        try:
            if plan is not None:
                self._recover(plan)
            for role in L.semaphore_roles(self.config):
                shm.open_semaphore(self.name, role, create=True).close()
            self._spawn(*L.semaphore_roles(self.config))  # forked back to back
            self._await_ready()
        except BaseException:
            self._teardown(5.0)
            raise
        if self._job_options[0]:
            try:
                self._jobs = JobPool(self._job_options[0], grace=self._job_options[1],
                    name=f"{self.name}-jobs",  # its workers forked by the zygote too
                    forks=lambda argv, fds: self._fork(["job worker"], [(argv, fds)], True)[0],
                )  # fmt: skip
                self.recovery.update(self._jobs.serve(self.name, dict(self.config.tasks),
                                                      self.journal))  # fmt: skip
            except BaseException:
                self._teardown(5.0)
                raise
        self._stop.clear()
        self._started, self._rate_sample = time.monotonic(), None
        self._watchdog = Watchdog(self)
        self._monitor = threading.Thread(
            target=self._watch, name=f"shmwheel-{self.name}", daemon=True
        )
        self._monitor.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End every service process and unlink every segment and semaphore. Timers still
        pending are dropped, unless the service has a journal: then the next start on it
        re-arms them. Either way their handles are decided "stopped" once the processes
        have ended (result() returns it, waiters wake, done callbacks run).

        Only the process that started the service stops it: in a process forked from it
        (``os.fork()`` inside the ``with`` block), stop() and ``__exit__`` just drop this
        copy's mapping and leave the service running for its owner."""
        if self.mem is None:
            return
        if os.getpid() != self._owner_pid:
            self.mem.close()
            self.mem = None
            self.procs = {}
            self._monitor = None
            if self._zygote is not None:  # the owner's: only this copy of its socket
                self._zygote.sock.close()
                self._zygote = None
            return
        if self._jobs is not None:  # running jobs fail ("the service stopped"), queued cancel
            self._jobs.shutdown(wait=False, kill=True)
            self._jobs = None
        self._stop.set()
        if self._monitor is not None:
            os.write(self._wake[1], b"x")
            self._monitor.join()
            self._monitor = None
        self._teardown(timeout)

    def __enter__(self) -> TimerService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self.mem is None else f"running, owner pid {self._owner_pid}"
        return (
            f"TimerService(name={self.name!r}, {state}, capacity={self.config.capacity}, "
            f"executors={self.config.executors})"
        )

    def __del__(self) -> None:
        if getattr(self, "mem", None) is not None and os.getpid() == self._owner_pid:
            try:
                self.stop(2.0)
            except Exception:
                pass

    def client(self) -> Client:
        """A new ``Client`` of this service (the same as ``connect(self.name)``)."""
        if self.mem is None:
            raise ShmwheelError("start the service before asking for a client")
        return connect(self.name)

    def job_pool(self) -> JobPool:
        """The pool of this service's job workers (``TimerService(job_workers=N)``)."""
        if self._jobs is None:
            raise ShmwheelError(
                f"service {self.name!r} has no job workers running: start it, made with "
                "TimerService(job_workers=N)"
            )
        return self._jobs

    def executor(self, **defaults: Any) -> Executor:
        """An ``Executor`` on this service's job workers; `defaults` are its
        ``time_limit`` and ``retry``. Its ``shutdown`` leaves the service running."""
        return Executor(service=self, **defaults)

    # -- the journal --------------------------------------------------------------------
    def _recover_plan(self) -> Any:
        """Claim the journal and read it; the config then starts a new epoch above it."""
        from ...journal.recover import recovery

        assert self.journal is not None
        plan = recovery.prepare(self.journal, self.name, self.journal_on_damage)
        self._journal_fd = plan.fd
        _LOCK_HOLDERS.add(self)
        st = plan.state
        self.journal = replace(self.journal, epoch=st.epoch + 1)
        self.config = replace(self.config, journal_epoch=st.epoch + 1, journal_next_gen=st.next_gen)
        return plan

    def _recover(self, plan: Any) -> None:
        from ...journal.recover import recovery

        assert self.mem is not None and self.journal is not None
        self.recovery = recovery.finish(self.mem, plan, self.journal)
        self.mem.header[L.W_RECOVERED] = self.recovery["recovered"]

    def _release_journal(self) -> None:
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1

    # -- processes --------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        """The service processes' environment, as of now (zygote.zygote_env)."""
        level = logging.getLevelName(logging.getLogger("shmwheel").getEffectiveLevel())
        return zygote_env(self._path, level)

    def _start_zygote(self) -> None:
        try:
            jobs = bool(self._job_options[0])
            self._zygote = ForkServer(self.name, self._env(), self.journal is not None, jobs)
        except OSError as e:
            raise ShmwheelError(f"service {self.name!r}: cannot start its zygote: {e}") from e

    def _close_zygote(self, timeout: float) -> None:
        if self._zygote is not None:
            self._zygote.close(timeout)
            self._zygote = None
        for fd in self._wake:
            if fd >= 0:
                os.close(fd)
        self._wake = (-1, -1)

    def _spawn(self, *roles: str) -> None:
        """Fork `roles` back to back; the journal's lock goes only to its writers, not executors."""
        lock = (self._journal_fd,) if self._journal_fd >= 0 else ()
        reqs = [(["executor", self.name, r[4:]], ()) if r.startswith("exec")
                else ([r, self.name], lock) for r in roles]  # fmt: skip
        self.procs.update(zip(roles, self._fork(roles, reqs), strict=True))

    def _fork(self, whats: Sequence[str], reqs: Sequence[tuple[list[str], tuple[int, ...]]],
              fd_args: bool = False) -> list[RoleProcess]:  # fmt: skip
        """Fork `reqs` (argv, fds) from a live zygote; if one fails, kill the rest, raise it."""
        with self._forking:
            env = self._env()
            got = fork_roles(self._live_zygote, [(a, env, f) for a, f in reqs], START_TIMEOUT_S,
                             fd_args)  # fmt: skip
        done = [p for p in got if isinstance(p, RoleProcess)]
        for what, p in zip(whats, got, strict=True):
            if isinstance(p, ForkServerError):
                for q in done:
                    q.kill()
                raise ShmwheelError(f"service {self.name!r}: cannot start its {what} process: {p}")
        return done

    def _live_zygote(self) -> ForkServer:
        if self._zygote is None or self._zygote.dead:
            if self._zygote is not None:
                self._zygote.close(1.0)
            self._start_zygote()
        assert self._zygote is not None
        return self._zygote

    def _await_ready(self) -> None:
        assert self.mem is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        want = L.READY_COORDINATOR | L.READY_REAPER
        while True:
            for role, p in self.procs.items():
                if p.poll() is not None:
                    raise ShmwheelError(
                        f"service {self.name!r}: the {role} process exited "
                        f"with code {p.returncode} while starting (see stderr)"
                    )
            execs_up = bool((self.mem.exec_table[:, L.X_PID] != 0).all())
            if self.mem.header[L.W_READY] & want == want and execs_up:
                return
            if time.monotonic() > deadline:
                raise ShmwheelError(
                    f"service {self.name!r} did not start within {START_TIMEOUT_S} s"
                )
            time.sleep(0.002)

    def _was_up(self, role: str, pid: int) -> bool:
        """Whether the process had finished starting (it then recorded its pid)."""
        mem = self.mem
        if mem is None:
            return False
        if role.startswith("exec"):
            return int(mem.exec_table[int(role[4:]), L.X_PID]) == pid
        word = L.W_PID_COORDINATOR if role == "coordinator" else L.W_PID_REAPER
        return int(mem.header[word]) == pid

    def _watch(self) -> None:
        """Restart any service process that dies, until stop(): at once if it had finished
        starting, else after a doubling back-off (up to 5 s), so that a role that cannot
        start does not spin; the watchdog (watchdog.py) checks the rest, and holds back
        a role that restarts too often."""
        backoff: dict[str, float] = {}
        due: dict[str, float] = {}
        wd = self._watchdog
        while not self._stop.is_set():
            z = self._zygote
            if z is not None:  # a role's exit report wakes it at once
                z.wait(MONITOR_S, self._wake[0])
            else:
                self._stop.wait(MONITOR_S)
            if self._stop.is_set():
                break
            if wd is not None:
                wd.tick(time.monotonic())
            self._gate_schedules()
            for role, p in list(self.procs.items()):
                if p.poll() is None or self._stop.is_set():
                    continue
                now = time.monotonic()
                if role not in due:
                    backoff[role] = (
                        0.0
                        if self._was_up(role, p.pid)
                        else min(5.0, max(MONITOR_S, 2 * backoff.get(role, 0.0)))
                    )
                    if wd is not None:  # the restart rate's back-off, when it asks for one
                        up = backoff[role] == 0.0  # it had finished starting
                        backoff[role] = max(backoff[role], wd.on_exit(role, now, up))
                    due[role] = now + backoff[role]
                    log.warning(
                        "service %s: %s (pid %d) exited with code %s; restarting it%s",
                        self.name,
                        role,
                        p.pid,
                        p.returncode,
                        f" in {backoff[role]:.2f} s" if backoff[role] else "",
                    )
                if now < due[role]:
                    continue
                del due[role]
                self.restarts[role] = self.restarts.get(role, 0) + 1
                self._count_restart(role)
                with self._lock:
                    if not self._stop.is_set() and self.mem is not None:
                        bit = _READY_BITS.get(role, 0)
                        N.word_and(self.mem.header, L.W_READY, ~bit)  # set again when up
                        try:
                            self._spawn(role)
                        except ShmwheelError as e:  # no zygote could fork it: the dead
                            log.error("%s; retrying", e)  # handle stays, so it is retried

    def _gate_schedules(self) -> None:
        """Clients refuse new timers (JournalError) while a journal writer has a fault,
        and (ShmwheelError) while the watchdog says the service failed: W_JREFUSE is the
        one word their fast paths read, kept here from the writers' and the health."""
        mem = self.mem
        if mem is None:
            return
        h = mem.header
        failed = self._watchdog is not None and self._watchdog.failed
        jfault = self.journal is not None and (h[L.W_JFAULT_COORDINATOR] or h[L.W_JFAULT_REAPER])
        h[L.W_JREFUSE] = int(bool(failed or jfault))

    def _count_restart(self, role: str) -> None:
        """Also in the segment, so any process (``shmwheel status``) can read it."""
        mem = self.mem
        if mem is None:
            return
        if role.startswith("exec"):
            mem.exec_table[int(role[4:]), L.X_RESTARTS] += 1
        else:
            word = L.W_RESTARTS_COORDINATOR if role == "coordinator" else L.W_RESTARTS_REAPER
            mem.header[word] += 1

    def _teardown(self, timeout: float) -> None:
        mem = self.mem
        with self._lock:
            if mem is not None:
                mem.header[L.W_STOPPING] = 1
                for role in L.semaphore_roles(self.config):
                    try:
                        mem.ring_bell(role)
                    except Exception:
                        pass
            end = time.monotonic() + timeout
            for p in self.procs.values():
                try:
                    p.wait(max(0.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            self.procs.clear()
            self._close_zygote(max(0.0, end - time.monotonic()) + 1.0)
        if mem is not None:
            mark_stopped(mem)  # the handles still undecided: "stopped"
            mem.close()
            self.mem = None
        shm.unlink_service(self.name)
        self._release_journal()
        held = spill.pending(self.journal.directory) if self.journal is not None else []
        if held:  # its writers could not write everything (a disk gone read-only)
            log.warning(
                "service %s stopped with records its journal %s did not take; they are kept "
                "in %s, and the next start on this journal writes them first",
                self.name,
                self.journal.directory,  # type: ignore[union-attr]
                ", ".join(held),
            )

    # -- observation ------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters read from shared memory (any process could read the same words)."""
        if self.mem is None:
            raise ShmwheelError("the service is not running")
        stats = read_stats(self.mem, self.procs, self.restarts)
        if self._jobs is not None:
            stats["jobs"] = self._jobs.stats()
        j = stats.get("journal")
        if j is not None:  # the write rate since the previous stats() (or the start)
            t, prev = time.monotonic(), self._rate_sample or (self._started, 0)
            j["write_bytes_per_s"] = (j["bytes_written"] - prev[1]) / max(1e-9, t - prev[0])
            self._rate_sample = (t, j["bytes_written"])
        return stats
