"""Kafka's purgatory across processes, the client's half: ``Client.watch`` and
``Client.check_and_complete`` (their bodies are here; the shared-memory side is
shmwheel/native/purgatory.c, whose header explains the design).

An operation is a timer slot: its timeout is the deadline, its on_expire task the slot's
task, its arena block holds (required, on_complete, key count) then msgpack [keys,
payload]. Watching writes the block and the watch entries under the segment lock while
the slot is still this client's (RESERVED), then submits it through the client's ring like
a schedule, so a signal that arrives before the coordinator links it is still counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from .. import _native as N
from ..errors import Full
from ..segment import contract as C
from ..segment import layout as L
from ..segment import payload as P
from .handles import _FutureLike

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client


def _check_delay(value: object, what: str, limit: int) -> float:
    from .client import _check_delay as check

    return check(value, what, limit)


MAX_KEYS = 0x7FFF
MAX_AMOUNT = 0xFFFFFFFF  # an operation's count saturates here


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
    msgpack encoding, so 1 and "1" and b"1" are different keys."""
    if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
        raise TypeError(f"a key must be a str, bytes or int, got {type(key).__name__}")
    try:
        blob: bytes = msgpack.packb(key)
    except OverflowError:
        raise ValueError(f"integer key {key!r} does not fit in 64 bits") from None
    return int(N.key_hash(blob))


def _task_or_none(client: Client, name: str | None, what: str) -> int:
    if name is None:
        return int(C.TASK_NONE)
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a task name (str) or None, got {type(name).__name__}")
    return client._task_id(name)


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    v = int(value)
    if not 1 <= v <= MAX_AMOUNT:
        raise ValueError(f"{what} must be between 1 and {MAX_AMOUNT}, got {v}")
    return v


def watch(
    client: Client,
    keys: Sequence[str | bytes | int],
    timeout_ms: float,
    on_complete: str | None,
    on_expire: str | None,
    payload: Any,
    required: int,
) -> Operation:
    """Client.watch (see its docstring)."""
    client._check()
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError("keys must be a sequence of keys (a list or tuple), not a single key")
    unique = list(dict.fromkeys(keys))  # a key named twice counts once
    if not unique:
        raise ValueError("an operation needs at least one key to be completed through")
    if len(unique) > MAX_KEYS:
        raise ValueError(f"an operation may watch at most {MAX_KEYS} keys, got {len(unique)}")
    ids = np.array([key_id(k) for k in unique], np.int64)
    ids = np.unique(ids)  # distinct keys with one id would count twice
    required = _count(required, "required")
    on_complete_id = _task_or_none(client, on_complete, "on_complete")
    on_expire_id = _task_or_none(client, on_expire, "on_expire")
    _check_delay(timeout_ms, "timeout_ms", client._max_delay)
    deadline = client._deadline(timeout_ms, None)
    try:
        blob: bytes = msgpack.packb([unique, payload])
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"payload cannot be encoded with msgpack: {e}") from None
    data = np.int64(C.op_header(required, on_complete_id, len(unique))).tobytes()
    data += bytes(C.OP_HEADER - 8) + blob
    if len(data) > C.MAX_PAYLOAD:
        raise ValueError(
            f"an operation's keys and payload encode to {len(blob)} bytes; at most "
            f"{C.MAX_PAYLOAD - C.OP_HEADER} fit: use fewer or shorter keys, or a smaller "
            f"payload"
        )
    mem = client._mem
    h = client._take_one()
    slot = C.handle_slot(h)
    tables = mem.bind_tables()
    with mem.locked():
        # the entries first: if the arena then has no block, retiring the slot (its
        # generation moves on) leaves them dead, and the next purge frees them
        if tables.watch_add(h, ids) < 0:
            tables.retire(slot)
            raise Full(
                f"the watch lists of service {client.name!r} are full "
                f"({mem.config.watch_capacity} entries, one per key of each live "
                f"operation): complete or cancel operations, or start the service with a "
                f"larger watch_capacity"
            )
        for cls in range(P.size_class(len(data)), C.ARENA_CLASSES):
            block = tables.arena_alloc(cls, slot)
            if block >= 0:
                break
        else:
            tables.retire(slot)
            raise Full(
                f"the payload arena has no free block for {len(data)} bytes: use smaller "
                f"payloads or start the service with a larger arena_bytes"
            )
        mem.arena_block(cls, block)[: len(data)] = np.frombuffer(data, np.uint8)
    meta = C.meta_make(on_expire_id, C.FLAG_OP | C.FLAG_ARENA, cls, len(blob), client.ring)
    if not client._submit(h, meta, block, deadline):
        client._wait_push(h, C.CHECK_SUBMIT)
    client._row[C.C_OPS_WATCHED] += 1
    if mem.header[L.W_COORD_SLEEPING]:
        client._bell()
    return Operation(client, h, deadline)


def check_and_complete(client: Client, key: str | bytes | int, amount: int) -> int:
    """Client.check_and_complete (see its docstring)."""
    client._check()
    kid = key_id(key)
    amount = _count(amount, "amount")
    mem = client._mem
    with mem.locked():
        done = int(mem.bind_tables().watch_signal(kid, amount))
    if done:
        client._row[C.C_OPS_COMPLETED] += done
        client._wake_reaper()  # they are due now: the reaper may be asleep till later
    return done
