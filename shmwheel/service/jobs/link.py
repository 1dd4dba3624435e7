"""The client's side of the job link (wire.py): ``Client.submit`` sends a registered task
to its service's job pool and gets a ``Job`` back whose outcome the pool reports. Runs in
the caller's process: one connection per Client, opened at the first submit (or the
first ``Client.stats()``), and one daemon thread that reads the pool's reports and settles
the jobs. A Job pickles as (service, its pool's owner pid and instance token, id), with its
outcome if it has ended; ``restore`` unpickles it: this very Job in a process that holds
it, else a Job bound to its pool over this process's link to it (a WATCH: the pool
reports its attempts and outcome). ``StatsReader`` reads the pool's ``stats()`` over a link
of its own for the tools that watch a service without a Client (``shmwheel status`` /
``top``, the metrics collector).
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import weakref
from typing import Any

from ...errors import ShmwheelError
from ...segment import trust
from . import wire
from .job import DONE, RUNNING, Job
from .retry import Retry, check_job

REPLY_TIMEOUT_S = 30.0


class NoJobWorkers(ShmwheelError):
    """Nobody listens at the service's job link address: it has no job workers."""


class JobLink:
    """One connection to the job pool of service `service`, whose supervisor is process
    `owner` (the segment's owner word): a peer that is not it is refused."""

    def __init__(self, service: str, owner: int) -> None:
        self.service, self.owner = service, owner
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.connect(wire.address(service))
            pid, uid = wire.peer(sock)
        except OSError as e:
            sock.close()
            # no listener on an abstract address: refused at once, nothing to wait for
            kind = NoJobWorkers if isinstance(e, ConnectionRefusedError) else ShmwheelError
            raise kind(
                f"service {service!r} takes no jobs ({e.strerror or e}): start it with "
                "TimerService(job_workers=N)"
            ) from None
        if not trust.same_user(uid) or pid != owner:
            sock.close()
            raise ShmwheelError(
                f"service {service!r}: the job link's address is held by process {pid} "
                f"(uid {uid}), not by the service's supervisor (process {owner}): refused"
            )
        self.sock = sock
        self._lock = threading.Lock()
        self._reqs = itertools.count(1)
        self._replies: dict[int, list[Any]] = {}
        self._arrived = threading.Condition(self._lock)
        self._jobs: dict[int, Job] = {}
        self._early: dict[int, list[list[Any]]] = {}  # reports that beat their ACCEPTED
        self._unread: set[int] = set()  # requests whose answer nobody waits for
        self._closed = False
        self._reader = threading.Thread(target=self._read, name=f"shmwheel-{service}-jobs",
                                        daemon=True)  # fmt: skip
        self._reader.start()

    @classmethod
    def open(cls, service: str, owner: int) -> JobLink | None:
        """A link to `service`'s job pool, or None when the service has no job workers;
        ShmwheelError when the address is held by another process than `owner`."""
        try:
            return cls(service, owner)
        except NoJobWorkers:
            return None

    def stats(self) -> dict[str, Any]:
        """The job pool's ``stats()`` (pool.py) as the pool reads them now."""
        return dict(self._ask([wire.STATS, 0])[2])

    def submit(
        self, task: str, blob: bytes, delay_ms: float, time_limit_ms: float | None,
        retry: Retry | None,
    ) -> Job:  # fmt: skip
        limit = None if time_limit_ms is None else time_limit_ms / 1000.0
        check_job(limit, retry)
        msg = [wire.SUBMIT, 0, task, blob, float(delay_ms), time_limit_ms, wire.encode_retry(retry)]
        reply = self._ask(msg)
        job = Job(self, int(reply[2]), task, b"", b"", limit, retry)
        job._token = int(reply[3])
        with self._lock:
            self._jobs[job.id] = job
            early = self._early.pop(job.id, [])
        for report in early:
            self._on_report(report)
        return job

    def cancel(self, job: Job, stop: bool) -> bool:
        if job.done():
            return job.cancelled()
        ok = bool(self._ask([wire.CANCEL, 0, job.id, stop])[2])
        if ok:  # the pool's DONE report follows; the future is decided now
            with self._lock:
                job.where = DONE
            if not job.done():
                job._cancel_future()
        return ok or job.cancelled()

    def watch(self, id: int, token: int, name: str) -> Job:
        """The Job of `id`, pickled from pool instance `token`, bound to this link: the
        pool reports its attempts and outcome here (an ended one's at once, or "gone")."""
        job = Job(self, id, name, b"", b"", None, None)
        job._token = token
        with self._lock:
            self._jobs[id] = job
        # the reader thread cannot wait for its own read: it only asks (a Job inside a
        # pickled outcome); its state then comes with the next report
        wait = threading.current_thread() is not self._reader
        try:
            state = self._ask([wire.WATCH, 0, id, token], wait)
        except (ShmwheelError, ValueError) as e:
            self._settle(job, "error", ShmwheelError(f"job {id} of service {self.service!r}: {e}"))
            return job
        if state and state[2][0] == "gone":
            self._settle(job, "error", ShmwheelError(state[2][1]))
        elif state and state[2][0] != "done":
            with self._lock:
                if job.where != DONE:
                    job.where, job.attempts = state[2][0], max(job.attempts, int(state[2][1]))
        return job

    def reduce(self, job: Job) -> tuple[Any, ...]:
        """How a Job of this link pickles (``restore``): a pending one has its outcome kept
        by the pool (an EXPORT); an ended one carries it."""
        if not job.done() and not self._ask([wire.EXPORT, 0, job.id])[2] and not job.done():
            raise ShmwheelError(f"job {job.id} of service {self.service!r}: the pool no "
                                "longer knows it and its outcome has not arrived here")  # fmt: skip
        done = outcome_of(job) if job.done() else None
        remember(job._token, job)
        return (restore, (self.service, self.owner, job._token, job.id, job.name, done))

    def _ask(self, msg: list[Any], wait: bool = True) -> list[Any]:
        with self._lock:
            if self._closed:
                raise ShmwheelError(f"the job link to service {self.service!r} is closed")
            req = msg[1] = next(self._reqs)
            if not wait:
                self._unread.add(req)
        try:
            self.sock.sendall(wire.frame(msg))
        except OSError as e:
            raise ShmwheelError(f"service {self.service!r}: the job link broke ({e})") from None
        if not wait:
            return []
        with self._lock:
            if (
                not self._arrived.wait_for(
                    lambda: req in self._replies or self._closed, REPLY_TIMEOUT_S
                )
                or req not in self._replies
            ):
                raise ShmwheelError(f"service {self.service!r} did not answer a job request")
            reply = self._replies.pop(req)
        if reply[0] == wire.REFUSED:
            raise ValueError(reply[2])
        return reply

    def _read(self) -> None:
        buf = bytearray()
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            for msg in wire.frames(buf):
                if msg[0] in (wire.ACCEPTED, wire.REFUSED, wire.ANSWER):
                    with self._lock:
                        if msg[1] in self._unread:
                            self._unread.discard(msg[1])
                            continue
                        self._replies[msg[1]] = msg
                        self._arrived.notify_all()
                else:
                    self._on_report(msg)
        self._broken(f"the job link to service {self.service!r} closed")

    def _on_report(self, msg: list[Any]) -> None:
        with self._lock:
            job = self._jobs.get(msg[1])
            if job is None:
                self._early.setdefault(msg[1], []).append(msg)
                return
            if msg[0] == wire.RUNNING:
                job.where, job.attempts = RUNNING, int(msg[2])
                return
            del self._jobs[msg[1]]
            job.where, job.attempts = DONE, int(msg[2])
        try:
            kind, value = wire.decode_done(job, msg)
        except Exception as e:  # a pickled outcome that does not unpickle here
            kind, value = "error", ShmwheelError(f"job {job.id}'s outcome cannot be read: {e!r}")
        self._settle(job, kind, value)

    def _settle(self, job: Job, kind: str, value: Any) -> None:
        with self._lock:
            self._jobs.pop(job.id, None)
            job.where = DONE
        if not job.done():
            job._end(kind, value)

    def _broken(self, why: str) -> None:
        with self._lock:
            self._closed = True
            jobs, self._jobs = list(self._jobs.values()), {}
            self._arrived.notify_all()
        for job in jobs:
            if not job.done():
                job.set_exception(ShmwheelError(f"{why} before job {job.id} ended"))

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._reader is not threading.current_thread():
            self._reader.join(5.0)
        self.sock.close()


