"""The shared-memory encodings, as Python sees them.

The one definition is ``shmwheel/native/contract.h``; the native core exports each of its
constants and this module re-exports them, with accessor pairs for the packed words
(handle, state word, side-record meta), so that no Python code re-derives a shift or a
mask. Read contract.h for what each word means; slots.h for the state machine.
"""

from __future__ import annotations

from typing import Any, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from .. import _native as N
from . import states as _states

# -- wheel header words, node fields ---------------------------------------------------
H_MAGIC, H_VERSION, H_CAPACITY, H_LEVELS = N.H_MAGIC, N.H_VERSION, N.H_CAPACITY, N.H_LEVELS
H_WHEEL, H_SLOTS, H_WORDS, H_TICK, H_NOW = N.H_WHEEL, N.H_SLOTS, N.H_WORDS, N.H_TICK, N.H_NOW
H_FREE, H_PENDING, H_OFF_TICKS, H_OFF_BEXP = N.H_FREE, N.H_PENDING, N.H_OFF_TICKS, N.H_OFF_BEXP
H_OFF_BITS, H_OFF_NODES, H_TOTAL, H_SENTINELS = (
    N.H_OFF_BITS,
    N.H_OFF_NODES,
    N.H_TOTAL,
    N.H_SENTINELS,
)
WHEEL_HEADER_WORDS, WHEEL_MAGIC, WHEEL_LAYOUT_VERSION = (
    N.WHEEL_HEADER_WORDS,
    N.WHEEL_MAGIC,
    N.WHEEL_LAYOUT_VERSION,
)
NODE_WORDS, F_NEXT, F_PREV, F_DEADLINE, F_GS = (
    N.NODE_WORDS,
    N.F_NEXT,
    N.F_PREV,
    N.F_DEADLINE,
    N.F_GS,
)
NO_TIME, NEVER = N.NO_TIME, N.NEVER
INS_ALREADY_DUE, INS_OUT_OF_RANGE, INS_NO_SLOT = (
    N.INS_ALREADY_DUE,
    N.INS_OUT_OF_RANGE,
    N.INS_NO_SLOT,
)

# -- slot states -------------------------------------------------------------------------
ST_FREE, ST_PENDING, ST_FIRING, ST_RESERVED = N.ST_FREE, N.ST_PENDING, N.ST_FIRING, N.ST_RESERVED
ST_SUBMITTED, ST_CANCELLED, ST_STOPPING = N.ST_SUBMITTED, N.ST_CANCELLED, N.ST_STOPPING
ST_COMPLETED, ST_RESETTING, ST_COUNT = N.ST_COMPLETED, N.ST_RESETTING, N.ST_COUNT
STATE_NAMES = _states.NAMES  # value -> name, from contract.h's SLOT_STATES
CANCEL_LOST, CANCEL_WON, CANCEL_STOPPED = N.CANCEL_LOST, N.CANCEL_WON, N.CANCEL_STOPPED
RESET_LOST, RESET_WON = N.RESET_LOST, N.RESET_WON

# -- side records, payloads, arena ---------------------------------------------------------
SIDE_WORDS, S_META, S_PAYLOAD = N.SIDE_WORDS, N.S_META, N.S_PAYLOAD
FLAG_KEY, FLAG_ARENA, FLAG_REPEAT = N.FLAG_KEY, N.FLAG_ARENA, N.FLAG_REPEAT
REPEAT_HEADER, INLINE_MAX, NIL_INLINE, MAX_PAYLOAD = (
    N.REPEAT_HEADER,
    N.INLINE_MAX,
    N.NIL_INLINE,
    N.MAX_PAYLOAD,
)
ARENA_CLASSES = N.ARENA_CLASSES
ARENA_CLASS_BYTES = tuple(64 << (2 * c) for c in range(ARENA_CLASSES))
assert ARENA_CLASS_BYTES[-1] == MAX_PAYLOAD, "contract.h's ARENA_CLASS_BYTES changed"
A_CLASS_WORDS, A_NBLOCKS, A_FREE = N.A_CLASS_WORDS, N.A_NBLOCKS, N.A_FREE
A_OFF_NEXT, A_OFF_OWNER, A_DATA, A_BLOCK_WORDS = (
    N.A_OFF_NEXT,
    N.A_OFF_OWNER,
    N.A_DATA,
    N.A_BLOCK_WORDS,
)

