"""reset: a pending timer's deadline moved in one step (same id, no second slot), exactly
one winner against a racing fire, cancel or other reset, never early against the deadline
that won, journaled (recovery re-arms the latest deadline); and wall-clock deadlines
(at=). The slot machine plays a reset stalled between its halves
(test_slot_machine.py); the memory-ordering side is the ThreadSanitizer harness's."""

from __future__ import annotations

import datetime as dt
import errno
import multiprocessing as mp
import time

import numpy as np
import pytest
import reset_tasks
from helpers import TASKS, racing, read_log, wait_for
from local_segment import QuietClient, local_memory, small_config

from shmwheel import Full, JournalError, TimerService, journal
from shmwheel.journal import format as F
from shmwheel.journal.write import disk
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from shmwheel.segment.clock import now_ms
from shmwheel.segment.verify import verify
from shmwheel.service.caller.client import Client

UTC = dt.UTC


@pytest.fixture
def svc():
    with TimerService(tasks=TASKS, capacity=64, executors=1) as s:
        yield s


def rec(log, tag: str) -> dict[str, str]:
    return {"path": str(log), "tag": tag}


def test_reset_moves_a_timer_later_and_earlier(svc, tmp_path):
    log = tmp_path / "log"
    with svc.client() as c:
        later = c.schedule("record", rec(log, "later"), delay_ms=50)
        earlier = c.schedule("record", rec(log, "earlier"), delay_ms=5000)
        first = later.deadline_ms
        assert later.reset(400) and c.reset(earlier, 100)
        assert later.deadline_ms > first + 300  # the handle follows its own reset
        assert later.result(timeout=5) == "ok" and earlier.result(timeout=5) == "ok"
    rows = {r[0]: r for r in read_log(log)}
    for tag, h in (("later", later), ("earlier", earlier)):
        _, hid, deadline, run_ns, attempt, _ = rows[tag]
        assert (hid, deadline, attempt) == (h.id, h.deadline_ms, 1)  # same id, new deadline
        assert run_ns >= deadline * 1_000_000  # never early against the deadline that won
    assert rows["earlier"][3] < rows["later"][3]  # the one moved earlier ran first
    assert svc.stats()["resets"] >= 2


def test_reset_takes_no_second_slot(svc):
    cap = 64  # the fixture's capacity
    with svc.client() as c:
        wait_for(lambda: svc.stats()["pending"] == 0, what="an empty wheel")
        hs = [c.schedule("record", None, delay_ms=60_000) for _ in range(cap)]
        with pytest.raises(Full):
            c.schedule("record", None, delay_ms=60_000)
        for k in range(3):  # every timer reset three times: still one slot each
            assert all(c.reset(h, 50_000 + k) for h in hs)
        assert svc.stats()["pending"] == cap
        assert len({h.id for h in hs}) == cap
        assert c.cancel_many(hs).all()
    wait_for(lambda: svc.stats()["pending"] == 0, what="the cancelled timers retired")


def test_reset_loses_to_a_fire_a_cancel_and_a_stale_id(svc, tmp_path):
    log = tmp_path / "log"
    with svc.client() as c:
        fired = c.schedule("record", rec(log, "fired"), delay_ms=1)
        assert fired.result(timeout=5) == "ok"
        assert fired.reset(100) is False  # ran: nothing to move
        gone = c.schedule("record", rec(log, "gone"), delay_ms=200)
        assert gone.cancel() and gone.reset(10) is False
        assert c.reset(fired.id, delay_ms=10) is False  # a stale id: its slot moved on
    time.sleep(0.3)
    assert [r[0] for r in read_log(log)] == ["fired"]


