"""Compiled kernels of the shared-memory service: the wheel core's entry table extended
with a side table (task, payload, repeat) and a payload arena, and the state machine of
one timer slot across processes.

Slot states (low byte of the wheel node's gen/state word)::

    FREE --reserve--> RESERVED --client writes record--> SUBMITTED --coordinator links--> PENDING
    PENDING --reaper advances--> DUE --executor outcome, one-shot--> FREE (generation + 1)
    DUE --outcome of a repeating timer--> PENDING (same handle, next deadline)
    PENDING / SUBMITTED --cancel--> FREE (generation + 1): the task will never run

Every transition except RESERVED -> SUBMITTED (done by the one client that owns the
slot) runs under the segment lock, so a cancel and a fire that race have exactly one
winner: whichever takes the lock first sees PENDING.  Nothing here trusts a value read
from shared memory: every index and generation is bounds-checked, and a record that
fails a check is counted and skipped.

Side record per slot (2 int64 words, so a timer costs 32 + 16 bytes of tables): ``meta`` =
task | flags << 16 | arena class << 24 | payload length << 32 | producer ring << 48;
``payload`` = up to 8 inline bytes or an arena block index. A repeating timer keeps its
period and run count in the first two words of its arena block (``REPEAT_HEADER`` bytes
before the payload); a one-shot timer's run count is 1.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..wheel import kernels as K
from ..wheel.kernels import F_DEADLINE, F_GS, H_CAPACITY, H_NOW, H_PENDING, H_SENTINELS, H_TICK

RESERVED = 3
SUBMITTED = 4

SIDE_WORDS = 2
S_META = 0
S_PAYLOAD = 1
OWNER_SHIFT = 48
OWNER_BITS = np.int64(0xFFFF) << 48

FLAG_KEY = 1     # the blob is msgpack [key, payload]
FLAG_ARENA = 2   # the payload lives in an arena block
FLAG_STOP = 4    # a repeating timer was cancelled while a run was in flight
FLAG_REPEAT = 8  # the arena block starts with (period, runs): see REPEAT_HEADER
REPEAT_HEADER = 16

ARENA_CLASSES = (64, 256, 1024, 4096)  # block bytes per size class
NCLASSES = len(ARENA_CLASSES)
A_NBLOCKS = 0
A_FREE = 1
A_OFF_NEXT = 2
A_OFF_OWNER = 3
A_DATA = 4          # word offset of the class's blocks in the arena data
A_BLOCK_WORDS = 5   # block size in words
A_CLASS_WORDS = 8

CHECK_KEY = np.int64(0x5A17C0DE3A11F00D)  # producer record = (handle, handle ^ CHECK_KEY)

OUTCOME_OK = 1
OUTCOME_ERROR = 2
OUTCOME_CRASHED = 3

CANCEL_NO = 0
CANCEL_YES = 1
CANCEL_STOPPED = 2  # repeating timer with a run in flight: no further runs

_STATE = np.int64(0xFF)


@njit(cache=True, inline="always")
def _gs_index(mem, slot):
    return K._at(mem, mem[H_SENTINELS] + slot, F_GS)


@njit(cache=True, inline="always")
def _check(mem, handle, state):
    """The slot a handle names if it is in range, of the handle's generation and in
    `state`; else -1."""
    slot = handle & K.SLOT_MASK
    if handle < 0 or slot >= mem[H_CAPACITY]:
        return -1
    gs = mem[_gs_index(mem, slot)]
    if (gs >> 32) != (handle >> 32) or (gs & _STATE) != state:
        return -1
    return slot


@njit(cache=True, inline="always")
def _owner(side, slot):
    return (side[slot * SIDE_WORDS + S_META] >> OWNER_SHIFT) & 0xFFFF


@njit(cache=True, inline="always")
def _repeat_block(side, arena, slot):
    """Word offset in the arena data of a repeating timer's block, or -1 if the slot is
    one-shot or its block reference does not check out."""
    meta = side[slot * SIDE_WORDS + S_META]
    if not (meta >> 16) & FLAG_REPEAT or not (meta >> 16) & FLAG_ARENA:
        return -1
    c = (meta >> 24) & 0xFF
    if c >= NCLASSES:
        return -1
    base = c * A_CLASS_WORDS
    b = side[slot * SIDE_WORDS + S_PAYLOAD]
    if not 0 <= b < arena[base + A_NBLOCKS] or arena[arena[base + A_OFF_OWNER] + b] != slot + 1:
        return -1
    return arena[base + A_DATA] + b * arena[base + A_BLOCK_WORDS]


@njit(cache=True)
def arena_alloc(arena, cls, slot):
    """Pop a block of size class `cls` for `slot`; -1 when the class is exhausted."""
    base = cls * A_CLASS_WORDS
    b = arena[base + A_FREE]
    if b < 0:
        return -1
    arena[base + A_FREE] = arena[arena[base + A_OFF_NEXT] + b]
    arena[arena[base + A_OFF_OWNER] + b] = slot + 1
    return b


@njit(cache=True)
def arena_format(arena):
    """Every block of every class free; the header words (counts, offsets) must be set."""
    for c in range(NCLASSES):
        base = c * A_CLASS_WORDS
        arena[base + A_FREE] = -1
        for b in range(arena[base + A_NBLOCKS] - 1, -1, -1):
            arena[arena[base + A_OFF_OWNER] + b] = 0
            arena[arena[base + A_OFF_NEXT] + b] = arena[base + A_FREE]
            arena[base + A_FREE] = b


@njit(cache=True, inline="always")
def _free_payload(side, arena, slot):
    """Return the slot's arena block, if it validly holds one, and clear its side record."""
    i = slot * SIDE_WORDS
    meta = side[i + S_META]
    if (meta >> 16) & FLAG_ARENA:
        c = (meta >> 24) & 0xFF
        b = side[i + S_PAYLOAD]
        if c < NCLASSES:
            base = c * A_CLASS_WORDS
            owner = arena[base + A_OFF_OWNER]
            if 0 <= b < arena[base + A_NBLOCKS] and arena[owner + b] == slot + 1:
                arena[owner + b] = 0
                arena[arena[base + A_OFF_NEXT] + b] = arena[base + A_FREE]
                arena[base + A_FREE] = b
    side[i + S_META] &= OWNER_BITS  # a RESERVED slot stays its ring's


