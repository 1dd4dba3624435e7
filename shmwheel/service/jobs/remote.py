"""The pool's side of the job link (wire.py): ``Client.submit`` from any process of the
service's user reaches the job pool here. Runs on the pool's manager thread, which waits
on the listening socket and every connection with the workers' pipes.

Each request is answered in order; a job's attempts and outcome are reported to the
connection that submitted it and to every connection that WATCHes it (a pickled Job
unpickled in another process: link.py, ``restore``), from the thread that sets it. A job
pickled before it ended has its outcome kept for a bounded time (``Kept``, below). A
connection that goes away leaves its jobs running (their outcomes are dropped). Only a
peer of this user is served.
"""

from __future__ import annotations

import collections
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ...segment import trust
from . import wire
from . import worker as W
from .job import Job
from .link import outcome_of, remember, restore

# how long, and how many, outcomes of jobs pickled before they ended are kept (``Kept``)
DEFAULT_TTL_S = 600.0
MAX_KEPT = 1024
MAX_KEPT_BYTES = 256 << 20


class Submit(Protocol):
    """The pool's submit, as the link calls it."""

    def __call__(
        self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], time_limit: float | None,
        retry: Any, delay_s: float = 0.0, name: str | None = None,
    ) -> Job: ...  # fmt: skip


log = logging.getLogger("shmwheel.jobs")