def test_bad_resets_are_refused_and_change_nothing(svc, tmp_path):
    log = tmp_path / "log"
    with svc.client() as c:
        h = c.schedule("record", rec(log, "h"), delay_ms=300)
        d = h.deadline_ms
        for call, err in [
            (lambda: h.reset(10, deadline_ms=now_ms()), TypeError),  # two deadlines
            (lambda: h.reset(), TypeError),  # none
            (lambda: h.reset(-1), ValueError),
            (lambda: h.reset(float("nan")), ValueError),
            (lambda: h.reset(10**15), ValueError),  # beyond the wheel's range (~35 years)
            (lambda: h.reset(deadline_ms=-5), ValueError),
            (lambda: h.reset(at=dt.datetime.now()), ValueError),  # naive
            (lambda: h.reset(at="tomorrow"), TypeError),
            (lambda: c.reset("x", 10), TypeError),
        ]:
            with pytest.raises(err):
                call()
        op = c.watch(["k"], 5000)
        with pytest.raises(TypeError, match="operation"):
            c.reset(op.id, 10)
        assert op.cancel()
        assert h.deadline_ms == d
        assert h.result(timeout=5) == "ok"
    (row,) = read_log(log)
    assert row[2] == d  # ran at the deadline it was scheduled with


def test_a_handle_of_another_service_is_refused(svc):
    with (
        TimerService(tasks=TASKS, capacity=8, executors=1) as other,
        other.client() as o,
        svc.client() as c,
    ):
        h = o.schedule("record", None, delay_ms=5000)
        with pytest.raises(ValueError, match="cancels or resets only in the service"):
            c.reset(h, 10)
        assert h.reset(20)  # its own client still can
        h.cancel()


def test_reset_moves_the_next_run_of_a_repeating_timer(svc, tmp_path):
    log = tmp_path / "log"
    with svc.client() as c:
        h = c.schedule("record", rec(log, "rep"), delay_ms=1, every_ms=50)
        wait_for(lambda: len(read_log(log)) >= 2, what="two runs")
        t = now_ms()
        wait_for(lambda: h.reset(600), what="a reset between runs", timeout=5)
        n = len(read_log(log))
        time.sleep(0.3)  # no run while it waits for its moved deadline
        assert len(read_log(log)) <= n + 1  # (one may have been in flight)
        wait_for(lambda: len(read_log(log)) >= n + 2, what="runs again", timeout=5)
        rows = read_log(log)
        moved = [r for r in rows if r[2] >= t + 600]
        assert moved and moved[0][3] >= moved[0][2] * 1_000_000
        assert {r[1] for r in rows} == {h.id}
        h.cancel()


def test_a_reset_that_holds_the_slot_makes_another_wait_then_time_out(svc):
    with svc.client() as c, svc.client() as d:
        h = c.schedule("record", None, delay_ms=60_000)
        tables = c._tables()
        code, held = tables._reset_hold(h.id, now_ms() + 50_000, c.ring)  # a stalled reset
        assert code == C.RESET_WON
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="held it"):
            d.reset(h, 10)
        assert time.monotonic() - t0 >= 1.9
        assert h.cancel()  # a cancel wins over a held slot
        assert tables._reset_put_back(h.id, c.ring, held) == C.RESET_LOST


def test_schedule_and_reset_at_a_wall_clock_time(svc, tmp_path):
    log = tmp_path / "log"
    with svc.client() as c:
        # converted once at the call: the deadline is 150 ms after some instant between
        # the clock readings on either side of the call (1 ms for the rounding)
        before = now_ms()
        wall = dt.datetime.now(UTC)
        h = c.schedule("record", rec(log, "at"), at=wall + dt.timedelta(milliseconds=150))
        assert before + 150 - 1 <= h.deadline_ms <= now_ms() + 150 + 1
        tz = dt.timezone(dt.timedelta(hours=-5))  # any aware zone names the same instant
        before = now_ms()
        assert h.reset(at=dt.datetime.now(tz) + dt.timedelta(milliseconds=300))
        assert before + 300 - 1 <= h.deadline_ms <= now_ms() + 300 + 1
        past = c.schedule("record", rec(log, "past"), at=wall - dt.timedelta(days=3))
        assert past.deadline_ms <= now_ms()  # long past: due at once
        assert h.result(timeout=5) == "ok" and past.result(timeout=5) == "ok"
        with pytest.raises(ValueError, match="naive"):
            c.schedule("record", None, at=dt.datetime.now())
        with pytest.raises(TypeError, match="one of"):
            c.schedule("record", None, delay_ms=1, at=wall)
        with pytest.raises(ValueError, match="range"):
            c.schedule("record", None, at=wall + dt.timedelta(days=365 * 100))


