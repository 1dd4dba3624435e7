"""The service's own invariants, checked over its tables (slow: tests and crash repair).

``verify(mem)`` raises ``AssertionError`` naming the first broken rule:

* the wheel's structure holds (``WheelCore.verify``): buckets, bitmaps, the free stack, the
  linked count;
* every slot is in exactly one place for its state: FREE on the free stack; PENDING linked
  in a bucket; CANCELLED linked or waiting for its record; COMPLETED (an operation) linked
  or waiting for its submit record; RESETTING (held by a reset) linked iff it was taken
  from PENDING, else owned like SUBMITTED; a slot a reset moved may sit in its old
  deadline's bucket until its reset record is drained; FIRING/STOPPING in exactly one
  of the reaper's backlog, a dispatch ring (queued or running), or a result ring
  (reported); RESERVED/SUBMITTED owned by a client ring that exists;
* arena blocks are owned exactly as the side records say: a free block is on its class's
  free stack once, a slot's block names the slot back, a cached block names a ring;
* with ``quiescent=True`` (nothing in flight, every ring drained): no slot is FIRING,
  STOPPING, SUBMITTED, CANCELLED, COMPLETED or RESETTING, fired timers all have outcomes,
  and every cancel that won was retired.

``backlog`` is the reaper's private list of fired handles not yet dispatched; without it
(from another process) FIRING slots may also be in the reaper's hands, and only "at most
one place" is checked for them.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

import numpy as np

from ..wheel.core import WheelCore
from . import contract as C
from .ring import Ring


class _ConfigShape(Protocol):
    @property
    def capacity(self) -> int: ...
    @property
    def max_clients(self) -> int: ...


class MemoryShape(Protocol):
    """What verify reads of a service's memory (``layout.ServiceMemory`` is one: named by
    its shape here, so that layout, which verifies after a repair, is not imported back)."""

    @property
    def config(self) -> _ConfigShape: ...
    @property
    def wheel(self) -> np.ndarray: ...
    @property
    def side(self) -> np.ndarray: ...
    @property
    def arena(self) -> np.ndarray: ...
    @property
    def counters(self) -> np.ndarray: ...
    @property
    def watch(self) -> np.ndarray: ...
    @property
    def producer(self) -> list[Ring]: ...
    @property
    def dispatch(self) -> list[Ring]: ...
    @property
    def results(self) -> list[Ring]: ...
    def nodes(self) -> np.ndarray: ...


def _states(mem: MemoryShape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nodes = mem.nodes()
    gs = nodes[:, C.F_GS].copy()
    return C.gs_state(gs), gs, nodes[:, C.F_PREV].copy()


def _last_reported(mem: MemoryShape, i: int) -> int:
    """The dispatch seq of executor i's last published outcome (-1 if none)."""
    results = mem.results[i]
    return int(results.record_at(results.head - 1)[C.RR_SEQ]) if results.head > 0 else -1


def held_places(mem: MemoryShape) -> list[tuple[str, np.ndarray]]:
    """Handles held in each shared place of a FIRING slot: dispatch rings (records not yet
    reported, nor taken over by the reaper: ring.h) and result rings (reported, not yet
    settled)."""
    places = []
    for i, ring in enumerate(mem.dispatch):
        tail, n = ring.tail, ring.pending()
        seqs = tail + np.arange(n)
        recs = ring.data[seqs & ring.mask]
        mine = (seqs > _last_reported(mem, i)) & (
            C.dr_claim(recs[:, C.DR_FIRED_NS]) != C.DR_CLAIM_TAKEN
        )
        held = recs[mine, C.DR_HANDLE].copy()
        places.append((f"dispatch{i}", held))
    for i, ring in enumerate(mem.results):
        places.append((f"results{i}", ring.column(C.RR_HANDLE)))
    return places


def firing_nowhere(mem: MemoryShape) -> np.ndarray:
    """Handles of FIRING/STOPPING slots held in no shared place: a dead reaper had them."""
    st, gs, _ = _states(mem)
    firing = np.flatnonzero((st == C.ST_FIRING) | (st == C.ST_STOPPING))
    if len(firing) == 0:
        return np.empty(0, np.int64)
    held = [h for _, hs in held_places(mem) for h in hs.tolist()]
    held_slots = C.handle_slot(np.array(held, np.int64)) if held else np.empty(0, np.int64)
    orphans = firing[~np.isin(firing, held_slots)]
    return C.gs_handle(gs[orphans], orphans)