# -- rings, records, outcomes, counters, histogram ------------------------------------------
RING_HEAD, RING_TAIL, RING_HEADER_WORDS = N.RING_HEAD, N.RING_TAIL, N.RING_HEADER_WORDS
PRODUCER_RECORD, DISPATCH_RECORD, RESULT_RECORD = (
    N.PRODUCER_RECORD,
    N.DISPATCH_RECORD,
    N.RESULT_RECORD,
)
CHECK_SUBMIT, CHECK_CANCEL, CHECK_RESET = N.CHECK_SUBMIT, N.CHECK_CANCEL, N.CHECK_RESET
OUTCOME_OK, OUTCOME_ERROR, OUTCOME_CRASHED = N.OUTCOME_OK, N.OUTCOME_ERROR, N.OUTCOME_CRASHED
COUNTER_WORDS = N.COUNTER_WORDS
C_SCHEDULED, C_FIRED, C_CANCELLED, C_COMPLETED = (
    N.C_SCHEDULED,
    N.C_FIRED,
    N.C_CANCELLED,
    N.C_COMPLETED,
)
C_ERRORS, C_CRASHED, C_GARBAGE, C_STALE = N.C_ERRORS, N.C_CRASHED, N.C_GARBAGE, N.C_STALE
C_REARMED, C_EARLY, C_LINKED, C_FREED, C_RETIRED = (
    N.C_REARMED,
    N.C_EARLY,
    N.C_LINKED,
    N.C_FREED,
    N.C_RETIRED,
)
C_JOURNAL_BYTES, C_JOURNAL_SYNCS = N.C_JOURNAL_BYTES, N.C_JOURNAL_SYNCS
C_RESETS = N.C_RESETS
C_OPS_COMPLETED, C_OPS_WATCHED, C_OPS_EXPIRED = (
    N.C_OPS_COMPLETED,
    N.C_OPS_WATCHED,
    N.C_OPS_EXPIRED,
)

# -- the purgatory and the outcomes (purgatory.c) ---------------------------------------------
FLAG_OP, FLAG_COMPLETED, TASK_NONE, OP_HEADER = (
    N.FLAG_OP,
    N.FLAG_COMPLETED,
    N.TASK_NONE,
    N.OP_HEADER,
)
OC_CANCELLED, OC_TASK_MASK, OC_COMPLETED, OC_EXPIRED = (
    N.OC_CANCELLED,
    N.OC_TASK_MASK,
    N.OC_COMPLETED,
    N.OC_EXPIRED,
)
OUTQ_RECORD, OUTQ_DROPPED = N.OUTQ_RECORD, N.OUTQ_DROPPED
WT_FREE = N.WT_FREE
WT_HEADER, WT_NBUCKETS, WT_CAPACITY, WT_USED, WT_PURGED = (
    N.WT_HEADER,
    N.WT_NBUCKETS,
    N.WT_CAPACITY,
    N.WT_USED,
    N.WT_PURGED,
)
WE_WORDS, WE_KEY, WE_HANDLE, WE_NEXT = N.WE_WORDS, N.WE_KEY, N.WE_HANDLE, N.WE_NEXT
# the outcomes with nothing per slot (purgatory.c, waiters.c): OC_NONE, an operation's
# count in its block header, the waiter table's shape
OC_NONE, OPH_COUNT, WE_BLOCK = N.OC_NONE, N.OPH_COUNT, N.WE_BLOCK
WAIT_HEADER, WA_NBUCKETS, WA_REFUSED = N.WAIT_HEADER, N.WA_NBUCKETS, N.WA_REFUSED
WAIT_WAYS, WAIT_BUCKET_WORDS = N.WAIT_WAYS, N.WAIT_BUCKET_WORDS
JOURNAL_WINDOW = N.JOURNAL_WINDOW
HIST_BUCKETS, HIST_PER_OCTAVE = N.HIST_BUCKETS, N.HIST_PER_OCTAVE

_SLOT_MASK = N.HANDLE_SLOT_MASK
_GEN_SHIFT, _GEN_MASK, _STATE_MASK = N.GS_GEN_SHIFT, N.GS_GEN_MASK, N.GS_STATE_MASK


# -- accessor pairs (they work on ints and, elementwise, on int64 arrays) --------------------
# A word or an array of words: each accessor returns what it was given (an int for an int,
# an int64 array for an array), which a constrained type variable says exactly.
Words = TypeVar("Words", int, NDArray[np.int64])


def handle_slot(h: Words) -> Words:
    """The slot a handle names (int or array)."""
    return h & _SLOT_MASK


