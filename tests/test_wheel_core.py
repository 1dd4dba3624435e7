import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmwheel import Full, LayoutError, WheelCore
from shmwheel.segment import contract as C
from shmwheel.wheel.core import WheelGeometry, wheel_layout, words_needed


def ceil_to(x, t):
    return -((-x) // t) * t


def test_insert_advance_cancel_roundtrip():
    c = WheelCore(1, 20, 0, 8)
    a, b, far = c.insert(5), c.insert(100), c.insert(100_000)
    assert c.size == 3
    c.verify()
    assert list(c.advance(4)) == []
    assert list(c.advance(5)) == [C.handle_slot(a)]
    assert c.cancel(b) and not c.cancel(b)
    assert not c.cancel(a), "a fired handle must not cancel"
    assert list(c.advance(99_999)) == []
    assert list(c.advance(100_000)) == [C.handle_slot(far)]
    assert c.size == 0
    c.verify()


def test_already_due_is_not_inserted_and_range_is_enforced():
    c = WheelCore(1, 4, 1000, 4, max_range=1000)
    assert c.insert(1000) == C.INS_ALREADY_DUE and c.insert(3) == C.INS_ALREADY_DUE
    assert c.size == 0
    limit = c.max_deadline()
    assert c.insert(limit - 1) >= 0
    with pytest.raises(ValueError, match="beyond the wheel's range"):
        c.insert(limit)
    codes = c.insert_many(np.array([limit, 999, 1001]))
    assert codes[0] == C.INS_OUT_OF_RANGE and codes[1] == C.INS_ALREADY_DUE and codes[2] >= 0


def test_stale_handle_never_touches_a_reused_slot():
    c = WheelCore(1, 8, 0, 1, growable=False)
    h1 = c.insert(10)
    assert c.cancel(h1)
    h2 = c.insert(20)
    assert C.handle_slot(h1) == C.handle_slot(h2) and h1 != h2
    assert not c.cancel(h1)
    assert c.is_pending(h2) and c.size == 1
    assert not c.cancel(-5) and not c.cancel((1 << 32) | 7)


def test_fixed_capacity_raises_full_and_cancel_frees_at_once():
    c = WheelCore(1, 8, 0, 3, growable=False)
    hs = [c.insert(10 + i) for i in range(3)]
    with pytest.raises(Full, match="larger capacity"):
        c.insert(50)
    codes = c.insert_many(np.array([60, 61]))
    assert list(codes) == [C.INS_NO_SLOT, C.INS_NO_SLOT]
    assert c.cancel(hs[1])
    assert c.insert(50) >= 0


def test_growth_keeps_entries_and_handles():
    c = WheelCore(1, 4, 0, 2)
    hs = c.insert_many(np.arange(1, 200) * 7)
    assert c.capacity >= 199 and (hs >= 0).all()
    c.verify()
    assert c.cancel(int(hs[0])) and c.is_pending(int(hs[-1]))
    fired = c.advance(10_000)
    assert len(fired) == 198
    c.verify()


def test_never_early_with_coarse_tick():
    c = WheelCore(10, 8, 0, 4)
    h = c.insert(105)
    assert list(c.advance(109)) == []
    assert list(c.advance(110)) == [C.handle_slot(h)]


def test_batch_matches_single_operations():
    rng = np.random.default_rng(7)
    d = rng.integers(1, 50_000, 5000)
    a, b = WheelCore(1, 16, 0, 16), WheelCore(1, 16, 0, 16)
    ha = a.insert_many(d)
    hb = np.array([b.insert(int(x)) for x in d])
    assert (ha == hb).all()
    drop = ha[::3]
    assert a.cancel_many(drop).all()
    assert all(b.cancel(int(h)) for h in drop)
    assert (a.advance(60_000) == b.advance(60_000)).all()


def test_pre_cascade_empties_a_bucket_before_it_expires():
    """The next bucket of level 1 moves down in bounded steps ahead of its expiration, so
    advancing to it finds nothing to cascade (no stall)."""
    c = WheelCore(1, 64, 0, 20_000)
    d = np.arange(64, 128).repeat(150)  # level 1, bucket 1 (expires at 64), 9600 entries
    c.insert_many(d)
    moved, steps = 0, 0
    while (m := c.cascade_step(1000)) > 0:
        assert m <= 1000
        moved, steps = moved + m, steps + 1
    assert moved == len(d) and steps == 10
    c.verify()
    assert c.current_time == 0 and c.next_wakeup() == 64
    assert len(c.advance(64)) == 150


def test_two_storages_one_algorithm():
    """The same operations over process memory and over a foreign buffer (as a shared
    segment would be) give identical bytes."""
    g = WheelGeometry.spanning(1, 20, 256)
    buf = bytearray(words_needed(g) * 8)
    mem = np.frombuffer(buf, dtype=np.int64)
    WheelCore.format(mem, g, 0)
    shared = WheelCore.attach(mem)
    local = WheelCore(1, 20, 0, 256, growable=False)
    rng = np.random.default_rng(3)
    for core in (shared, local):
        hs = core.insert_many(rng.integers(1, 9000, 200))
        core.cancel_many(hs[::4])
        core.advance(4000)
        core.cascade_step(50)
        rng = np.random.default_rng(3)
    assert (shared.mem == local.mem).all()
    assert wheel_layout(g)["total"] == len(mem)


def test_attach_refuses_a_foreign_or_newer_layout():
    g = WheelGeometry.spanning(1, 8, 16)
    mem = np.zeros(words_needed(g), dtype=np.int64)
    with pytest.raises(LayoutError, match="magic"):
        WheelCore.attach(mem)
    WheelCore.format(mem, g, 0)
    mem[C.H_VERSION] = 99
    with pytest.raises(LayoutError, match="version 99"):
        WheelCore.attach(mem)
    WheelCore.format(mem, g, 0)
    with pytest.raises(LayoutError, match="inconsistent"):
        WheelCore.attach(mem[:-1])


def test_bad_geometry_is_refused():
    with pytest.raises(ValueError, match="tick"):
        WheelCore(0, 8)
    with pytest.raises(ValueError, match="wheel_size"):
        WheelCore(1, 1)


def test_advance_resumes_when_out_fills():
    c = WheelCore(1, 8, 0, 64)
    c.insert_many(np.full(10, 5))
    out = np.empty(4, dtype=np.int64)
    got = []
    while (n := c.advance_into(5, out, True)) == len(out):
        got += list(out)
    got += list(out[:n])
    assert sorted(got) == list(range(10)) and c.size == 0


def test_cancelled_linked_node_is_retired_not_fired():
    """A node a lock-free cancel won (the service CASes its state word PENDING ->
    CANCELLED and leaves it linked) is retired by the wheel when it walks the bucket:
    freed, never emitted; the invariants hold before and after."""
    c = WheelCore(1, 4, 0, 8, growable=False)
    keep, gone, far = c.insert(3), c.insert(3), c.insert(30)
    gs = c.entries()[:, C.F_GS]  # a view: simulate the other process's CAS by hand
    for h in (gone, far):
        s = C.handle_slot(h)
        assert C.gs_state(int(gs[s])) == C.ST_PENDING
        gs[s] = C.gs_make(C.handle_gen(h), C.ST_CANCELLED)
    assert c.size == 3
    c.verify()  # a CANCELLED node may be linked
    assert c.cascade_step(100) == 1, "far's level-2 bucket is eligible: retired, not moved"
    assert c.size == 2
    c.verify()
    assert list(c.advance(3, release=False)) == [C.handle_slot(keep)]
    assert c.size == 0
    c.verify()
    for h in (gone, far):
        s = C.handle_slot(h)
        assert C.gs_state(int(gs[s])) == C.ST_FREE and C.gs_gen(int(gs[s])) == C.handle_gen(h) + 1
        assert c.entries()[s, C.F_PREV] == -1 and not c.cancel(h)
    assert c.release(np.array([C.handle_slot(keep)])) == 1
    assert list(c.advance(100)) == []
    c.verify()


def test_release_false_keeps_slots_until_released():
    c = WheelCore(1, 8, 0, 2, growable=False)
    c.insert(3)
    slots = c.advance(3, release=False)
    assert c.size == 0
    with pytest.raises(Full):
        c.insert(5), c.insert(6)
    c.verify()
    assert c.release(slots) == 1 and c.release(slots) == 0


# -- property test against a heap oracle --------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(-3, 3000)),
        st.tuples(st.just("cancel"), st.integers(0, 10_000)),
        st.tuples(st.just("advance"), st.integers(0, 700)),
        st.tuples(st.just("cascade"), st.integers(1, 40)),
        st.tuples(st.just("batch"), st.lists(st.integers(1, 5000), max_size=30)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(
    tick=st.sampled_from([1, 2, 7]),
    wheel=st.sampled_from([2, 3, 4, 8, 20]),
    start=st.integers(0, 10_000),
    program=ops,
)
def test_wheel_matches_heap_oracle(tick, wheel, start, program):
    """Every non-cancelled entry comes out exactly once, never before its deadline, in the
    first advance whose tick-floored time reaches its tick-ceiled deadline; cancelled ones
    never; the structure's invariants hold throughout."""
    c = WheelCore(tick, wheel, start, 4)
    now = c.current_time
    live: dict[int, int] = {}  # handle -> deadline
    heap: list[tuple[int, int]] = []
    handles: list[int] = []

    def add(d, h):
        if d <= now:
            assert h == C.INS_ALREADY_DUE
        else:
            assert h >= 0
            live[h] = d
            heapq.heappush(heap, (ceil_to(d, tick), h))
            handles.append(h)

    for op, arg in program:
        if op == "insert":
            d = now + arg
            add(d, c.insert(d))
        elif op == "batch":
            ds = [now + x for x in arg]
            for d, h in zip(ds, c.insert_many(np.array(ds, dtype=np.int64)), strict=True):
                add(d, int(h))
        elif op == "cancel" and handles:
            h = handles[arg % len(handles)]
            assert c.cancel(h) == (h in live)
            live.pop(h, None)
        elif op == "cascade":
            c.cascade_step(arg)
        elif op == "advance":
            t = now + arg
            fired = sorted(int(s) for s in c.advance(t, release=False))
            floor_t = t // tick * tick
            expect = []
            while heap and heap[0][0] <= floor_t:
                _, h = heapq.heappop(heap)
                if h in live:
                    assert live[h] <= t, "oracle: never early"
                    expect.append(C.handle_slot(h))
                    del live[h]
            assert fired == sorted(expect)
            c.release(np.array(fired, dtype=np.int64))
            now = c.current_time
            assert now == max(now, floor_t)
    assert c.size == len(live)
    c.verify()


def _level_of(core, handle):
    """Which level an entry's bucket is on (tests only): walk back to its sentinel."""
    g = core.geometry
    nodes = core.mem[int(core.mem[C.H_OFF_NODES]) :].reshape(-1, C.NODE_WORDS)
    node = g.sentinels + C.handle_slot(handle)
    while node >= g.sentinels:
        node = int(nodes[node, C.F_PREV])
    return node // g.buckets, node % g.buckets


def test_concepts_worked_example():
    """docs/concepts.md: tick 1, wheel_size 4; A@3, B@9, C@30."""
    c = WheelCore(1, 4, 0, 8)
    a, b, cc = c.insert(3), c.insert(9), c.insert(30)
    assert _level_of(c, a) == (0, 3) and _level_of(c, b) == (1, 2) and _level_of(c, cc) == (2, 1)
    assert c.next_wakeup() == 0, "C's level-2 bucket is the next one: eligible now"
    assert c.cascade_step(100) == 1 and _level_of(c, cc) == (1, 7)
    assert list(c.advance(3)) == [C.handle_slot(a)]
    c.advance(4)
    assert c.cascade_step(100) == 1 and _level_of(c, b) == (0, 1)
    assert list(c.advance(9)) == [C.handle_slot(b)]
    c.advance(23)
    assert c.cascade_step(100) == 0 and _level_of(c, cc) == (1, 7)
    c.advance(24)
    assert c.cascade_step(100) == 1 and _level_of(c, cc) == (0, 30 % 8)
    assert list(c.advance(29)) == [] and list(c.advance(30)) == [C.handle_slot(cc)]


def test_per_call_insert_and_cancel_refuse_bad_arguments():
    """insert and cancel are one native call each (the array borrowed once, when bound);
    what they are given is still checked."""
    c = WheelCore(1, 8, 0, 4, growable=False)
    with pytest.raises(TypeError, match="deadline must be an int"):
        c.insert(1.5)
    with pytest.raises(OverflowError, match="deadline does not fit"):
        c.insert(2**64)
    with pytest.raises(TypeError, match="handle must be an int"):
        c.cancel("1")
    assert not c.cancel(-5) and not c.cancel(2**40 + 3), "unknown handles cancel nothing"
    hs = [c.insert(10 + i) for i in range(4)]
    with pytest.raises(Full):
        c.insert(50)
    assert c.cancel(hs[0]) and c.insert(50) >= 0, "a freed slot is reused at once"
    c.verify()
    frozen = WheelCore.attach(np.frombuffer(c.mem.tobytes(), dtype=np.int64))
    frozen.verify()  # a read-only copy can be attached and checked, not changed
    with pytest.raises(TypeError, match="read-only"):
        frozen.cancel(hs[1])