def moved_by_reset(mem: MemoryShape) -> set[int]:
    """Slots whose deadline a reset may have changed without their bucket knowing yet:
    held RESETTING, or with a reset record (h, h ^ CHECK_RESET) still in a producer ring
    (the coordinator relinks it as it drains that record: slots.c); and CANCELLED ones, whose
    deadline no one reads again (a reset that lost to the cancel may have written it; the
    slot is retired wherever it is linked)."""
    st = _states(mem)[0]
    moved = set(np.flatnonzero((st == C.ST_RESETTING) | (st == C.ST_CANCELLED)).tolist())
    for ring in mem.producer:
        seqs = ring.tail + np.arange(ring.pending())
        recs = ring.data[seqs & ring.mask]
        resets = recs[:, C.PR_CHECK] == recs[:, C.PR_HANDLE] ^ C.CHECK_RESET
        moved.update(C.handle_slot(recs[resets, C.PR_HANDLE]).tolist())
    return moved


def verify(mem: MemoryShape, backlog: np.ndarray | None = None, quiescent: bool = False) -> None:
    """Check the service's invariants (see the module docstring); AssertionError if broken."""
    cfg = mem.config
    WheelCore.attach(mem.wheel).verify(moved=moved_by_reset(mem))
    st, gs, prev = _states(mem)
    assert (st < C.ST_COUNT).all(), f"slots in unknown states: {np.flatnonzero(st >= C.ST_COUNT)}"
    linked = prev != -1
    bad = np.flatnonzero((st == C.ST_PENDING) & ~linked)
    assert len(bad) == 0, f"PENDING slots not linked in a bucket: {bad[:10]}"
    linkable = (C.ST_PENDING, C.ST_CANCELLED, C.ST_COMPLETED, C.ST_RESETTING)
    bad = np.flatnonzero(linked & ~np.isin(st, linkable))
    assert len(bad) == 0, f"linked slots not PENDING/CANCELLED/COMPLETED/RESETTING: {bad[:10]}"
    # a held slot is linked iff the state it was taken from (its FROM) is PENDING
    held = st == C.ST_RESETTING
    bad = np.flatnonzero(held & (linked != (C.gs_from(gs) == C.ST_PENDING)))
    assert len(bad) == 0, f"RESETTING slots linked against their origin: {bad[:10]}"

    # FIRING / STOPPING: exactly one place each
    firing = (st == C.ST_FIRING) | (st == C.ST_STOPPING)
    seen: Counter[int] = Counter()
    places = held_places(mem)
    if backlog is not None:
        places.append(("backlog", np.asarray(backlog, np.int64)))
    for where, handles in places:
        for h in handles.tolist():
            slot = C.handle_slot(h)
            assert (
                0 <= slot < cfg.capacity and firing[slot] and C.gs_handle(int(gs[slot]), slot) == h
            ), f"{where} holds {h:#x}, which names no FIRING slot of that generation"
            seen[slot] += 1
    twice = [s for s, k in seen.items() if k > 1]
    assert not twice, f"FIRING slots in two places at once: {twice[:10]}"
    if backlog is not None or quiescent:
        nowhere = sorted(set(np.flatnonzero(firing).tolist()) - set(seen))
        assert not nowhere, f"FIRING slots in no place: {nowhere[:10]}"

    # client-owned slots
    meta = mem.side.reshape(-1, C.SIDE_WORDS)[:, C.S_META]
    owned = (st == C.ST_RESERVED) | (st == C.ST_SUBMITTED) | (held & ~linked)
    bad = np.flatnonzero(owned & (C.meta_ring(meta) >= cfg.max_clients))
    assert len(bad) == 0, f"client slots of no client ring: {bad[:10]}"

    _verify_arena(mem, st, meta)
    _verify_watch(mem, st, gs)

    if quiescent:
        for state in (
            C.ST_FIRING,
            C.ST_STOPPING,
            C.ST_SUBMITTED,
            C.ST_CANCELLED,
            C.ST_COMPLETED,
            C.ST_RESETTING,
        ):
            left = np.flatnonzero(st == state)
            assert len(left) == 0, f"quiescent, yet {C.STATE_NAMES[state]} slots: {left[:10]}"
        c = mem.counters.sum(axis=0)
        outcomes = int(c[C.C_COMPLETED] + c[C.C_ERRORS] + c[C.C_CRASHED])
        assert outcomes >= int(c[C.C_FIRED]), f"{int(c[C.C_FIRED])} fired, only {outcomes} outcomes"
        assert int(c[C.C_CANCELLED]) == int(c[C.C_RETIRED]), (
            f"{int(c[C.C_CANCELLED])} cancels won, {int(c[C.C_RETIRED])} retired"
        )