def handle_gen(h: Words) -> Words:
    return (h >> _GEN_SHIFT) & _GEN_MASK


def gs_make(gen: Words, state: int) -> Words:
    """A state word."""
    return ((gen & _GEN_MASK) << _GEN_SHIFT) | state


def gs_state(gs: Words) -> Words:
    return gs & _STATE_MASK


def gs_gen(gs: Words) -> Words:
    return (gs >> _GEN_SHIFT) & _GEN_MASK


def gs_from(gs: Words) -> Words:
    """RESETTING: the state the reset took the slot from."""
    return (gs >> N.GS_FROM_SHIFT) & N.GS_FROM_MASK


def gs_aux(gs: Words) -> Words:
    """Outside RESETTING the reset sequence; during it, the holder's ring."""
    return (gs >> N.GS_AUX_SHIFT) & N.GS_AUX_MASK


def gs_handle(gs: Words, slot: Words) -> Words:
    """The handle of `slot` whose state word is `gs`."""
    return (gs & (_GEN_MASK << _GEN_SHIFT)) | slot


@overload
def meta_make(task: int, flags: int, cls: int, length: int, ring: int) -> int: ...
@overload
def meta_make(
    task: NDArray[np.int64],
    flags: NDArray[np.int64] | int,
    cls: NDArray[np.int64] | int,
    length: NDArray[np.int64] | int,
    ring: NDArray[np.int64] | int,
) -> NDArray[np.int64]: ...
def meta_make(task: Any, flags: Any, cls: Any, length: Any, ring: Any) -> Any:
    """A side record's meta word (contract.h's META_MAKE); with an array of tasks, the
    array of meta words (the other fields are ints or arrays, broadcast)."""
    return (
        ((task & N.META_TASK_MASK) << N.META_TASK_SHIFT)
        | ((flags & N.META_FLAGS_MASK) << N.META_FLAGS_SHIFT)
        | ((cls & N.META_CLASS_MASK) << N.META_CLASS_SHIFT)
        | ((length & N.META_LEN_MASK) << N.META_LEN_SHIFT)
        | ((ring & N.META_RING_MASK) << N.META_RING_SHIFT)
    )


def meta_task(m: Words) -> Words:
    return (m >> N.META_TASK_SHIFT) & N.META_TASK_MASK


def meta_flags(m: Words) -> Words:
    return (m >> N.META_FLAGS_SHIFT) & N.META_FLAGS_MASK


def meta_class(m: Words) -> Words:
    return (m >> N.META_CLASS_SHIFT) & N.META_CLASS_MASK


def meta_length(m: Words) -> Words:
    return (m >> N.META_LEN_SHIFT) & N.META_LEN_MASK


def meta_ring(m: Words) -> Words:
    return (m >> N.META_RING_SHIFT) & N.META_RING_MASK


def op_header(required: int, on_complete: int, nkeys: int) -> int:
    """An operation's block header word (contract.h's OPH_MAKE)."""
    return (
        (required & N.OPH_REQUIRED_MASK)
        | ((on_complete & 0xFFFF) << N.OPH_TASK_SHIFT)
        | ((nkeys & 0x7FFF) << N.OPH_NKEYS_SHIFT)
    )


def out_gen(w: Words) -> Words:
    """The generation of an outcome word (OUT_MAKE: a free slot's last outcome)."""
    return (w >> _GEN_SHIFT) & _GEN_MASK


def out_code(w: Words) -> Words:
    """The outcome code of an outcome word: OUTCOME_* or OC_CANCELLED, with OC_COMPLETED
    or OC_EXPIRED for an operation; OC_NONE for a use that ended without one."""
    return w & 0xFF


def inline_word(blob: bytes) -> int:
    """The payload word of a blob of at most INLINE_MAX bytes (little-endian, as the
    native core copies it)."""
    return int.from_bytes(blob.ljust(8, b"\0"), "little", signed=True)


def ring_words(capacity: int, record: int) -> int:
    """Words of a ring of `capacity` records (a power of two >= 2)."""
    if capacity < 2 or capacity & (capacity - 1):
        raise ValueError(f"ring capacity must be a power of two >= 2, got {capacity}")
    return RING_HEADER_WORDS + capacity * record


def as_int64(value: int) -> np.int64:
    """An unsigned 64-bit constant (a magic) as the int64 a word holds."""
    return np.int64(np.uint64(value & (2**64 - 1)).view(np.int64))