def test_a_full_ring_refuses_the_reset_and_changes_nothing(monkeypatch):
    """No coordinator drains this segment's ring: once it is full, a reset waits
    RING_WAIT_S for room, then raises Full with the timer's deadline unchanged."""
    monkeypatch.setattr(Client, "RING_WAIT_S", 0.05)
    cfg = small_config(capacity=64, wheel_size=64, arena_blocks=(8, 1, 1, 1))
    mem = local_memory("reset-ring", cfg)
    c = QuietClient(mem, 0)
    try:
        hs = []
        with pytest.raises(Full):
            for _ in range(9):
                hs.append(c.schedule("record", None, delay_ms=1000))
        before = int(mem.nodes()[C.handle_slot(hs[0].id), C.F_DEADLINE])
        with pytest.raises(Full, match="not reset"):
            c.reset(hs[0], 5000)
        assert int(mem.nodes()[C.handle_slot(hs[0].id), C.F_DEADLINE]) == before
        assert C.gs_state(int(mem.nodes()[C.handle_slot(hs[0].id), C.F_GS])) == C.ST_SUBMITTED
    finally:
        c._release()
        c._closed = True
        mem.close()


def _advance_past_a_held_timer(q) -> None:  # (a child process: a hang must not hang pytest)
    mem = local_memory("reset-held", small_config())
    c = QuietClient(mem, 0)
    tables = mem.bind_tables()
    t0 = int(mem.wheel[C.H_NOW])
    h = c.schedule("record", None, deadline_ms=t0 + 3)
    recs = np.empty((8, C.PRODUCER_RECORD), np.int64)
    _, n = mem.producer[0].peek(recs)
    res = np.zeros(C.LINK_RESULT_WORDS, np.int64)
    with mem.locked():
        tables.link_records(recs, n, 0, res)
    mem.producer[0].consume(n)
    # a reset holds it, its new deadline (due) written, and does not come back
    code, _held = tables._reset_hold(h.id, t0, 0)
    out = np.empty(16, np.int64)
    # Far enough that next tick's bucket is a level-1 one (level 0 spans 4 ticks), and that
    # bucket (4 ms wide, starting at a multiple of 4) expires at or before the target.
    target = t0 + 9 + (-(t0 + 9)) % 4
    with mem.locked():
        fired = tables.advance(target, out)
    slot = C.handle_slot(h.id)
    q.put((code, fired, C.gs_state(int(mem.nodes()[slot, C.F_GS]))))
    c._release()
    c._closed = True
    mem.close()


