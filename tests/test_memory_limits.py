"""What the segment spends, and its tables' limits: a timer is 48 bytes of segment (its wheel
node and side record) and nothing more. An operation's count lives in its arena block; a
freed slot's outcome in its payload word until the slot is reserved again; who waits for
what in the waiter table, sized by how many handles are awaited at once
(shmwheel/native/purgatory.c). These tests show what the futures do with that: a full table
refuses clearly, a full outcome ring loses nothing, a late ask learns the outcome until the
slot is reused, and a gone client's entries are emptied. The ordering argument is checked in
tests/test_tsan.py."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest
from helpers import wait_for

import shmwheel
from shmwheel import Full, ShmwheelError, TimerService
from shmwheel.errors import LayoutError
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from shmwheel.segment import shm

TASKS = {"noop": "shmwheel.examples.tasks:noop"}


def _keys(mem: L.ServiceMemory) -> np.ndarray:
    """The waiter table's key words (contract.h WAIT_*)."""
    nb = int(mem.waiters[C.WA_NBUCKETS])
    table = mem.waiters[C.WAIT_HEADER : C.WAIT_HEADER + nb * C.WAIT_BUCKET_WORDS]
    return table.reshape(nb, C.WAIT_BUCKET_WORDS)[:, : C.WAIT_WAYS].ravel()


def test_a_timer_costs_its_node_and_side_record_only():
    cfg = TimerService(tasks=TASKS, executors=1).config
    words = L.segment_layout(cfg)["total"]
    more = L.segment_layout(dataclasses.replace(cfg, capacity=cfg.capacity + 1024))["total"]
    assert (more - words) * 8 / 1024 == C.NODE_WORDS * 8 + C.SIDE_WORDS * 8 == 48
    # the default service at 1 M: W3's goal of 64 B a timer of capacity (one executor;
    # python -m shmwheel.bench --workloads svc_memory measures the segment itself)
    assert words * 8 / cfg.capacity <= 64
    # the journal's retention anchor adds an int32 a timer
    cfg = dataclasses.replace(cfg, journal_dir="/nonexistent")
    words = L.segment_layout(cfg)["total"]
    more = L.segment_layout(dataclasses.replace(cfg, capacity=cfg.capacity + 1024))["total"]
    assert (more - words) * 8 / 1024 == 52


# issue 10's layout and issue 22's (error logs) both wrote "SHWSVC06"; issue 26's (the
# waiter table) "SHWSVC08", its waiter count "SHWSVC09"
@pytest.mark.parametrize("version, magic", [(6, "06"), (7, "06"), (8, "08"), (9, "09")])
def test_a_segment_of_a_previous_layout_is_refused_clearly(version, magic):
    name = f"t{os.getpid()}-old"
    seg = shm.Segment(shm.segment_name(name), 1 << 16)
    try:
        seg.words[L.W_MAGIC] = C.as_int64(int.from_bytes(f"SHWSVC{magic}".encode(), "big"))
        seg.words[L.W_VERSION] = version
        said = (
            rf"layout version {version} \(magic SHWSVC{magic}\); "
            r"this shmwheel reads version 10 \(SHWSVC10\)"
        )
        with pytest.raises(LayoutError, match=said):
            shmwheel.connect(name)
    finally:
        seg.close()
        seg.unlink()


def test_a_full_waiter_table_refuses_the_ask_and_loses_nothing():
    """16 entries (two buckets of 8): asking about more live handles than fit raises Full at
    once; nothing waits for them then, and a later ask, once entries are free, works."""
    with (
        TimerService(tasks=TASKS, capacity=1000, executors=1, waiter_capacity=16) as svc,
        svc.client() as c,
    ):
        hs = [c.schedule("noop", delay_ms=600) for _ in range(40)]
        waiting, refused = [], []
        for h in hs:
            try:
                h.add_done_callback(lambda _h: None)
                waiting.append(h)
            except Full as e:
                assert "waiter table" in str(e) and "waiter_capacity" in str(e)
                refused.append(h)
        assert 8 <= len(waiting) <= 16 and refused, (len(waiting), len(refused))
        assert all(h._future is None for h in refused), "a refused ask left a future"
        assert all(h.result(10) == "ok" for h in waiting)
        wait_for(lambda: not _keys(c._mem).any(), what="every entry emptied")
        late = [h.result(10) for h in refused[:4]]  # asked after: the freed slots say so
        assert late == ["ok"] * 4
        again = [c.schedule("noop", delay_ms=50) for _ in range(8)]
        assert [h.result(10) for h in again] == ["ok"] * 8  # entries are reused


