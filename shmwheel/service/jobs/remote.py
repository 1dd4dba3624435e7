"""The pool's side of the job link (wire.py): ``Client.submit`` from any process of the
service's user reaches the job pool here. Runs on the pool's manager thread, which waits
on the listening socket and every connection with the workers' pipes.

Each request is answered in order; a job's outcome is reported to the connection that
submitted it, from the thread that sets it. A connection that goes away leaves its jobs
running (their outcomes are dropped). Only a peer of this user is served.
"""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgpack

from ...segment import trust
from . import wire
from . import worker as W
from .job import Job


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
        import threading

        self.sock, self.inbuf, self.out = sock, bytearray(), bytearray()
        self.lock = threading.Lock()


class Listener:
    """The job link's server, submitting through `submit` and answering STATS with
    `stats()`: `tasks` maps the service's task names to their specs; `watch(sock, data,
    write)` / `unwatch(sock)` are the manager's selector."""

    def __init__(
        self,
        submit: Submit,
        service: str,
        tasks: Mapping[str, str],
        watch: Callable[[socket.socket, Any, bool], None],
        unwatch: Callable[[socket.socket], None],
        stats: Callable[[], dict[str, Any]],
    ) -> None:
        self.submit, self.tasks, self.stats = submit, dict(tasks), stats
        self.watch, self.unwatch = watch, unwatch
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
        self.jobs: dict[int, Job] = {}  # submitted here and not yet done
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
                job.on_start = functools.partial(self._started, conn)
                self.jobs[job.id] = job
                self._send(conn, [wire.ACCEPTED, req, job.id])
                job.add_done_callback(functools.partial(self._report, conn))
            elif msg[0] == wire.CANCEL:
                _, req, job_id, stop = msg
                found = self.jobs.get(job_id)
                ok = found is not None and (found.stop() if stop else found.cancel())
                self._send(conn, [wire.ANSWER, req, bool(ok)])
            elif msg[0] == wire.STATS:
                self._send(conn, [wire.ANSWER, msg[1], self.stats()])
        except Exception as e:
            self._send(conn, [wire.REFUSED, msg[1] if len(msg) > 1 else -1, f"{e}"])

    def _started(self, conn: Conn, job: Job) -> None:
        self._send(conn, [wire.RUNNING, job.id, job.attempts])

    def _report(self, conn: Conn, job: Any) -> None:
        self.jobs.pop(job.id, None)
        head = [wire.DONE, job.id, job.attempts]
        if job.cancelled():
            self._send(conn, [*head, "cancelled"])
            return
        e = job.exception()
        if e is None:
            try:
                msgpack.packb(job.result(), use_bin_type=True)
                self._send(conn, [*head, "ok", job.result()])
                return
            except Exception as bad:
                from ...errors import TaskError

                e = TaskError(f"job {job.id}'s result is not msgpack-encodable: {bad}",
                              id=job.id, run=job.attempts, task=job.name)  # fmt: skip
        self._send(conn, [*head, "error", wire.encode_error(e)])

    def _send(self, conn: Conn, msg: list[Any]) -> None:
        with conn.lock:
            conn.out += wire.frame(msg)
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
        self.unwatch(conn.sock)
        conn.sock.close()