def test_advance_defers_a_held_timer_without_walking_it_again():
    """A timer held RESETTING by a stalled reset is put in the bucket after the clock's at
    the end of an advance. Deferred into the next tick's bucket during the walk, it could
    land in a higher level whose cascade placed it by the (due) deadline the reset wrote,
    back into the walk: the reaper looped there, holding the lock, while the reset held."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_advance_past_a_held_timer, args=(q,))
    p.start()
    p.join(20)
    if p.is_alive():
        p.kill()
        p.join()
        pytest.fail("advance never returned while a reset held a timer")
    assert q.get(timeout=5) == (C.RESET_WON, 0, C.ST_RESETTING)


def test_a_cascade_places_a_moved_timer_by_its_deadline_not_its_old_bucket():
    """A timer a reset moved out of its level-1 bucket's span (its record not drained yet)
    is cascaded by its deadline, not dropped into the level-0 bucket of the same index:
    there it re-announced that bucket's expiration, and a timer already in it (due sooner)
    waited for the moved one's deadline."""
    t0 = now_ms() >> 8 << 8  # level 1's buckets (4 ms) start on multiples of 4 from here
    mem = local_memory("reset-cascade", small_config(max_clients=2), t0, clients=2)
    c0, c1 = QuietClient(mem, 0), QuietClient(mem, 1)
    tables, out = mem.bind_tables(), np.empty(16, np.int64)

    def drain(r: int) -> None:
        recs = np.empty((8, C.PRODUCER_RECORD), np.int64)
        _, n = mem.producer[r].peek(recs)
        res = np.zeros(C.LINK_RESULT_WORDS, np.int64)
        with mem.locked():
            tables.link_records(recs, n, r, res)
        mem.producer[r].consume(n)

    def advance(t: int) -> list[int]:
        with mem.locked():
            n = tables.advance(t, out)
        return out[:n].tolist()

    try:
        a = c0.schedule("record", None, deadline_ms=t0 + 5)  # level 1, bucket [t0+4, t0+8)
        drain(0)
        assert c1.reset(a, deadline_ms=t0 + 13)  # its record waits on ring 1
        assert advance(t0 + 2) == []
        b = c0.schedule("record", None, deadline_ms=t0 + 5)  # now level 0: due at t0 + 5
        drain(0)
        with mem.locked():
            tables.cascade_step(4)  # pre-cascades a's level-1 bucket
            verify(mem)
        assert advance(t0 + 5) == [b.id]  # b on time, a not before its new deadline
        drain(1)
        assert advance(t0 + 12) == []
        assert advance(t0 + 13) == [a.id]
    finally:
        for c in (c0, c1):
            c._release()
            c._closed = True
        mem.close()


# -- the journal --------------------------------------------------------------------------
def _last_scheduled(d) -> dict[int, dict]:
    last: dict[int, dict] = {}
    for r in journal.records(d):
        if r["kind"] == "scheduled":
            last[r["id"]] = r
    return last


def test_resets_are_journaled_and_recovery_rearms_the_latest_deadline(tmp_path):
    log, d = tmp_path / "log", tmp_path / "j"
    with TimerService(tasks=TASKS, capacity=64, executors=1, journal=d) as s, s.client() as c:
        later = c.schedule("record", rec(log, "later"), delay_ms=150)
        earlier = c.schedule("record", rec(log, "earlier"), delay_ms=60_000)
        assert later.reset(1500) and later.reset(1800)  # the last one wins
        assert earlier.reset(300)
        wait_for(
            lambda: (
                len(_last_scheduled(d)) == 2
                and all(r["flags"] & F.FLAG_RESET for r in _last_scheduled(d).values())
            ),
            what="the resets in the journal",
        )
    last = _last_scheduled(d)
    assert last[later.id]["deadline_ms"] == later.deadline_ms
    assert last[earlier.id]["deadline_ms"] == earlier.deadline_ms
    time.sleep(0.4)  # the first, not the second, deadline passes while it is stopped
    with TimerService(tasks=TASKS, capacity=64, executors=1, journal=d) as s:
        assert s.recovery["recovered"] == 2
        wait_for(lambda: len(read_log(log)) == 2, what="both re-armed timers", timeout=10)
    rows = {r[0]: r for r in read_log(log)}
    assert rows["later"][2] == later.deadline_ms  # re-armed at the reset's deadline
    assert rows["later"][3] >= later.deadline_ms * 1_000_000  # and not before it
    assert rows["earlier"][2] == earlier.deadline_ms


def test_reset_is_refused_while_the_journal_cannot_keep_it(tmp_path):
    """A reset the journal cannot record would be lost to a whole-service crash (recovery
    would re-arm the old deadline), so it is refused like a schedule while a disk fault
    lasts, through the writers' fault seam (journal/write/disk.py)."""
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=64, executors=1, journal=tmp_path / "j") as s:
        with s.client() as c:
            h = c.schedule("record", rec(log, "kept"), delay_ms=60_000)
            s.mem.header[L.W_JINJECT] = disk.inject(errno.ENOSPC)
            try:
                c.schedule("record", None, delay_ms=60_000)  # a write that meets the fault

                def refused() -> bool:
                    try:
                        h.reset(50_000)
                    except JournalError:
                        return True
                    return False

                wait_for(refused, what="resets refused", timeout=10)
                with pytest.raises(JournalError):
                    c.reset(h, deadline_ms=now_ms() + 10)
            finally:
                s.mem.header[L.W_JINJECT] = 0

            def accepted() -> bool:
                try:
                    return h.reset(10)
                except JournalError:
                    return False

            wait_for(accepted, what="resets accepted again", timeout=10)
            assert h.result(timeout=5) == "ok"


