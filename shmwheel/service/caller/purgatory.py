"""Kafka's purgatory across processes, the client's half: ``Operation`` and the Python path
of ``Client.watch`` and ``Client.check_and_complete`` (``PurgatoryCalls``, a part of
``Client``: service/caller/client.py joins it with the others). Their common case runs natively
(shmwheel/native/watch.c); every other case comes here with the arguments as given, and
this path validates them and raises what the API promises. The shared-memory side is
shmwheel/native/purgatory.c, whose header explains the design.

An operation is a timer slot: its timeout is the deadline, its on_expire task the slot's
task, its arena block holds (required, on_complete, key count) then msgpack [keys,
payload]. Watching writes the block and the watch entries under the segment lock while
the slot is still this client's (RESERVED), then submits it through the client's ring like
a schedule, so a signal that arrives before the coordinator links it is still counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np

from ... import _native as N
from ...errors import Full
from ...segment import contract as C
from ...segment import layout as L
from ...segment import payload as P
from ...segment.clock import now_ms
from . import times as T
from .client_base import ClientBase
from .handles import _FutureLike

MAX_KEYS = C.OP_MAX_KEYS  # keys of one operation
MAX_AMOUNT = C.OP_MAX_AMOUNT  # an operation's count saturates here


class Operation(_FutureLike):
    """A delayed operation watched on keys: it completes once the amounts signalled on its
    keys (``Client.check_and_complete``, from any process) reach ``required``, or expires at
    its timeout; exactly one of the two, and then its ``on_complete`` or ``on_expire`` task
    runs once in the executor pool. Futures-like, as TimerHandle: ``result()`` gives
    "completed", "expired" or "cancelled". ``cancel()`` is True iff neither task will run.
    Compare equal by id; ``Client.operation(id)`` makes one from its id in any process."""

    __slots__ = ()
    _operation = True

    def __repr__(self) -> str:
        return (
            f"Operation(id={self.id:#x}, slot={C.handle_slot(self.id)}, "
            f"deadline_ms={self.deadline_ms})"
        )


def key_id(key: object) -> int:
    """The 64-bit id of a key in the watch lists (the same in every process): a hash of its
    msgpack encoding, so 1 and "1" and b"1" are different keys. TypeError for what is not
    a str, bytes or int, ValueError for an int beyond 64 bits. (The encoding is native,
    shmwheel/native/watch.c, the one the hot path uses.)"""
    return N.key_id(key)  # type: ignore[arg-type]


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    v = int(value)
    if not 1 <= v <= MAX_AMOUNT:
        raise ValueError(f"{what} must be between 1 and {MAX_AMOUNT}, got {v}")
    return v


class PurgatoryCalls(ClientBase):
    """The Python paths of ``Client.watch`` and ``Client.check_and_complete`` (the native
    paths, watch.c, call them with the arguments as given; their docstrings are there)."""

    def _watch_slow(
        self,
        keys: Sequence[str | bytes | int],
        timeout_ms: float,
        *,
        on_complete: str | None = None,
        on_expire: str | None = None,
        payload: Any = None,
        required: int = 1,
    ) -> Operation:
        self._check_accepting()
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
            raise TypeError("keys must be a sequence of keys (a list or tuple), not a single key")
        unique = list(dict.fromkeys(keys))  # a key named twice counts once
        if not unique:
            raise ValueError("an operation needs at least one key to be completed through")
        if len(unique) > MAX_KEYS:
            raise ValueError(f"an operation may watch at most {MAX_KEYS} keys, got {len(unique)}")
        ids = sorted({key_id(k) for k in unique})  # distinct keys with one id count once
        required = _count(required, "required")
        on_complete_id = self._task_or_none(on_complete, "on_complete")
        on_expire_id = self._task_or_none(on_expire, "on_expire")
        deadline = T.timeout_deadline(timeout_ms, self._max_delay)
        try:
            blob: bytes = msgpack.packb([unique, payload])
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(f"payload cannot be encoded with msgpack: {e}") from None
        P.decodable(blob)  # what the executor could not decode is refused here
        if len(blob) + C.OP_HEADER > C.MAX_PAYLOAD:
            raise ValueError(
                f"an operation's keys and payload encode to {len(blob)} bytes; at most "
                f"{C.MAX_PAYLOAD - C.OP_HEADER} fit: use fewer or shorter keys, or a smaller "
                f"payload"
            )
        data = C.op_header_bytes(required, on_complete_id, len(unique)) + blob
        mem = self._mem
        h = self._take_one()
        with mem.locked():
            # the entries, then the block; on a refusal the slot is retired (its generation
            # moves on), which leaves entries already added dead for the next purge
            where = self._tables().op_store(h, data, ids)
            if where < 0:
                self._tables().retire(C.handle_slot(h))
        if where == -1:
            raise Full(
                f"the watch lists of service {self.name!r} are full "
                f"({mem.config.watch_capacity} entries, one per key of each live "
                f"operation): complete or cancel operations, or start the service with a "
                f"larger watch_capacity"
            )
        if where < 0:
            raise self._arena_full(len(data))
        cls, block = C.block_ref_class(where), C.block_ref_index(where)
        meta = C.meta_make(on_expire_id, C.FLAG_OP | C.FLAG_ARENA, cls, len(blob), self.ring)
        self._publish_one(h, meta, block, deadline)
        self._row[C.C_OPS_WATCHED] += 1
        return Operation(self, h, deadline)

    def _check_and_complete_slow(self, key: str | bytes | int, amount: int = 1) -> int:
        self._check()
        kid = key_id(key)
        amount = _count(amount, "amount")
        mem = self._mem
        with mem.locked():
            done = int(self._tables().watch_signal(kid, amount))
        if done:
            self._row[C.C_OPS_COMPLETED] += done
            # they are due now: wake the reaper if it sleeps longer than its hot step (it
            # says when it wakes; service/processes/reaper.py, HOT_S)
            if mem.header[L.W_REAPER_WAKE_AT] > now_ms() + 1:
                self._wake_reaper()
        return done

    def _task_or_none(self, name: str | None, what: str) -> int:
        if name is None:
            return int(C.TASK_NONE)
        if not isinstance(name, str):
            raise TypeError(f"{what} must be a task name (str) or None, got {type(name).__name__}")
        return self._task_id(name)