def test_an_outcome_in_its_entry_survives_a_full_outcome_ring():
    """2,000 waited-for timers end at once while the listener is held up (its lock taken
    here): the outcome ring (1,024 records) drops records, and every future still gets its
    outcome, from its entry."""
    n = 2000
    with (
        TimerService(tasks=TASKS, capacity=8192, executors=1, waiter_capacity=4096) as svc,
        svc.client() as c,
    ):
        # far off while every future asks (an outcome that ends before its ask never uses
        # the ring: with timers due in 1.5 s, a loaded machine asked too late), then reset to
        # one deadline once the listener is held up
        hs = c.schedule_many("noop", np.full(n, 60_000.0))
        futs = [c.handle(int(h)) for h in hs.ids]
        for h in futs:
            h.add_done_callback(lambda _h: None)
        ring = c._mem.outq[c.ring].words
        dropped = int(ring[C.OUTQ_DROPPED])
        assert c._outcomes is not None
        with c._outcomes._lock:  # the listener stops at its first resolve
            soon = int(time.monotonic() * 1000) + 100
            assert all(c.reset(h, deadline_ms=soon) for h in futs)
            wait_for(lambda: svc.stats()["completed"] == n, what="the runs")
            # their slots reserved again (most recently freed first): the outcomes the ring
            # dropped are now in the waiters' entries only
            c.schedule_many("noop", np.full(n + 500, 60_000.0))
        assert int(ring[C.OUTQ_DROPPED]) > dropped, "the ring never overflowed"
        assert [h.result(10) for h in futs] == ["ok"] * n
        wait_for(lambda: not _keys(c._mem).any(), what="every entry emptied")


def test_a_late_ask_learns_the_outcome_until_the_slot_is_reserved_again():
    with TimerService(tasks=TASKS, capacity=64, executors=1) as svc, svc.client() as c:
        h = c.schedule("noop", delay_ms=1)
        wait_for(lambda: svc.stats()["completed"] == 1, what="its run")
        first = c.handle(h.id)
        assert first.result(1) == "ok"  # never asked before: read from the freed slot
        slot = C.handle_slot(h.id)
        more = []
        while not any(C.handle_slot(x.id) == slot for x in more):  # reserved again
            more.append(c.schedule("noop", delay_ms=60_000))
        late = c.handle(h.id)
        assert late.done(), "ended: done() says so"
        with pytest.raises(ShmwheelError, match="no longer known"):
            late.result(1)
        assert first.result(0) == "ok", "a handle that learned its outcome keeps it"
        with pytest.raises(ShmwheelError, match="no longer known"):
            h.result(0)  # h itself never asked


def _asks_and_waits(name: str, ready) -> None:
    c = shmwheel.connect(name)
    for _ in range(20):
        c.schedule("noop", delay_ms=60_000).add_done_callback(lambda _h: None)
    ready.set()
    time.sleep(60)


@pytest.mark.parametrize("how", ["close", "sigkill"])
def test_a_gone_clients_entries_are_emptied(how):
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
        mem = L.ServiceMemory.attach(svc.name)
        try:
            if how == "close":
                c = svc.client()
                for _ in range(20):
                    c.schedule("noop", delay_ms=60_000).add_done_callback(lambda _h: None)
                assert np.count_nonzero(_keys(mem)) == 20
                c.close()
                assert not _keys(mem).any(), "close() empties its entries"
            else:
                ctx = mp.get_context("spawn")
                ready = ctx.Event()
                p = ctx.Process(target=_asks_and_waits, args=(svc.name, ready))
                p.start()
                assert ready.wait(30)
                assert np.count_nonzero(_keys(mem)) == 20
                os.kill(p.pid, signal.SIGKILL)
                p.join()
                wait_for(lambda: not _keys(mem).any(), what="the reclaim of its ring")
        finally:
            mem.close()


def test_a_full_payload_arena_names_its_remedy():
    """The arena is sized apart from capacity (4 MiB by default: 32,768 payloads of 9-64
    bytes), so its Full says how to get a larger one: TimerService(arena_bytes=...). A
    schedule's payload and an operation's block say the same."""
    assert TimerService(tasks=TASKS, executors=1).config.arena_blocks == (32768, 4096, 512, 128)
    with (
        TimerService(tasks=TASKS, capacity=1000, executors=1, arena_bytes=8192) as svc,
        svc.client() as c,
    ):
        assert svc.config.arena_blocks == (64, 8, 1, 0)
        with pytest.raises(Full) as full:
            for _ in range(100):  # 73 blocks in all: 64 + 8 + 1
                c.schedule("noop", b"twenty bytes of data", delay_ms=60_000)
        said = str(full.value)
        assert "TimerService(arena_bytes=...)" in said, said
        assert "64 of 64 B, 8 of 256 B, 1 of 1024 B, 0 of 4096 B" in said, said
        with pytest.raises(Full, match=r"larger TimerService\(arena_bytes=\.\.\.\)"):
            c.watch(["k"], 60_000, payload="more than eight bytes")
