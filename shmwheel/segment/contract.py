"""The shared-memory encodings, as Python sees them.

The one definition is ``shmwheel/native/contract.h``: every constant there is exported by
the native core and taken here in one loop (``wheel/constants.py``, typed by its generated
stub), with the accessors of the packed words (handle, state word, side-record meta, an
operation's header, a block reference, an outcome word) and the builders of the block
headers, so that no Python code re-derives a shift or a mask. Read contract.h for what
each word means; slots.h for the state machine.
"""

from __future__ import annotations

from typing import Any, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from ..wheel.constants import *  # noqa: F403  (every constant of contract.h and journal.h)
from ..wheel.constants import (
    ARENA_CLASSES,
    BLOCK_REF_SHIFT,
    DR_CLAIM_SHIFT,
    GS_AUX_MASK,
    GS_AUX_SHIFT,
    GS_FROM_MASK,
    GS_FROM_SHIFT,
    GS_GEN_MASK,
    GS_GEN_SHIFT,
    GS_STATE_MASK,
    HANDLE_SLOT_MASK,
    MAX_PAYLOAD,
    META_CLASS_MASK,
    META_CLASS_SHIFT,
    META_FLAGS_MASK,
    META_FLAGS_SHIFT,
    META_LEN_MASK,
    META_LEN_SHIFT,
    META_RING_MASK,
    META_RING_SHIFT,
    META_TASK_MASK,
    META_TASK_SHIFT,
    OH_OPH,
    OP_HEADER,
    OP_MAX_AMOUNT,
    OP_MAX_KEYS,
    OPH_NKEYS_SHIFT,
    OPH_TASK_SHIFT,
    OUT_CODE_MASK,
    REPEAT_HEADER,
    RH_PERIOD,
    RH_RUNS,
    RING_HEADER_WORDS,
    ST_RESETTING,
)
from . import states as _states

STATE_NAMES = _states.NAMES  # value -> name, from contract.h's SLOT_STATES
ARENA_CLASS_BYTES = tuple(64 << (2 * c) for c in range(ARENA_CLASSES))
assert ARENA_CLASS_BYTES[-1] == MAX_PAYLOAD, "contract.h's ARENA_CLASS_BYTES changed"


# -- accessor pairs (they work on ints and, elementwise, on int64 arrays) --------------------
# A word or an array of words: each accessor returns what it was given (an int for an int,
# an int64 array for an array), which a constrained type variable says exactly.
Words = TypeVar("Words", int, NDArray[np.int64])


def handle_make(gen: Words, slot: Words) -> Words:
    """A handle: generation << 32 | slot (contract.h's HANDLE_MAKE)."""
    return ((gen & GS_GEN_MASK) << GS_GEN_SHIFT) | slot


def handle_slot(h: Words) -> Words:
    """The slot a handle names (int or array)."""
    return h & HANDLE_SLOT_MASK


def handle_gen(h: Words) -> Words:
    return (h >> GS_GEN_SHIFT) & GS_GEN_MASK


def gs_make(gen: Words, state: int, seq: int = 0) -> Words:
    """A state word (GS_MAKE; with `seq`, GS_MAKE_SEQ: the reset sequence)."""
    return ((gen & GS_GEN_MASK) << GS_GEN_SHIFT) | ((seq & GS_AUX_MASK) << GS_AUX_SHIFT) | state


def gs_make_hold(gen: int, origin: int, ring: int) -> int:
    """A RESETTING state word: the state it came from and the ring holding it
    (GS_MAKE_HOLD)."""
    held = ((origin & GS_FROM_MASK) << GS_FROM_SHIFT) | ((ring & GS_AUX_MASK) << GS_AUX_SHIFT)
    return gs_make(gen, ST_RESETTING) | held


def gs_state(gs: Words) -> Words:
    return gs & GS_STATE_MASK


def gs_gen(gs: Words) -> Words:
    return (gs >> GS_GEN_SHIFT) & GS_GEN_MASK


def gs_from(gs: Words) -> Words:
    """RESETTING: the state the reset took the slot from."""
    return (gs >> GS_FROM_SHIFT) & GS_FROM_MASK


def gs_aux(gs: Words) -> Words:
    """Outside RESETTING the reset sequence; during it, the holder's ring."""
    return (gs >> GS_AUX_SHIFT) & GS_AUX_MASK