class StatsReader:
    """The job pool's ``stats()`` of service `service` (supervisor process `owner`) read
    from a process that has no Client of it: the link is opened at the first ``read`` and
    kept for the next ones."""

    def __init__(self, service: str, owner: int) -> None:
        self.service, self.owner = service, owner
        self._link: JobLink | None = None

    def read(self) -> dict[str, Any] | None:
        """The pool's stats, or None when the service has no job workers. ShmwheelError
        when the link is refused or broken (the next read connects again)."""
        if self._link is None:
            self._link = JobLink.open(self.service, self.owner)
            if self._link is None:
                return None
        try:
            return self._link.stats()
        except ShmwheelError:
            self.close()
            raise

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()


# -- pickled Jobs (Job.__reduce__ -> its owner's reduce -> restore) ----------------------
class Ended:
    """The owner of a Job that needs no pool: it was unpickled with its outcome, or could
    not reach its pool (`error`: cancel() and stop() raise it; pickled again, it is a
    pending job for whoever unpickles it)."""

    def __init__(self, where: tuple[str, int, int], error: ShmwheelError | None) -> None:
        self.where, self.error = where, error

    def cancel(self, job: Job, stop: bool) -> bool:
        if self.error is not None:
            raise self.error
        return job.cancelled()

    def reduce(self, job: Job) -> tuple[Any, ...]:
        done = None if self.error is not None else outcome_of(job)
        return (restore, (*self.where, job.id, job.name, done))