class Conn:
    """One client's connection: what it sent not yet whole, what is not yet sent."""

    __slots__ = ("sock", "inbuf", "out", "lock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.inbuf, self.out = sock, bytearray(), bytearray()
        self.lock = threading.Lock()


class Tracked:
    """A job the link reports on: the connections told of its attempts and outcome (its
    submitter's and every WATCH), whether its outcome is kept once it ends (it was
    pickled before it ended), and how its outcome travels (msgpack for a task submitted
    over the link, pickled otherwise: wire.done_frame)."""

    __slots__ = ("job", "conns", "kept", "pickled")

    def __init__(self, job: Job, pickled: bool) -> None:
        self.job, self.conns, self.kept, self.pickled = job, set[Conn](), False, pickled


class Listener:
    """The job link's server, submitting through `submit` and answering STATS with
    `stats()`: `tasks` maps the service's task names to their specs; `watch(sock, data,
    write)` / `unwatch(sock)` are the manager's selector. `ttl`: how long an outcome of a
    pickled job is kept (``Kept``, below). `token` names this pool instance in pickled jobs."""

    def __init__(
        self,
        submit: Submit,
        service: str,
        tasks: Mapping[str, str],
        watch: Callable[[socket.socket, Any, bool], None],
        unwatch: Callable[[socket.socket], None],
        stats: Callable[[], dict[str, Any]],
        ttl: float = DEFAULT_TTL_S,
    ) -> None:
        self.submit, self.tasks, self.stats = submit, dict(tasks), stats
        self.watch, self.unwatch = watch, unwatch
        self.service, self.owner, self.token = service, os.getpid(), secrets.randbits(62)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self.sock.bind(wire.address(service))
        except OSError as e:
            self.sock.close()
            from ...errors import ShmwheelError

            raise ShmwheelError(
                f"service {service!r}: the job link's address is taken ({e}): another "
                "process holds it"
            ) from None
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.conns: set[Conn] = set()
        # jobs reported on and not yet done; a done callback may run on any thread (a
        # caller's cancel), and add_done_callback on a done job runs it at once: reentrant
        self.lock = threading.RLock()
        self.jobs: dict[int, Tracked] = {}
        self.kept = Kept(ttl)
        watch(self.sock, ("l", None), False)

    def close(self) -> None:
        for c in list(self.conns):
            self._drop(c)
        self.unwatch(self.sock)
        self.sock.close()

    def accept(self) -> None:
        try:
            sock, _ = self.sock.accept()
        except (BlockingIOError, OSError):
            return
        _pid, uid = wire.peer(sock)
        if not trust.same_user(uid):
            log.warning("job link: refused a connection from uid %d", uid)
            sock.close()
            return
        sock.setblocking(False)
        conn = Conn(sock)
        self.conns.add(conn)
        self.watch(sock, ("c", conn), False)

    def readable(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.inbuf += data
        try:
            msgs = wire.frames(conn.inbuf)
        except Exception as e:
            log.warning("job link: a client sent a bad frame (%s): dropped", e)
            self._drop(conn)
            return
        for msg in msgs:
            self._request(conn, msg)

    def _request(self, conn: Conn, msg: list[Any]) -> None:
        try:
            if msg[0] == wire.SUBMIT:
                _, req, task, blob, delay_ms, limit_ms, retry = msg
                spec = self.tasks.get(task)
                if spec is None:
                    raise ValueError(f"unknown task {task!r}")
                job = self.submit(
                    W.run_task, (spec, blob), {},
                    None if limit_ms is None else limit_ms / 1000.0,
                    wire.decode_retry(retry), delay_s=delay_ms / 1000.0, name=task,
                )  # fmt: skip
                with self.lock:
                    self._send(conn, [wire.ACCEPTED, req, job.id, self.token])
                    self._track(job, False).conns.add(conn)
            elif msg[0] == wire.CANCEL:
                _, req, job_id, stop = msg
                with self.lock:
                    t = self.jobs.get(job_id)
                ok = t is not None and (t.job.stop() if stop else t.job.cancel())
                self._send(conn, [wire.ANSWER, req, bool(ok)])
            elif msg[0] == wire.STATS:
                self._send(conn, [wire.ANSWER, msg[1], self.stats()])
            elif msg[0] == wire.EXPORT:
                with self.lock:  # not found: its DONE report went out before this answer
                    t = self.jobs.get(msg[2])
                    if t is not None:
                        t.kept = True
                    self._send(conn, [wire.ANSWER, msg[1], t is not None])
            elif msg[0] == wire.WATCH:
                self._send(conn, [wire.ANSWER, msg[1], self._watch(conn, msg[2], msg[3])])
        except Exception as e:
            self._send(conn, [wire.REFUSED, msg[1] if len(msg) > 1 else -1, f"{e}"])

    def _watch(self, conn: Conn, job_id: int, token: int) -> list[Any]:
        """A pickled job unpickled at `conn`'s end: its state now, its outcome when it
        ends (sent before this answer if it has ended and is kept)."""
        if token != self.token:
            return ["gone", f"job {job_id} was pickled from another instance of service "
                    f"{self.service!r} (stopped and started again since): its outcome is "
                    "not in the running service"]  # fmt: skip
        with self.lock:
            t = self.jobs.get(job_id)
            if t is not None:
                t.conns.add(conn)
                return [t.job.where, t.job.attempts]
            frame = self.kept.get(job_id)
            if frame is None:
                return ["gone", gone_text(self.service, job_id, self.kept.ttl)]
            self._send_frame(conn, frame)
            return ["done", 0]

    def export(self, job: Job) -> bool:
        """`job` of this process's pool is being pickled: keep its outcome once it ends
        and report it to the copies that WATCH it. False when it has ended already (it
        pickles with its outcome)."""
        with self.lock:
            if job.done():
                return False
            self._track(job, True).kept = True
            return True

    def reduce(self, job: Job) -> tuple[Any, ...]:
        """How `job`, of this process's pool, pickles (link.restore)."""
        done = None if self.export(job) else outcome_of(job)
        remember(self.token, job)
        return (restore, (self.service, self.owner, self.token, job.id, job.name, done))

    def _track(self, job: Job, pickled: bool) -> Tracked:
        """Under the lock: `job`'s entry, made (with its start and done reports) if new."""
        t = self.jobs.get(job.id)
        if t is None:
            t = self.jobs[job.id] = Tracked(job, pickled)
            job.on_start = self._started
            job.add_done_callback(self._ended)
        return t

    def _started(self, job: Job) -> None:
        with self.lock:
            t = self.jobs.get(job.id)
            for conn in t.conns if t is not None else ():
                self._send(conn, [wire.RUNNING, job.id, job.attempts])

    def _ended(self, job: Any) -> None:
        with self.lock:
            t = self.jobs.pop(job.id, None)
            if t is None:
                return
            frame = wire.done_frame(job, t.pickled)
            for conn in t.conns:
                self._send_frame(conn, frame)
            if t.kept:
                self.kept.put(job.id, frame)

    def _send(self, conn: Conn, msg: list[Any]) -> None:
        self._send_frame(conn, wire.frame(msg))

    def _send_frame(self, conn: Conn, frame: bytes) -> None:
        with conn.lock:
            conn.out += frame
            self._flush(conn)

    def writable(self, conn: Conn) -> None:
        with conn.lock:
            self._flush(conn)

    def _flush(self, conn: Conn) -> None:
        try:
            n = conn.sock.send(conn.out)
        except BlockingIOError:
            n = 0
        except OSError:
            conn.out.clear()
            return
        del conn.out[:n]
        if conn in self.conns:
            self.watch(conn.sock, ("c", conn), bool(conn.out))

    def _drop(self, conn: Conn) -> None:
        self.conns.discard(conn)
        with self.lock:
            for t in self.jobs.values():
                t.conns.discard(conn)
        self.unwatch(conn.sock)
        conn.sock.close()


def gone_text(service: str, job: int, ttl: float) -> str:
    """What a copy of `job` unpickled after its outcome was dropped is told."""
    return (
        f"job {job} of service {service!r}: its outcome is no longer kept (a pool keeps the "
        f"outcome of a job pickled before it ended for {ttl:g} s after it ends, the newest "
        f"{MAX_KEPT} of them within {MAX_KEPT_BYTES >> 20} MiB; docs/api.md, Jobs)"
    )


class Kept:
    """Outcomes (DONE frames) of ended jobs that were pickled before they ended, for the
    copies unpickled later: each kept ``outcome_ttl`` s after its job ends (default
    ``DEFAULT_TTL_S``), the newest ``MAX_KEPT`` within ``MAX_KEPT_BYTES`` (the oldest go
    first). A job pickled after it ended carries its outcome and needs nothing kept; a copy
    unpickled after its outcome is gone gets a ShmwheelError that says so (``gone_text``)."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._items: collections.OrderedDict[int, tuple[float, bytes]] = collections.OrderedDict()
        self._bytes = 0

    def put(self, job: int, frame: bytes) -> None:
        self._items[job] = (time.monotonic(), frame)
        self._bytes += len(frame)
        self._trim()

    def get(self, job: int) -> bytes | None:
        self._trim()
        item = self._items.get(job)
        return None if item is None else item[1]

    def __len__(self) -> int:
        return len(self._items)

    def _trim(self) -> None:
        old = time.monotonic() - self.ttl
        items = self._items
        while items and (
            len(items) > MAX_KEPT
            or self._bytes > MAX_KEPT_BYTES
            or next(iter(items.values()))[0] < old
        ):
            _, (_, frame) = items.popitem(last=False)
            self._bytes -= len(frame)