def _verify_watch(mem: MemoryShape, st: np.ndarray, gs: np.ndarray) -> None:
    """The watch lists: every entry in use is in exactly one chain, the one its key
    hashes to; the rest are on the free stack once; every live operation (RESERVED,
    SUBMITTED or PENDING with FLAG_OP) has at least one entry."""
    wt = mem.watch
    nb, cap = int(wt[C.WT_NBUCKETS]), int(wt[C.WT_CAPACITY])
    entries = wt[C.WT_HEADER + nb : C.WT_HEADER + nb + cap * C.WE_WORDS].reshape(-1, C.WE_WORDS)
    seen = np.zeros(cap, np.int64)
    heads = wt[C.WT_HEADER : C.WT_HEADER + nb]
    for b in np.flatnonzero(heads != -1).tolist():
        e, steps = int(heads[b]), 0
        while e >= 0:
            assert e < cap and steps <= cap, f"watch chain {b} leaves the table or loops"
            assert int(entries[e, C.WE_KEY]) % nb == b, f"watch entry {e} in chain {b}"
            assert entries[e, C.WE_HANDLE] >= 0, f"free watch entry {e} in chain {b}"
            seen[e] += 1
            e, steps = int(entries[e, C.WE_NEXT]), steps + 1
    assert (seen <= 1).all(), f"watch entries in two chains: {np.flatnonzero(seen > 1)[:10]}"
    assert int(seen.sum()) == int(wt[C.WT_USED]), (
        f"{int(seen.sum())} watch entries in chains, the header counts {int(wt[C.WT_USED])}"
    )
    e, free = int(wt[C.WT_FREE]), 0
    while e >= 0:
        assert e < cap and seen[e] == 0 and free <= cap, f"watch free stack is broken at {e}"
        seen[e] += 1
        free += 1
        e = int(entries[e, C.WE_NEXT])
    assert free + int(wt[C.WT_USED]) == cap, f"{free} free + {int(wt[C.WT_USED])} used != {cap}"
    meta = mem.side.reshape(-1, C.SIDE_WORDS)[:, C.S_META]
    ops = (C.meta_flags(meta) & C.FLAG_OP) != 0
    live = ops & ((st == C.ST_SUBMITTED) | (st == C.ST_PENDING))
    used = entries[entries[:, C.WE_HANDLE] >= 0, C.WE_HANDLE]
    watched = set(used.tolist())
    slots = np.flatnonzero(live)
    handles = C.gs_handle(gs[slots], slots)
    missing = [int(h) for h in handles.tolist() if h not in watched]
    assert not missing, f"live operations in no watch list: {[hex(h) for h in missing[:10]]}"


def _verify_arena(mem: MemoryShape, st: np.ndarray, meta: np.ndarray) -> None:
    a, cfg = mem.arena, mem.config
    payload = mem.side.reshape(-1, C.SIDE_WORDS)[:, C.S_PAYLOAD]
    uses_arena = (C.meta_flags(meta) & C.FLAG_ARENA) != 0
    in_use = (st != C.ST_FREE) & (st != C.ST_RESERVED) & uses_arena
    for c in range(C.ARENA_CLASSES):
        base = c * C.A_CLASS_WORDS
        nblocks = int(a[base + C.A_NBLOCKS])
        owner = a[int(a[base + C.A_OFF_OWNER]) : int(a[base + C.A_OFF_OWNER]) + nblocks]
        nxt = a[int(a[base + C.A_OFF_NEXT]) : int(a[base + C.A_OFF_NEXT]) + nblocks]
        free, b = set(), int(a[base + C.A_FREE])
        while b != -1:
            assert 0 <= b < nblocks and b not in free, f"class {c}: broken free stack at {b}"
            free.add(b)
            b = int(nxt[b])
        zero = set(np.flatnonzero(owner == 0).tolist())
        assert free == zero, (
            f"class {c}: free stack and unowned blocks differ ({sorted(free ^ zero)[:10]})"
        )
        rings = owner[owner < 0]
        assert ((-rings - 1) < cfg.max_clients).all(), f"class {c}: blocks of no client ring"
        for block in np.flatnonzero(owner > 0).tolist():
            slot = int(owner[block]) - 1
            assert 0 <= slot < cfg.capacity and st[slot] != C.ST_FREE, (
                f"class {c} block {block} is owned by slot {slot}, which is free"
            )
            if st[slot] != C.ST_RESERVED:
                assert (
                    uses_arena[slot]
                    and C.meta_class(int(meta[slot])) == c
                    and int(payload[slot]) == block
                ), f"class {c} block {block} is owned by slot {slot}, whose record says otherwise"
        mine = np.flatnonzero(in_use & (C.meta_class(meta) == c))
        for slot in mine.tolist():
            block = int(payload[slot])
            assert 0 <= block < nblocks and int(owner[block]) == slot + 1, (
                f"slot {slot} names class {c} block {block}, owned by {int(owner[block])}"
            )
