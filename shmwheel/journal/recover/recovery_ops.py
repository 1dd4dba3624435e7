"""Recovery of the purgatory's operations (recovery.py does the timers; this module the
operations that ``scan.PendingOps`` collects from the WATCHED records, with the same rules).

An operation is pending after a whole-service crash when the journal holds its WATCHED
record and none of COMPLETED, EXPIRED or CANCELLED. It is re-armed in the slot and
generation its id names, with its timeout, tasks and payload, and watched again on its
keys (taken from its blob, msgpack [keys, payload]). What is not journaled: the amounts
signalled to it before the crash (a re-armed operation counts from zero), and the run of
a task of an operation decided (COMPLETED / EXPIRED) whose OUTCOME was not recorded (the
decision stands; its task is not run again). docs/journal.md says the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgpack
import numpy as np

from ... import _native as N
from ...errors import RecoveryError
from ...segment import contract as C
from ..scan import PendingOps

if TYPE_CHECKING:  # pragma: no cover
    from ...segment import layout as L

NO_RING = C.RING_NONE  # a re-armed timer or operation belongs to no client's ring


def store_block(mem: L.ServiceMemory, slot: int, data: bytes, what: str) -> tuple[int, int]:
    """An arena block of the smallest class that holds `data`, owned by `slot` and filled
    with it: (class, block); for the operations here and the timers (recovery.install).
    RecoveryError naming `what` when the arena is full."""
    tables = mem.bind_tables()
    for c in range(C.ARENA_CLASSES):
        if len(data) <= C.ARENA_CLASS_BYTES[c] and (b := tables.arena_alloc(c, slot)) >= 0:
            mem.arena_block(c, b)[: len(data)] = np.frombuffer(data, np.uint8)
            return c, b
    raise RecoveryError(
        f"the payload arena cannot hold the journal's pending {what}: start the service "
        f"with a larger arena_bytes"
    )


def install_ops(mem: L.ServiceMemory, pending: PendingOps, taken: np.ndarray) -> np.ndarray:
    """Write the pending operations into the fresh segment (after the timers, whose slots
    are `taken`) and watch them on their keys; returns their handles. Raises
    RecoveryError when this service cannot hold them."""
    ops = pending.pending()
    if not ops:
        return np.empty(0, np.int64)
    cap, tables = mem.config.capacity, mem.bind_tables()
    busy = set(C.handle_slot(taken).tolist())
    handles = []
    for h, (deadline, required, on_complete, on_expire, blob) in sorted(ops.items()):
        slot = int(C.handle_slot(h))
        if slot >= cap or slot in busy:
            raise RecoveryError(
                f"the journal's operation {h:#x} needs slot {slot}: start the service with "
                f"capacity >= {slot + 1}"
                if slot >= cap
                else f"the journal is corrupt: two pending entries in slot {slot}"
            )
        busy.add(slot)
        tids = []
        for t in (on_complete, on_expire):
            if t is not None and t not in mem.task_ids:
                raise RecoveryError(
                    f"the journal's operation {h:#x} runs task {t!r}, which this service "
                    f"does not register"
                )
            tids.append(C.TASK_NONE if t is None else mem.task_ids[t])
        keys = msgpack.unpackb(blob)[0]
        data = C.op_header_bytes(required, tids[0], len(keys)) + blob
        c, b = store_block(mem, slot, data, "operations")
        meta = C.meta_make(tids[1], C.FLAG_OP | C.FLAG_ARENA, c, len(blob), NO_RING)
        tables.install(*(np.array([v], np.int64) for v in (h, deadline, meta, b)))
        handles.append(h)
    tables.rebuild()  # links them (and threads the free stacks around them)
    for h in handles:
        keys = msgpack.unpackb(ops[h][4])[0]
        ids = np.unique(np.array([N.key_id(k) for k in keys], np.int64))  # the watch's key ids
        if tables.watch_add(h, ids) < 0:
            raise RecoveryError(
                "the watch lists cannot hold the journal's pending operations: start the "
                "service with a larger watch_capacity"
            )
    return np.array(handles, np.int64)