_same: weakref.WeakValueDictionary[tuple[int, int], Job] = weakref.WeakValueDictionary()
_links: dict[tuple[str, int], JobLink] = {}
_pid = [os.getpid()]
_registry_lock = threading.Lock()


def _mine() -> None:
    """Under the registry lock: forget what a parent process held (a fork's copy)."""
    if _pid[0] != os.getpid():
        _pid[0] = os.getpid()
        _same.clear()
        _links.clear()


def remember(token: int, job: Job) -> None:
    """`job` (of pool instance `token`) is pickled here: unpickled here, it is itself."""
    with _registry_lock:
        _mine()
        _same[(token, job.id)] = job


def outcome_of(job: Job) -> tuple[int, str, Any]:
    """An ended job's outcome as it pickles: (attempts, kind, value)."""
    if job.cancelled():
        return (job.attempts, "cancel", None)
    e = job.exception()
    return (job.attempts, "ok", job.result()) if e is None else (job.attempts, "error", e)


def _link_to(service: str, owner: int) -> JobLink:
    """Under the registry lock: this process's link to the pool of `service` held by
    process `owner`, connected at the first need (and again after it broke)."""
    link = _links.get((service, owner))
    if link is None or link._closed:
        if link is not None:
            link.close()
        link = _links[(service, owner)] = JobLink(service, owner)
    return link


def restore(
    service: str, owner: int, token: int, id: int, name: str, done: tuple[int, str, Any] | None
) -> Job:
    """A pickled Job in this process (Job.__reduce__): the Job itself if this process holds
    it; with `done`, a Job that has that outcome; else a Job bound to its pool over this
    process's link to it. When the pool cannot be reached (stopped, another user) or no
    longer keeps the outcome, the Job ends with a ShmwheelError that says why (result()
    raises it; cancel() and stop() raise it): unpickling itself never fails for that."""
    with _registry_lock:
        _mine()
        job = _same.get((token, id))
        if job is not None:
            return job
        link: JobLink | None = None
        error: ShmwheelError | None = None
        if done is None:
            try:
                link = _link_to(service, owner)
            except ShmwheelError as e:
                error = ShmwheelError(
                    f"job {id} of service {service!r} cannot reach its pool (the service or "
                    f"Executor has stopped, or is another user's): {e}"
                )
    if link is not None:
        job = link.watch(id, token, name)
    else:
        job = Job(Ended((service, owner, token), error), id, name, b"", b"", None, None)
        job._token, job.where = token, DONE
        if error is not None:
            job.set_exception(error)
        else:
            assert done is not None
            job.attempts, kind, value = done
            job._end(kind, value)
    with _registry_lock:
        return _same.setdefault((token, id), job)
