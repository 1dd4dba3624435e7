"""The client's side of the job link (wire.py): ``Client.submit`` sends a registered task
to its service's job pool and gets a ``Job`` back whose outcome the pool reports. Runs in
the caller's process: one connection per Client, opened at the first submit (or the
first ``Client.stats()``), and one daemon thread that reads the pool's reports and settles
the jobs. ``StatsReader`` reads the pool's ``stats()`` over a link of its own for the
tools that watch a service without a Client (``shmwheel status`` / ``top``, the metrics
collector).
"""

from __future__ import annotations

import itertools
import socket
import threading
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
        self.service = service
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

    def _ask(self, msg: list[Any]) -> list[Any]:
        with self._lock:
            if self._closed:
                raise ShmwheelError(f"the job link to service {self.service!r} is closed")
            req = msg[1] = next(self._reqs)
        try:
            self.sock.sendall(wire.frame(msg))
        except OSError as e:
            raise ShmwheelError(f"service {self.service!r}: the job link broke ({e})") from None
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
        outcome = msg[3]
        if job.done():
            return
        if outcome == "ok":
            job.set_result(msg[4])
        elif outcome == "cancelled":
            job._cancel_future()
        else:
            job.set_exception(wire.decode_error(job.id, job.attempts, job.name, msg[4]))

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
