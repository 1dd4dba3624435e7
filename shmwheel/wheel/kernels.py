"""Compiled kernels of the hierarchical timing wheel, over one flat int64 array.

Theory of operation
===================

The wheel is Kafka's (``kafka.utils.timer.TimingWheel``): level ``k`` has
``wheel_size`` (W) buckets of width ``tick_k = tick * W**k``; level ``k`` spans
``interval_k = tick_k * W`` and its tick is the interval of the level below.
Every level's current time is the wheel's current time ``now`` rounded down to
that level's tick.  An entry with rounded expiration ``r`` goes to the lowest
level ``k`` with ``r < now_k + interval_k`` (Kafka's ``add``), into the bucket
of virtual id ``v = r // tick_k``; the bucket's expiration is ``v * tick_k`` and
the bucket is *announced* (its occupied bit set) only when that value changes
(Kafka's ``TimerTaskList.setExpiration`` / ``DelayQueue.offer`` rule).

Storage
-------
All state lives in one int64 array ``mem`` (see ``wheel_core.layout``): a
header, per-level tick sizes, per-bucket expiration, per-level occupied
bitmaps, and the node table.  A node is one 32-byte record (next, prev,
deadline, ``gen << 32 | state``), so touching an entry costs one cache line.
A bucket is an intrusive circular doubly linked list whose sentinel is one of
the first ``B = levels * slots`` nodes; entry slot ``s`` is node ``B + s``.  Free slots form
a stack threaded through ``next``.  A handle is ``gen << 32 | slot``: the
generation is bumped whenever a slot is freed, so a stale handle never
touches a reused slot.  No Python object exists per entry, so the same bytes
can live in process memory or in a shared-memory segment.

Next-expiry discovery
---------------------
Kafka keeps a DelayQueue of buckets.  Here each level has an occupied bitmap
(as in Tokio's wheel): the earliest bucket of a level is the first set bit
scanning circularly from the level's current bucket, found a 64-bucket word at
a time with a de Bruijn count-trailing-zeros.  Empty buckets are never visited
and never ticked; finding the next expiry costs O(levels * slots / 64) word
reads, independent of how many entries are pending.

Never early
-----------
Deadlines are kept exact; placement uses ``r = ceil(deadline / tick) * tick``.
An entry is due only when ``r <= now`` and ``now`` only ever moves to times
that have passed, so nothing fires before its deadline; structural lateness is
below one tick.  (Kafka truncates to the tick and fires up to a tick early.)

Cascade without a stall
-----------------------
Kafka flushes a higher-level bucket when its expiration arrives and re-inserts
every entry under the timer's write lock, so a big bucket stalls the reaper.
Here every level has ``slots = 2 * W`` buckets, while Kafka's placement rule
still uses the W-bucket interval.  Level ``k`` can therefore hold virtual ids
``[c_k, c_k + 2W)`` without aliasing, which is room for the *next* bucket of
level ``k + 1`` (virtual id ``c_{k+1} + 1``) a whole ``tick_{k+1}`` before it
expires.  ``cascade_step`` moves entries of those eligible buckets one level
down in bounded batches while the clock is otherwise idle; ``advance`` forces
what is left of a bucket only if its expiration arrives first (overload).
Each entry is moved at most ``levels - 1`` times: O(1) expiry work per entry.

Invariants (checked by ``WheelCore.verify`` in the tests)
----------------------------------------------------------
* a bucket of level ``k >= 1`` with virtual id ``c_k`` is empty;
* every linked entry sits in the bucket its rounded deadline maps to;
* a bucket's bit is set iff its list is non-empty iff its expiration is set;
* ``pending`` equals the number of linked entries.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# -- header word indices (wheel_core.layout writes them) ----------------------
H_MAGIC = 0
H_VERSION = 1
H_CAPACITY = 2
H_LEVELS = 3
H_WHEEL = 4
H_SLOTS = 5
H_WORDS = 6
H_TICK = 7
H_NOW = 8
H_FREE = 9
H_PENDING = 10
H_OFF_TICKS = 11
H_OFF_BEXP = 12
H_OFF_BITS = 13
H_OFF_NODES = 14
H_TOTAL = 15
H_SENTINELS = 16
HEADER_WORDS = 32

# -- node record: 4 words per node; nodes [0, B) are bucket sentinels, B + slot an entry --
NODE_WORDS = 4
F_NEXT = 0
F_PREV = 1
F_DEADLINE = 2
F_GS = 3  # gen << 32 | state

# -- entry states (low 8 bits of the gen/state word) ---------------------------
FREE = 0
PENDING = 1
DUE = 2  # unlinked by advance, not yet released by the caller

# -- insert results besides a handle (>= 0) ------------------------------------
ALREADY_DUE = -1
OUT_OF_RANGE = -2
NO_SLOT = -3

NO_TIME = np.int64(-(2**63))
NEVER = np.int64(2**63 - 1)
GEN_MASK = 0x7FFFFFFF
SLOT_MASK = 0xFFFFFFFF

_ONE = np.int64(1)
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)


def _debruijn_table() -> np.ndarray:
    table = np.zeros(64, np.int64)
    for i in range(64):
        table[((1 << i) * 0x03F79D71B4CB0A89 % 2**64) >> 58] = i
    return table


_CTZ = _debruijn_table()


@njit(cache=True, inline="always")
def _ctz(x):
    """Index of the lowest set bit of a non-zero int64."""
    low = np.uint64(x & -x)
    return _CTZ[(low * _DEBRUIJN) >> np.uint64(58)]


@njit(cache=True, inline="always")
def _ceil_to(x, t):
    return -((-x) // t) * t


@njit(cache=True)
def _scan(mem, off, lo, hi):
    """First set bit in [lo, hi) of the bitmap at mem[off:], or -1."""
    if lo >= hi:
        return -1
    w = lo >> 6
    wend = (hi - 1) >> 6
    x = mem[off + w] & -(_ONE << (lo & 63))
    while True:
        if w == wend:
            r = hi & 63
            if r != 0:
                x &= (_ONE << r) - 1
            if x != 0:
                return (w << 6) + _ctz(x)
            return -1
        if x != 0:
            return (w << 6) + _ctz(x)
        w += 1
        x = mem[off + w]


@njit(cache=True)
def _first_occupied(mem, level, start):
    """First occupied bucket index of `level` circularly from `start`, or -1."""
    slots = mem[H_SLOTS]
    off = mem[H_OFF_BITS] + level * mem[H_WORDS]
    i = _scan(mem, off, start, slots)
    if i < 0:
        i = _scan(mem, off, 0, start)
    return i


@njit(cache=True, inline="always")
def _announce(mem, b, expiration):
    """Kafka's setExpiration: set the bucket's expiration; mark it occupied if it changed."""
    ob = mem[H_OFF_BEXP]
    if mem[ob + b] != expiration:
        mem[ob + b] = expiration
        slots = mem[H_SLOTS]
        level = b // slots
        idx = b - level * slots
        w = mem[H_OFF_BITS] + level * mem[H_WORDS] + (idx >> 6)
        mem[w] |= _ONE << (idx & 63)


@njit(cache=True, inline="always")
def _retire_bucket(mem, b):
    """An emptied bucket: expiration unset, occupied bit cleared."""
    mem[mem[H_OFF_BEXP] + b] = NO_TIME
    slots = mem[H_SLOTS]
    level = b // slots
    idx = b - level * slots
    w = mem[H_OFF_BITS] + level * mem[H_WORDS] + (idx >> 6)
    mem[w] &= ~(_ONE << (idx & 63))


@njit(cache=True, inline="always")
def _at(mem, node, field):
    """Index in mem of `field` of node `node` (records are NODE_WORDS words)."""
    return mem[H_OFF_NODES] + node * NODE_WORDS + field


@njit(cache=True, inline="always")
def _link(mem, b, node):
    """Append node at the tail of bucket b's circular list (FIFO within a bucket)."""
    tail = mem[_at(mem, b, F_PREV)]
    mem[_at(mem, node, F_PREV)] = tail
    mem[_at(mem, node, F_NEXT)] = b
    mem[_at(mem, tail, F_NEXT)] = node
    mem[_at(mem, b, F_PREV)] = node