# -- races across processes ----------------------------------------------------------------
N = 1500
RACERS = 3
LEAD_MS, WINDOW_MS, JITTER_MS = 500, 600, 3


def test_resets_race_fires_cancels_and_each_other_across_processes(tmp_path, monkeypatch):
    """Every timer meets a reset or a cancel from each of three processes, aimed at its
    deadline: exactly one outcome each, a True cancel never runs, a run is never early
    against the deadline it ran with, that deadline is the last one a reset won (or the
    scheduled one), and it is the deadline the journal holds for that run."""
    runs_path = tmp_path / "runs"
    np.memmap(runs_path, dtype=np.int64, mode="w+", shape=(N, 3)).flush()
    monkeypatch.setenv(reset_tasks.RUN_ENV, str(runs_path))
    d = tmp_path / "j"
    with (
        TimerService(
            tasks={"stamp": "reset_tasks:stamp"}, capacity=2 * N, executors=2, journal=d
        ) as s,
        s.client() as c,
    ):
        with racing(
            reset_tasks.resetter, s.name, str(tmp_path), RACERS, JITTER_MS, "resetter"
        ) as release:
            hs = c.schedule_many("stamp", LEAD_MS + np.arange(N) * (WINDOW_MS / N), list(range(N)))
            np.save(tmp_path / "ids.npy", hs.ids)
            np.save(tmp_path / "deadlines.npy", hs.deadlines_ms)
            release()
        wait_for(
            lambda: s.stats()["pending"] == 0 and s.stats()["in_flight"] == 0,
            what="every timer settled",
            timeout=30,
        )
        time.sleep(0.1)
    runs = np.fromfile(runs_path, dtype=np.int64).reshape(N, 3)
    acts = np.stack([np.load(tmp_path / f"acts_{j}.npy") for j in range(RACERS)])  # (R, N, 3)
    kind, ret, want = acts[..., 0], acts[..., 1], acts[..., 2]
    assert (kind > 0).all(), "every racer acted on every timer"
    cancel_won = ((kind == 2) & (ret == 1)).sum(axis=0)
    reset_won = (kind == 1) & (ret == 1)
    assert cancel_won.max() <= 1, "two cancels of one timer returned True"
    ran = runs[:, 0]
    assert (ran[cancel_won == 1] == 0).all(), "a timer ran although a cancel returned True"
    assert (ran[cancel_won == 0] == 1).all(), (
        f"{int((ran[cancel_won == 0] != 1).sum())} timers did not run exactly once"
    )
    did = ran == 1
    assert (runs[did, 2] >= runs[did, 1] * 1_000_000).all(), "a run started before its deadline"
    fired = {r["id"]: r["deadline_ms"] for r in journal.records(d) if r["kind"] == "fired"}
    for i in np.flatnonzero(did).tolist():
        allowed = {int(hs.deadlines_ms[i])} | set(want[reset_won[:, i], i].tolist())
        assert runs[i, 1] in allowed, f"timer {i} ran at {runs[i, 1]}, which no reset won"
        # the journal's word on the deadline of that run (what recovery would re-arm it at)
        assert fired[int(hs.ids[i])] == runs[i, 1], (
            f"timer {i}: the journal's deadline for its run is not the one it ran with"
        )
    won, lost = int(reset_won.sum()), int(((kind == 1) & (ret == 0)).sum())
    print(
        f"\n{N} timers x {RACERS} racers: resets won {won}, lost {lost}; "
        f"cancels won {int(cancel_won.sum())}; ran {int(did.sum())}"
    )
    assert won >= N // 10 and lost >= N // 100, "the test must really race"
