"""What a job pool keeps for the copies of its jobs in other processes (pickled Jobs: see
link.py, ``restore``): each outcome encoded as the link's DONE frame (wire.py), and the
outcomes of the jobs that were pickled before they ended, for a bounded time after.

The bound: a pool keeps the outcome of a job pickled while it was pending for
``outcome_ttl`` seconds after the job ends (default ``DEFAULT_TTL_S``), the newest
``MAX_KEPT`` such outcomes within ``MAX_KEPT_BYTES`` of frames (the oldest go first). A
job pickled after it ended carries its outcome in the pickle and needs nothing kept. A
copy unpickled after its outcome is gone gets a ``ShmwheelError`` that says so.
"""

from __future__ import annotations

import collections
import pickle
import time
from typing import Any

from ...errors import TaskError
from . import wire

DEFAULT_TTL_S = 600.0
MAX_KEPT = 1024
MAX_KEPT_BYTES = 256 << 20


def done_frame(job: Any, pickled: bool) -> bytes:
    """`job`'s outcome (its future is done) as a DONE frame: msgpack values for a task
    submitted over the link (`pickled` False: ``Client.submit``'s contract), else the
    pickled ``(kind, value)`` so that an Executor job's value and exception come back as
    they are."""
    head: list[Any] = [wire.DONE, job.id, job.attempts]
    if job.cancelled():
        return wire.frame([*head, "cancelled"])
    e = job.exception()
    if pickled:
        try:
            out = ("ok", job.result()) if e is None else ("error", e)
            return wire.frame([*head, "pickled", pickle.dumps(out, protocol=5)])
        except Exception as bad:
            if e is None:
                e = TaskError(f"job {job.id}'s result cannot be pickled: {bad}",
                              id=job.id, run=job.attempts, task=job.name)  # fmt: skip
    elif e is None:
        try:
            return wire.frame([*head, "ok", job.result()])
        except Exception as bad:
            e = TaskError(f"job {job.id}'s result is not msgpack-encodable: {bad}",
                          id=job.id, run=job.attempts, task=job.name)  # fmt: skip
    return wire.frame([*head, "error", wire.encode_error(e)])


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
    return "error", wire.decode_error(job.id, job.attempts, job.name, msg[4])


def gone_text(service: str, job: int, ttl: float) -> str:
    return (
        f"job {job} of service {service!r}: its outcome is no longer kept (a pool keeps the "
        f"outcome of a job pickled before it ended for {ttl:g} s after it ends, the newest "
        f"{MAX_KEPT} of them within {MAX_KEPT_BYTES >> 20} MiB; docs/api.md, Jobs)"
    )


class Kept:
    """Outcomes (DONE frames) of ended jobs that were pickled before they ended."""

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