def gs_handle(gs: Words, slot: Words) -> Words:
    """The handle of `slot` whose state word is `gs`."""
    return (gs & (GS_GEN_MASK << GS_GEN_SHIFT)) | slot


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
        ((task & META_TASK_MASK) << META_TASK_SHIFT)
        | ((flags & META_FLAGS_MASK) << META_FLAGS_SHIFT)
        | ((cls & META_CLASS_MASK) << META_CLASS_SHIFT)
        | ((length & META_LEN_MASK) << META_LEN_SHIFT)
        | ((ring & META_RING_MASK) << META_RING_SHIFT)
    )


def meta_task(m: Words) -> Words:
    return (m >> META_TASK_SHIFT) & META_TASK_MASK


def meta_flags(m: Words) -> Words:
    return (m >> META_FLAGS_SHIFT) & META_FLAGS_MASK


def meta_class(m: Words) -> Words:
    return (m >> META_CLASS_SHIFT) & META_CLASS_MASK


def meta_length(m: Words) -> Words:
    return (m >> META_LEN_SHIFT) & META_LEN_MASK


def meta_ring(m: Words) -> Words:
    return (m >> META_RING_SHIFT) & META_RING_MASK


def op_header(required: int, on_complete: int, nkeys: int) -> int:
    """An operation's block header word, OPH (contract.h's OPH_MAKE)."""
    return (
        (required & OP_MAX_AMOUNT)
        | ((on_complete & META_TASK_MASK) << OPH_TASK_SHIFT)
        | ((nkeys & OP_MAX_KEYS) << OPH_NKEYS_SHIFT)
    )


def oph_required(w: int) -> int:
    return w & OP_MAX_AMOUNT


def oph_task(w: int) -> int:
    return (w >> OPH_TASK_SHIFT) & META_TASK_MASK


def oph_nkeys(w: int) -> int:
    return (w >> OPH_NKEYS_SHIFT) & OP_MAX_KEYS


def op_header_bytes(required: int, on_complete: int, nkeys: int) -> bytes:
    """The OP_HEADER bytes an operation's block starts with (its OPH word, its count 0):
    the one Python builder of them (contract.h's op_block_header is C's)."""
    words = [0] * (OP_HEADER // 8)
    words[OH_OPH] = op_header(required, on_complete, nkeys)
    return np.array(words, "<i8").tobytes()


def repeat_header(period: int, runs: int = 1) -> bytes:
    """The REPEAT_HEADER bytes a repeating timer's block starts with (its period in ms,
    the run it is on): the one builder of them."""
    words = [0] * (REPEAT_HEADER // 8)
    words[RH_PERIOD], words[RH_RUNS] = period, runs
    return np.array(words, "<i8").tobytes()


def block_ref_make(cls: int, block: int) -> int:
    """A block named in one word, class << 32 | index (BLOCK_REF_MAKE; op_store's result)."""
    return (cls << BLOCK_REF_SHIFT) | block


def block_ref_class(ref: int) -> int:
    return ref >> BLOCK_REF_SHIFT


def block_ref_index(ref: int) -> int:
    return ref & ((1 << BLOCK_REF_SHIFT) - 1)


def out_make(gen: Words, code: int) -> Words:
    """An outcome word (OUT_MAKE): the generation that ended, its outcome code."""
    return ((gen & GS_GEN_MASK) << GS_GEN_SHIFT) | code


def out_gen(w: Words) -> Words:
    """The generation of an outcome word (OUT_MAKE: a free slot's last outcome)."""
    return (w >> GS_GEN_SHIFT) & GS_GEN_MASK


def out_code(w: Words) -> Words:
    """The outcome code of an outcome word: OUTCOME_* or OC_CANCELLED, with OC_COMPLETED
    or OC_EXPIRED for an operation; OC_NONE for a use that ended without one."""
    return w & OUT_CODE_MASK


def dr_claim(w: Words) -> Words:
    """Who claimed a dispatch record (its DR_FIRED_NS word, ring.h): 0 nobody yet,
    DR_CLAIM_RUN its executor, DR_CLAIM_TAKEN the reaper (taken from a stuck executor)."""
    return (w >> DR_CLAIM_SHIFT) & 3


def dr_fired_ns(w: Words) -> Words:
    """The fire time (monotonic ns) of a dispatch record's DR_FIRED_NS word."""
    return w & ((1 << DR_CLAIM_SHIFT) - 1)


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
