"""The job link's encoding: frames between a ``Client`` (link.py) and the job pool of
its service (remote.py), over a Unix stream socket in the abstract namespace named after
the service. A frame is a 4-byte big-endian length and a msgpack array; both ends check
the other's credentials (``SO_PEERCRED``): the same user, and the client also that the
server is the service's supervisor (the segment's owner pid).

Requests (client -> pool): ``[SUBMIT, req, task, payload_blob, delay_ms, limit_ms, retry]``
with ``retry`` None or ``[attempts, backoff, factor, max_backoff, jitter, [names]]``;
``[CANCEL, req, job, stop]``; ``[STATS, req]``; ``[EXPORT, req, job]`` (a job of this
connection is being pickled: keep its outcome once it ends); ``[WATCH, req, job, token]``
(a pickled job unpickled: report its attempts and outcome here; `token` is the pool
instance it was pickled from). Replies and reports (pool -> client):
``[ACCEPTED, req, job, token]``, ``[REFUSED, req, text]``, ``[ANSWER, req, value]`` (a bool
to a CANCEL or an EXPORT, the pool's ``stats()`` dict to a STATS, ``[state, attempts]`` or
``["gone", text]`` to a WATCH), ``[RUNNING, job, attempt]``, ``[DONE, job, attempts,
outcome, ...]`` with outcome "ok" and the value, "cancelled", "error" and ``[kind, text,
type_name, message, traceback, limit, killed]``, or "pickled" and the pickled
``(kind, value)`` (an Executor job's outcome, to a WATCH).
"""

from __future__ import annotations

import builtins
import pickle
import socket
import struct
from typing import Any

import msgpack

from ... import errors
from .retry import Retry

SUBMIT, CANCEL, ACCEPTED, REFUSED, ANSWER, RUNNING, DONE, STATS, EXPORT, WATCH = range(10)
HEAD = struct.Struct("!I")
MAX_FRAME = 64 << 20
_unpack = msgpack.Unpacker


def address(service: str) -> str:
    return f"\0shmwheel.{service}.jobs"


def frame(msg: list[Any]) -> bytes:
    blob: bytes = msgpack.packb(msg, use_bin_type=True)
    return HEAD.pack(len(blob)) + blob


def frames(buf: bytearray) -> list[list[Any]]:
    """The whole frames at the start of `buf` (removed from it)."""
    out, off = [], 0
    while len(buf) - off >= 4:
        (n,) = HEAD.unpack_from(buf, off)
        if n > MAX_FRAME:
            raise ValueError(f"a job link frame of {n} bytes is over {MAX_FRAME}")
        if len(buf) - off - 4 < n:
            break
        out.append(msgpack.unpackb(bytes(buf[off + 4 : off + 4 + n]), raw=False))
        off += 4 + n
    del buf[:off]
    return out


def peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end."""
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


# the exceptions Retry.on may name over the link: builtins and shmwheel's own (a pool
# never imports a module a client names)
def encode_retry(retry: Retry | None) -> list[Any] | None:
    if retry is None:
        return None
    names = []
    for kind in retry.on:
        if getattr(builtins, kind.__name__, None) is kind:
            names.append(kind.__name__)
        elif getattr(errors, kind.__name__, None) is kind:
            names.append(f"shmwheel.{kind.__name__}")
        else:
            raise ValueError(
                f"Client.submit's retry may name builtin exceptions and shmwheel's errors "
                f"only (a job's own exception class is matched by Executor jobs): {kind!r}"
            )
    return [retry.attempts, retry.backoff, retry.factor, retry.max_backoff, retry.jitter, names]


def decode_retry(fields: list[Any] | None) -> Retry | None:
    if fields is None:
        return None
    attempts, backoff, factor, max_backoff, jitter, names = fields
    kinds = []
    for name in names:
        source, _, short = name.rpartition(".")
        kind = getattr(errors if source == "shmwheel" else builtins, short, None)
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise ValueError(f"retry.on names {name!r}, not an exception class")
        kinds.append(kind)
    return Retry(attempts, backoff=backoff, factor=factor, max_backoff=max_backoff,
                 jitter=jitter, on=tuple(kinds))  # fmt: skip


def encode_error(e: BaseException) -> list[Any]:
    if isinstance(e, errors.TaskError):
        kind = "timeout" if isinstance(e, errors.JobTimeout) else "task"
        return [kind, str(e), e.type_name, e.message, e.traceback,
                getattr(e, "limit", None), getattr(e, "killed", False)]  # fmt: skip
    return ["service", str(e), None, None, None, None, False]


def decode_error(job: int, attempts: int, task: str, fields: list[Any]) -> BaseException:
    kind, text, type_name, message, tb, limit, killed = fields
    if kind == "service":
        return errors.ShmwheelError(text)
    cls = errors.JobTimeout if kind == "timeout" else errors.TaskError
    err = cls(text, id=job, run=attempts, task=task, type_name=type_name, message=message,
              traceback=tb)  # fmt: skip
    if isinstance(err, errors.JobTimeout):
        err.limit, err.killed = limit, killed
    return err


def done_frame(job: Any, pickled: bool) -> bytes:
    """`job`'s outcome (its future is done) as a DONE frame: msgpack values for a task
    submitted over the link (`pickled` False: ``Client.submit``'s contract), else the
    pickled ``(kind, value)`` so that an Executor job's value and exception come back as
    they are."""
    head: list[Any] = [DONE, job.id, job.attempts]
    if job.cancelled():
        return frame([*head, "cancelled"])
    e = job.exception()
    if pickled:
        try:
            out = ("ok", job.result()) if e is None else ("error", e)
            return frame([*head, "pickled", pickle.dumps(out, protocol=5)])
        except Exception as bad:
            if e is None:
                e = errors.TaskError(f"job {job.id}'s result cannot be pickled: {bad}",
                                     id=job.id, run=job.attempts, task=job.name)  # fmt: skip
    elif e is None:
        try:
            return frame([*head, "ok", job.result()])
        except Exception as bad:
            e = errors.TaskError(f"job {job.id}'s result is not msgpack-encodable: {bad}",
                                 id=job.id, run=job.attempts, task=job.name)  # fmt: skip
    return frame([*head, "error", encode_error(e)])


def decode_done(job: Any, msg: list[Any]) -> tuple[str, Any]:
    """A DONE report's outcome for `job`: ("ok", value), ("cancel", None) or ("error", e)."""
    outcome = msg[3]
    if outcome == "ok":
        return "ok", msg[4]
    if outcome == "cancelled":
        return "cancel", None
    if outcome == "pickled":
        kind, value = pickle.loads(msg[4])  # from the service's own pool (peer checked)
        return kind, value
    return "error", decode_error(job.id, job.attempts, job.name, msg[4])