@njit(cache=True, inline="always")
def _unlink(mem, node):
    """Remove node from its bucket; retire the bucket if that emptied it."""
    p = mem[_at(mem, node, F_PREV)]
    n = mem[_at(mem, node, F_NEXT)]
    mem[_at(mem, p, F_NEXT)] = n
    mem[_at(mem, n, F_PREV)] = p
    if p == n and p < mem[H_SENTINELS]:
        _retire_bucket(mem, p)


@njit(cache=True, inline="always")
def _place(mem, node, r):
    """Kafka's add for rounded expiration r > now: link into the lowest level that spans it.

    Returns the level, or OUT_OF_RANGE beyond the top level's interval."""
    now = mem[H_NOW]
    wheel = mem[H_WHEEL]
    slots = mem[H_SLOTS]
    ot = mem[H_OFF_TICKS]
    for k in range(mem[H_LEVELS]):
        tk = mem[ot + k]
        if r < (now // tk) * tk + tk * wheel:
            v = r // tk
            b = k * slots + v % slots
            _link(mem, b, node)
            _announce(mem, b, v * tk)
            return k
    return OUT_OF_RANGE


@njit(cache=True, inline="always")
def _free(mem, slot):
    """Return a slot to the free stack, bumping its generation (stales old handles)."""
    node = mem[H_SENTINELS] + slot
    ig = _at(mem, node, F_GS)
    gen = ((mem[ig] >> 32) + 1) & GEN_MASK
    mem[ig] = (gen << 32) | FREE
    mem[_at(mem, node, F_NEXT)] = mem[H_FREE]
    mem[_at(mem, node, F_PREV)] = -1
    mem[H_FREE] = slot


@njit(cache=True)
def reset(mem):
    """Empty wheel: every bucket empty, every slot free, clock unchanged."""
    nb = mem[H_SENTINELS]
    for b in range(nb):
        mem[_at(mem, b, F_NEXT)] = b
        mem[_at(mem, b, F_PREV)] = b
        mem[mem[H_OFF_BEXP] + b] = NO_TIME
    ob = mem[H_OFF_BITS]
    for w in range(mem[H_LEVELS] * mem[H_WORDS]):
        mem[ob + w] = 0
    mem[H_FREE] = -1
    mem[H_PENDING] = 0
    add_free_slots(mem, 0)


@njit(cache=True)
def add_free_slots(mem, first):
    """Push slots [first, capacity) onto the free stack, lowest slot on top."""
    nb = mem[H_SENTINELS]
    for s in range(mem[H_CAPACITY] - 1, first - 1, -1):
        node = nb + s
        mem[_at(mem, node, F_NEXT)] = mem[H_FREE]
        mem[_at(mem, node, F_PREV)] = -1
        mem[_at(mem, node, F_DEADLINE)] = 0
        mem[_at(mem, node, F_GS)] = FREE
        mem[H_FREE] = s


@njit(cache=True, inline="always")
def _insert(mem, deadline):
    """Allocate and place one entry: a handle, or ALREADY_DUE / OUT_OF_RANGE / NO_SLOT."""
    r = _ceil_to(deadline, mem[H_TICK])
    if r <= mem[H_NOW]:
        return ALREADY_DUE
    top = mem[H_LEVELS] - 1
    ttop = mem[mem[H_OFF_TICKS] + top]
    if r >= (mem[H_NOW] // ttop) * ttop + ttop * mem[H_WHEEL]:
        return OUT_OF_RANGE
    slot = mem[H_FREE]
    if slot < 0:
        return NO_SLOT
    node = mem[H_SENTINELS] + slot
    mem[H_FREE] = mem[_at(mem, node, F_NEXT)]
    ig = _at(mem, node, F_GS)
    gen = mem[ig] >> 32
    mem[ig] = (gen << 32) | PENDING
    mem[_at(mem, node, F_DEADLINE)] = deadline
    _place(mem, node, r)
    mem[H_PENDING] += 1
    return (gen << 32) | slot


@njit(cache=True, nogil=True)
def insert_one(mem, deadline):
    return _insert(mem, deadline)


@njit(cache=True, nogil=True)
def insert_batch(mem, deadlines, out):
    """Insert deadlines[i] for each i, writing a handle or ALREADY_DUE / OUT_OF_RANGE to out[i].

    Stops at the first entry for which no slot is free and returns how many
    were processed (== len(deadlines) when all were)."""
    for i in range(deadlines.shape[0]):
        h = _insert(mem, deadlines[i])
        if h == NO_SLOT:
            return i
        out[i] = h
    return deadlines.shape[0]


@njit(cache=True, inline="always")
def _cancel(mem, handle):
    slot = handle & SLOT_MASK
    if handle < 0 or slot >= mem[H_CAPACITY]:
        return False
    node = mem[H_SENTINELS] + slot
    gs = mem[_at(mem, node, F_GS)]
    if (gs >> 32) != (handle >> 32) or (gs & 0xFF) != PENDING:
        return False
    _unlink(mem, node)
    _free(mem, slot)
    mem[H_PENDING] -= 1
    return True


@njit(cache=True, nogil=True)
def cancel_one(mem, handle):
    """Unlink and free a pending entry: O(1), True iff the handle named a pending entry."""
    return _cancel(mem, handle)


@njit(cache=True, nogil=True)
def cancel_batch(mem, handles, out):
    """cancel_one for each handle; out[i] = 1 if cancelled. Returns the count cancelled."""
    n = 0
    for i in range(handles.shape[0]):
        ok = _cancel(mem, handles[i])
        out[i] = ok
        n += ok
    return n


@njit(cache=True)
def release_batch(mem, slots):
    """Free slots that advance emitted with release=False (state DUE)."""
    n = 0
    nb = mem[H_SENTINELS]
    for i in range(slots.shape[0]):
        s = slots[i]
        if 0 <= s < mem[H_CAPACITY] and (mem[_at(mem, nb + s, F_GS)] & 0xFF) == DUE:
            _free(mem, s)
            n += 1
    return n


@njit(cache=True)
def _earliest(mem, eligibility):
    """(time, level, index) of the earliest occupied bucket over all levels (level -1 when
    empty); ties go to the higher level, since a cascade must precede a fire at the same
    time. With `eligibility`, a higher level's time is the moment its bucket becomes
    eligible for pre-cascading: one tick of that level before it expires."""
    best_t = NEVER
    best_k = -1
    best_i = -1
    now = mem[H_NOW]
    slots = mem[H_SLOTS]
    ot = mem[H_OFF_TICKS]
    ob = mem[H_OFF_BEXP]
    for k in range(mem[H_LEVELS]):
        tk = mem[ot + k]
        if not eligibility and k > 0 and (now // tk + 1) * tk > best_t:
            break  # level k holds nothing before (c_k + 1) * tick_k, and higher levels later
        i = _first_occupied(mem, k, (now // tk) % slots)
        if i >= 0:
            t = mem[ob + k * slots + i]
            if eligibility and k > 0:
                t -= tk
            if t <= best_t:
                best_t = t
                best_k = k
                best_i = i
    return best_t, best_k, best_i


@njit(cache=True)
def next_wakeup(mem):
    """When the wheel next has work: a level-0 bucket to fire or a higher bucket to
    pre-cascade. Values <= now mean work is pending now; NEVER when empty."""
    return _earliest(mem, True)[0]


@njit(cache=True, inline="always")
def _cascade_bucket(mem, k, b, budget):
    """Move up to `budget` entries of level-k bucket b into level k-1. Returns the count."""
    slots = mem[H_SLOTS]
    tick = mem[H_TICK]
    tl = mem[mem[H_OFF_TICKS] + k - 1]
    moved = 0
    while moved < budget:
        node = mem[_at(mem, b, F_NEXT)]
        if node == b:
            break
        _unlink(mem, node)
        r = _ceil_to(mem[_at(mem, node, F_DEADLINE)], tick)
        v = r // tl
        lb = (k - 1) * slots + v % slots
        _link(mem, lb, node)
        _announce(mem, lb, v * tl)
        moved += 1
    return moved


@njit(cache=True, nogil=True)
def cascade_step(mem, budget):
    """Pre-cascade up to `budget` entries from each level's eligible bucket (virtual id c_k+1),
    top level first. Returns the number of entries moved."""
    moved = 0
    now = mem[H_NOW]
    slots = mem[H_SLOTS]
    ot = mem[H_OFF_TICKS]
    for k in range(mem[H_LEVELS] - 1, 0, -1):
        tk = mem[ot + k]
        b = k * slots + (now // tk + 1) % slots
        moved += _cascade_bucket(mem, k, b, budget - moved)
        if moved >= budget:
            break
    return moved


@njit(cache=True, nogil=True)
def advance(mem, now, out, release):
    """Advance the clock to `now` (rounded down to the tick), emitting due entries into `out`.

    Buckets are handled in expiration order; a higher-level bucket whose expiration has
    arrived is cascaded in full first (only under overload: cascade_step normally empties
    it earlier). Emitted slots are freed if `release`, else left in state DUE. If `out`
    fills up, the clock stops at the bucket being flushed and the count returned equals
    len(out): call again to continue. Returns the number of slots written."""
    tick = mem[H_TICK]
    target = (now // tick) * tick
    slots = mem[H_SLOTS]
    nb = mem[H_SENTINELS]
    cap = out.shape[0]
    count = 0
    while True:
        t, k, i = _earliest(mem, False)
        if k < 0 or t > target:
            break
        b = k * slots + i
        if k > 0:
            floor_t = t - mem[mem[H_OFF_TICKS] + k]
            if mem[H_NOW] < floor_t:
                mem[H_NOW] = floor_t
            _cascade_bucket(mem, k, b, NEVER)
            continue
        if mem[H_NOW] < t:
            mem[H_NOW] = t
        while True:
            node = mem[_at(mem, b, F_NEXT)]
            if node == b:
                break
            if count == cap:
                return count
            _unlink(mem, node)
            slot = node - nb
            mem[H_PENDING] -= 1
            if release:
                _free(mem, slot)
            else:
                ig = _at(mem, node, F_GS)
                mem[ig] = (mem[ig] & ~np.int64(0xFF)) | DUE
            out[count] = slot
            count += 1
    if mem[H_NOW] < target:
        mem[H_NOW] = target
    return count