@njit(cache=True)
def free_payload(side, arena, slot):
    """Return a RESERVED slot's arena block (an aborted schedule)."""
    _free_payload(side, arena, slot)


@njit(cache=True, inline="always")
def _retire(mem, side, arena, slot):
    _free_payload(side, arena, slot)
    K._free(mem, slot)


@njit(cache=True, inline="always")
def _link_due_or_place(mem, node, deadline):
    """Link a node by its deadline; one already due joins the current level-0 bucket, which
    the next advance flushes first."""
    tick = mem[H_TICK]
    r = K._ceil_to(deadline, tick)
    now = mem[H_NOW]
    if r <= now:
        b = (now // tick) % mem[K.H_SLOTS]
        K._link(mem, b, node)
        K._announce(mem, b, now)
        return 0
    return K._place(mem, node, r)


@njit(cache=True)
def reserve(mem, side, ring, out):
    """Pop up to len(out) free slots for producer `ring`, writing their handles to out.
    Returns the count (fewer when the wheel is full)."""
    nb = mem[H_SENTINELS]
    n = 0
    while n < out.shape[0]:
        slot = mem[K.H_FREE]
        if slot < 0:
            break
        node = nb + slot
        mem[K.H_FREE] = mem[K._at(mem, node, K.F_NEXT)]
        ig = K._at(mem, node, F_GS)
        gen = mem[ig] >> 32
        mem[ig] = (gen << 32) | RESERVED
        side[slot * SIDE_WORDS + S_META] = np.int64(ring) << OWNER_SHIFT
        out[n] = (gen << 32) | slot
        n += 1
    return n


@njit(cache=True)
def link_submitted(mem, side, arena, recs, n, ring, res):
    """Link the slots named by n producer records (handle, check) of `ring`.

    res[0] += linked, res[1] += stale (well-formed, but the slot was cancelled or already
    linked), res[2] += garbage (bad check, index, owner or range: skipped, and a slot it
    names that is SUBMITTED by this ring is freed). res[3] = earliest deadline linked."""
    nb = mem[H_SENTINELS]
    cap = mem[H_CAPACITY]
    top = mem[K.H_LEVELS] - 1
    ttop = mem[mem[K.H_OFF_TICKS] + top]
    limit = (mem[H_NOW] // ttop) * ttop + ttop * mem[K.H_WHEEL]
    for j in range(n):
        h = recs[2 * j]
        if recs[2 * j + 1] != (h ^ CHECK_KEY):
            res[2] += 1
            continue
        slot = h & K.SLOT_MASK
        if h < 0 or slot >= cap or _owner(side, slot) != ring:
            res[2] += 1
            continue
        if _check(mem, h, SUBMITTED) < 0:
            res[1] += 1
            continue
        node = nb + slot
        deadline = mem[K._at(mem, node, F_DEADLINE)]
        if K._ceil_to(deadline, mem[H_TICK]) >= limit:
            _retire(mem, side, arena, slot)
            res[2] += 1
            continue
        ig = K._at(mem, node, F_GS)
        mem[ig] = (mem[ig] & ~_STATE) | K.PENDING
        _link_due_or_place(mem, node, deadline)
        mem[H_PENDING] += 1
        res[0] += 1
        if deadline < res[3]:
            res[3] = deadline
    return res[0]


@njit(cache=True, inline="always")
def _cancel(mem, side, arena, h):
    slot = _check(mem, h, K.PENDING)
    if slot >= 0:
        K._unlink(mem, mem[H_SENTINELS] + slot)
        mem[H_PENDING] -= 1
        _retire(mem, side, arena, slot)
        return CANCEL_YES
    slot = _check(mem, h, SUBMITTED)
    if slot >= 0:
        _retire(mem, side, arena, slot)
        return CANCEL_YES
    slot = _check(mem, h, K.DUE)
    if slot >= 0:
        m = slot * SIDE_WORDS + S_META
        flags = side[m] >> 16
        if flags & FLAG_REPEAT and not flags & FLAG_STOP:
            side[m] |= np.int64(FLAG_STOP) << 16
            return CANCEL_STOPPED
    return CANCEL_NO


@njit(cache=True)
def cancel_one(mem, side, arena, handle):
    """Cancel one handle: CANCEL_YES if the timer will never run (its slot is freed now),
    CANCEL_STOPPED if it is a repeating timer with a run in flight (no further runs), else
    CANCEL_NO."""
    return _cancel(mem, side, arena, handle)


@njit(cache=True)
def cancel_handles(mem, side, arena, handles, out):
    """cancel_one for each handle, codes into out; returns the number of CANCEL_YES."""
    n = 0
    for i in range(handles.shape[0]):
        out[i] = _cancel(mem, side, arena, handles[i])
        n += out[i] == CANCEL_YES
    return n


@njit(cache=True)
def settle(mem, side, arena, adata, results, n, res):
    """Apply n executor outcomes (handle, outcome, seq, _): a one-shot timer's slot is
    freed; a repeating one that ran (ok or error) and was not cancelled is linked again at
    its next deadline after the clock, with its run count (in its arena block, `adata`)
    bumped. Idempotent: a record whose slot is no longer DUE of that generation is
    ignored. res[0] += freed, res[1] += re-armed."""
    nb = mem[H_SENTINELS]
    now = mem[H_NOW]
    for j in range(n):
        h = results[4 * j]
        slot = _check(mem, h, K.DUE)
        if slot < 0:
            continue
        stop = (side[slot * SIDE_WORDS + S_META] >> 16) & FLAG_STOP
        w = _repeat_block(side, arena, slot)
        every = adata[w] if w >= 0 else 0
        if every > 0 and stop == 0 and results[4 * j + 1] != OUTCOME_CRASHED:
            node = nb + slot
            d = mem[K._at(mem, node, F_DEADLINE)] + every
            if d <= now:
                d += ((now - d) // every + 1) * every
            mem[K._at(mem, node, F_DEADLINE)] = d
            adata[w + 1] += 1
            ig = K._at(mem, node, F_GS)
            mem[ig] = (mem[ig] & ~_STATE) | K.PENDING
            _link_due_or_place(mem, node, d)
            mem[H_PENDING] += 1
            res[1] += 1
        else:
            _retire(mem, side, arena, slot)
            res[0] += 1
    return res[0]


@njit(cache=True)
def slots_in_state(mem, state, owner, side, out):
    """Slots in `state` (and owned by producer ring `owner` when owner >= 0), written to
    out; returns the count (at most len(out))."""
    n = 0
    nb = mem[H_SENTINELS]
    for s in range(mem[H_CAPACITY]):
        if (mem[K._at(mem, nb + s, F_GS)] & _STATE) != state:
            continue
        if owner >= 0 and _owner(side, s) != owner:
            continue
        if n == out.shape[0]:
            break
        out[n] = s
        n += 1
    return n


@njit(cache=True)
def reclaim(mem, side, arena, ring):
    """Free every slot that producer `ring` reserved or submitted but that was never linked
    (its client is gone and its ring was drained). Returns the count freed."""
    n = 0
    nb = mem[H_SENTINELS]
    for s in range(mem[H_CAPACITY]):
        st = mem[K._at(mem, nb + s, F_GS)] & _STATE
        if (st == RESERVED or st == SUBMITTED) and _owner(side, s) == ring:
            _retire(mem, side, arena, s)
            n += 1
    return n


@njit(cache=True)
def rebuild(mem, side, arena):
    """Repair after a lock holder died mid-update: the slot states are the truth. Bucket
    lists, bitmaps, the free stack, the pending count and the arena free stacks are rebuilt;
    PENDING slots are relinked by deadline. Returns the number relinked."""
    nb = mem[H_SENTINELS]
    for b in range(nb):
        mem[K._at(mem, b, K.F_NEXT)] = b
        mem[K._at(mem, b, K.F_PREV)] = b
        mem[mem[K.H_OFF_BEXP] + b] = K.NO_TIME
    ob = mem[K.H_OFF_BITS]
    for w in range(mem[K.H_LEVELS] * mem[K.H_WORDS]):
        mem[ob + w] = 0
    mem[K.H_FREE] = -1
    mem[H_PENDING] = 0
    cap = mem[H_CAPACITY]
    for c in range(NCLASSES):
        base = c * A_CLASS_WORDS
        for b in range(arena[base + A_NBLOCKS]):
            arena[arena[base + A_OFF_OWNER] + b] = 0
    linked = 0
    for s in range(cap - 1, -1, -1):
        node = nb + s
        ig = K._at(mem, node, F_GS)
        st = mem[ig] & _STATE
        if st == K.FREE or st > SUBMITTED:
            mem[ig] = (mem[ig] & ~_STATE) | K.FREE
            side[s * SIDE_WORDS + S_META] = 0
            mem[K._at(mem, node, K.F_NEXT)] = mem[K.H_FREE]
            mem[K._at(mem, node, K.F_PREV)] = -1
            mem[K.H_FREE] = s
            continue
        i = s * SIDE_WORDS
        meta = side[i + S_META]
        if (meta >> 16) & FLAG_ARENA:  # re-own the block this slot names
            c = (meta >> 24) & 0xFF
            b = side[i + S_PAYLOAD]
            if c < NCLASSES and 0 <= b < arena[c * A_CLASS_WORDS + A_NBLOCKS]:
                arena[arena[c * A_CLASS_WORDS + A_OFF_OWNER] + b] = s + 1
        if st == K.PENDING:
            _link_due_or_place(mem, node, mem[K._at(mem, node, F_DEADLINE)])
            mem[H_PENDING] += 1
            linked += 1
    for c in range(NCLASSES):
        base = c * A_CLASS_WORDS
        arena[base + A_FREE] = -1
        for b in range(arena[base + A_NBLOCKS] - 1, -1, -1):
            if arena[arena[base + A_OFF_OWNER] + b] == 0:
                arena[arena[base + A_OFF_NEXT] + b] = arena[base + A_FREE]
                arena[base + A_FREE] = b
    return linked
