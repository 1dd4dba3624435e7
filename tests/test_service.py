"""The multiprocess service: exactly once, never early, cancel/fire races, capacity, bad
input, crashes of every process kind, garbage in rings, and cleanup after every test."""

from __future__ import annotations

import itertools
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    MINE,
    TASKS,
    assert_once_never_early,
    embedding_process,
    read_log,
    service_processes,
    sleep_until_ms,
    wait_for,
)

import shmwheel
from shmwheel import Full, LayoutError, ShmwheelError, TimerService
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from shmwheel.segment import shm
from shmwheel.segment.verify import verify
from shmwheel.service.caller import client as client_mod


@pytest.fixture(autouse=True, params=["memory", "journal"])
def journal_mode(request, tmp_path_factory, monkeypatch):
    """Every test here runs twice: without a journal, and with every TimerService it
    starts writing one (its own directory), so the journal's write paths see every crash
    and garbage case too."""
    if request.param == "journal":
        init = TimerService.__init__
        root = tmp_path_factory.mktemp("journals")
        made = iter(range(10**6))

        def with_journal(self, *args, **kw):
            kw.setdefault("journal", root / f"j{next(made)}")
            init(self, *args, **kw)

        monkeypatch.setattr(TimerService, "__init__", with_journal)
    return request.param


@pytest.fixture
def service():
    with TimerService(tasks=TASKS, capacity=50_000, executors=2) as svc:
        yield svc


def test_schedule_runs_once_with_context(service, tmp_path):
    log = tmp_path / "log"
    with service.client() as c:
        h = c.schedule("record", {"path": str(log), "tag": "a"}, delay_ms=5, key="k1")
        assert isinstance(h, shmwheel.TimerHandle) and h.deadline_ms >= h.deadline_ms
        d = c.schedule(
            "record", {"path": str(log), "tag": "b"}, deadline_ms=client_mod.now_ms() + 3
        )
        wait_for(lambda: service.stats()["completed"] == 2, what="two runs")
    rows = read_log(log)
    assert_once_never_early(rows, ["a", "b"])
    by_tag = {r[0]: r for r in rows}
    assert by_tag["a"][1] == h.id and by_tag["a"][2] == h.deadline_ms and by_tag["a"][5] == "k1"
    assert by_tag["a"][4] == 1 and by_tag["b"][1] == d.id
    st = service.stats()
    assert st["scheduled"] == 2 and st["fired"] == 2 and st["pending"] == 0
    assert st["early"] == 0 and st["lateness_samples"] == 2
    assert sum(st["lateness_histogram"]) == 2
    assert set(st["lateness_ms"]) >= {"p50", "p99", "p999", "max"}
    assert all(v["alive"] for v in st["processes"].values())
    assert set(st["processes"]) == {"coordinator", "reaper", "exec0", "exec1"}
    with service.client() as other:  # any attached process reads the same counters
        seen = other.stats()
    assert seen["completed"] == 2 and seen["processes"] == st["processes"]
    with pytest.raises(RuntimeError, match="inside a task"):
        shmwheel.context()


def test_two_producer_processes_exactly_once_never_early(tmp_path):
    log = tmp_path / "log"
    ctx = mp.get_context("spawn")
    import service_tasks

    # room for all 6,000 payloads at once: on a loaded machine the executors may not have
    # run any before the producers finish (the default arena at this capacity holds 4,096
    # payloads of this size, and a full one is Full at the call, as documented)
    with TimerService(tasks=TASKS, capacity=50_000, executors=2, arena_bytes=16 << 20) as service:
        with ctx.Pool(2) as pool:
            parts = pool.starmap(
                service_tasks.produce,
                [(service.name, str(log), f"p{i}", 3000, 300) for i in range(2)],
            )
        tags = [t for part in parts for t in part]
        wait_for(lambda: service.stats()["completed"] >= len(tags), what="all runs")
        time.sleep(0.1)
        assert_once_never_early(read_log(log), tags)
        st = service.stats()
        assert st["completed"] == st["fired"] == st["scheduled"] == 6000
        assert st["clients"] == 0, "closed clients' rings are released"


def test_schedule_many_and_cancel_many(service, tmp_path):
    log = tmp_path / "log"
    with service.client() as c:
        hs = c.schedule_many(  # due 0.5 s on: the cancels below come first even on a busy machine
            "record",
            [500 + i % 50 for i in range(1000)],
            [{"path": str(log), "tag": f"m{i}"} for i in range(1000)],
        )
        assert len(hs) == 1000 and isinstance(hs[3], shmwheel.TimerHandle)
        cancelled = hs[::2].cancel()
        assert cancelled.all()
        wait_for(lambda: service.stats()["completed"] == 500, what="half the batch")
        assert not hs[1].cancel(), "cancel after the fire is False"
    assert_once_never_early(read_log(log), [f"m{i}" for i in range(1, 1000, 2)])
    assert service.stats()["cancelled"] == 500


@pytest.mark.exclusive  # timed: run alone
def test_cancel_races_fire_with_one_winner(service, tmp_path):
    log = tmp_path / "log"
    n, won_total, ran, raced = 3000, 0, set(), False
    with service.client() as c:
        # deadlines over `spread` ms, cancelled while the reaper fires them; a slow moment of
        # the machine can let every timer fire first: then again over a longer spread
        for attempt, spread in enumerate((100, 400, 1600)):
            hs = c.schedule_many(
                "record",
                np.linspace(50, 50 + spread, n),
                [{"path": str(log), "tag": f"a{attempt}r{i}"} for i in range(n)],
            )
            handles = list(hs)
            first = int(hs.deadlines_ms.min())
            sleep_until_ms(first + 10)
            won = [h.cancel() for h in handles]
            won_total += sum(won)
            ran |= {f"a{attempt}r{i}" for i in range(n) if not won[i]}
            wait_for(lambda: service.stats()["completed"] >= len(ran), what="the runs")
            time.sleep(0.1)
            assert not any(h.cancel() for h in handles), "a second cancel is always False"
            if 0 < sum(won) < n:
                raced = True
                break
        assert raced, "the test must actually race"
    assert_once_never_early(read_log(log), ran)
    st = service.stats()
    assert st["cancelled"] == won_total and st["completed"] == len(ran) and st["pending"] == 0


def test_capacity_exhaustion_raises_full_and_cancel_frees_at_once(tmp_path):
    with TimerService(tasks=TASKS, capacity=64, executors=1) as svc, svc.client() as c:
        p = {"path": str(tmp_path / "log"), "tag": "x"}
        hs = [c.schedule("record", p, delay_ms=60_000) for _ in range(64)]
        with pytest.raises(Full, match="full"):
            c.schedule("record", p, delay_ms=60_000)
        with pytest.raises(Full):
            c.schedule_many("record", [60_000, 60_000])
        assert hs[7].cancel()
        h = c.schedule("record", p, delay_ms=60_000)  # the freed slot, immediately
        assert h.id != hs[7].id and not hs[7].cancel()
        wait_for(lambda: svc.stats()["pending"] == 64, what="64 pending")


def test_bad_input_is_refused_and_nothing_accepted_is_lost(service, tmp_path):
    log = tmp_path / "log"
    p = {"path": str(log), "tag": "ok"}
    with service.client() as c:
        good = c.schedule("record", p, delay_ms=50)
        for bad in (-1, math.nan, math.inf, -math.inf, 10.0**15):
            with pytest.raises(ValueError, match="delay_ms"):
                c.schedule("record", p, delay_ms=bad)
        with pytest.raises(TypeError, match="delay_ms"):
            c.schedule("record", p, delay_ms="5")
        with pytest.raises(TypeError, match="exactly one"):
            c.schedule("record", p)
        with pytest.raises(TypeError, match="exactly one"):
            c.schedule("record", p, delay_ms=1, deadline_ms=5)
        with pytest.raises(ValueError, match="unknown task 'nope'"):
            c.schedule("nope", p, delay_ms=1)
        with pytest.raises(TypeError, match="msgpack"):
            c.schedule("record", object(), delay_ms=1)
        with pytest.raises(ValueError, match="maximum is 4096"):
            c.schedule("record", "x" * 5000, delay_ms=1)
        with pytest.raises(ValueError, match="finite"):
            c.schedule_many("record", [1, math.nan])
        with pytest.raises(ValueError, match="every_ms"):
            c.schedule("record", p, delay_ms=1, every_ms=-5)
        with pytest.raises(TypeError, match="key"):
            c.schedule("record", p, delay_ms=1, key=1.5)
        with pytest.raises(TypeError):
            c.cancel("not a handle")
        assert not c.cancel(2**40 + 12345), "an unknown id cancels nothing"
        wait_for(lambda: service.stats()["completed"] == 1, what="the good timer")
    assert_once_never_early(read_log(log), ["ok"])
    assert service.stats()["scheduled"] == 1 and good.deadline_ms > 0


def test_payload_sizes_inline_and_arena(service, tmp_path):
    log = tmp_path / "log"
    got = []
    with service.client() as c:
        # the largest fills the 4,096-byte limit whatever the length of the log's path
        for i, size in enumerate((0, 7, 60, 250, 1000, 4040 - len(str(log)))):
            c.schedule("record", {"path": str(log), "tag": f"s{i}", "pad": "y" * size}, delay_ms=1)
            got.append(f"s{i}")
        wait_for(lambda: service.stats()["completed"] == len(got), what="every size")
    assert_once_never_early(read_log(log), got)


def test_task_errors_are_counted(service):
    with service.client() as c:
        c.schedule("boom", 1, delay_ms=1)
        c.schedule_many("boom", [2, 3])
        wait_for(lambda: service.stats()["task_errors"] == 3, what="three errors")
    st = service.stats()
    assert st["completed"] == 0 and st["pending"] == 0
    assert all(v["alive"] for v in st["processes"].values()), "an error kills no executor"


def test_in_flight_counts_fired_runs_until_their_outcome(service):
    """stats()["pending"] stops counting a timer when it fires; "in_flight" counts it from
    then until its outcome is recorded (three runs of 1.5 s on two executors)."""
    with service.client() as c:
        c.schedule_many("slow", [1, 1, 1], [1500, 1500, 1500])
        wait_for(lambda: service.stats()["fired"] == 3, what="three fires")
        st = service.stats()
        assert (st["pending"], st["in_flight"], st["completed"]) == (0, 3, 0)
        wait_for(lambda: service.stats()["completed"] == 3, what="three runs", timeout=30)
    # an executor counts a run "completed" when it returns, the reaper settles its slot when
    # it drains the outcome: for that moment a timer counts in both
    wait_for(lambda: service.stats()["in_flight"] == 0, what="the outcomes settled", timeout=5)
    assert service.stats()["pending"] == 0


def test_a_repeating_run_longer_than_its_period_skips_the_missed_periods(service, tmp_path):
    """A run of 25 ms every 10 ms: the next deadline is the first one of the grid after the
    run's end, never a burst of late runs to catch up, never two runs at once."""
    log = tmp_path / "log"
    with service.client() as c:
        payload = {"path": str(log), "tag": "slow", "sleep_ms": 25}
        h = c.schedule("record", payload, delay_ms=5, every_ms=10)
        wait_for(lambda: len(read_log(log)) >= 4, what="four runs")
        h.cancel()
        wait_for(lambda: h.done(), what="the timer ended")
    rows = read_log(log)
    steps = [b[2] - a[2] for a, b in itertools.pairwise(rows)]
    assert all(d >= 30 and d % 10 == 0 for d in steps), steps
    starts = [r[3] for r in rows]  # a run starts only after the one before it (25 ms) ended
    assert all(b - a >= 25_000_000 for a, b in itertools.pairwise(starts)), starts


@pytest.mark.exclusive  # timed: run alone
def test_every_ms_repeats_until_cancelled(service, tmp_path):
    log = tmp_path / "log"
    with service.client() as c:
        h = c.schedule("record", {"path": str(log), "tag": "rep"}, delay_ms=5, every_ms=10)
        wait_for(lambda: len(read_log(log)) >= 4, what="four runs")
        h.cancel()
        time.sleep(0.05)
        n = len(read_log(log))
        time.sleep(0.1)
    rows = read_log(log)
    assert len(rows) == n, "no run after cancel"
    assert [r[4] for r in rows] == list(range(1, n + 1)), "attempt counts the runs"
    # on the grid delay + k * every: a period that passed during a slow moment (a loaded
    # machine) is skipped, never run late in a burst
    deadlines = [r[2] for r in rows]
    steps = [b - a for a, b in itertools.pairwise(deadlines)]
    assert all(d >= 10 and d % 10 == 0 for d in steps), steps
    assert all(r[3] >= r[2] * 1_000_000 for r in rows)


def _kill_mid_run(svc: TimerService, role: str, tmp_path: Path, kills: int) -> None:
    """Schedule while killing `role` at staggered moments; every timer must run exactly once.
    Tasks take 0.5 ms, so dispatch rings hold a backlog of fired timers at each kill."""
    log = tmp_path / "log"
    tags = []
    bit = {"coordinator": L.READY_COORDINATOR, "reaper": L.READY_REAPER}[role]
    with svc.client() as c:
        for k in range(kills):
            for i in range(1500):
                tag = f"{k}-{i}"
                c.schedule(
                    "record",
                    {"path": str(log), "tag": tag, "sleep_ms": 0.5},
                    delay_ms=(i % 300) / 2,
                )
                tags.append(tag)
            time.sleep(0.02 + 0.03 * k)
            pid = svc.procs[role].pid
            os.kill(pid, signal.SIGKILL)
            wait_for(
                lambda: (
                    svc.procs[role].pid != pid
                    and svc.restarts.get(role) == k + 1
                    and svc.mem.header[L.W_READY] & bit
                ),
                what=f"{role} restarted and ready",
            )
        wait_for(lambda: svc.stats()["completed"] >= len(tags), timeout=60, what="every run")
        time.sleep(0.2)
    assert_once_never_early(read_log(log), tags)
    st = svc.stats()
    assert st["completed"] == len(tags) and st["pending"] == 0
    assert st["ring_garbage"] == 0, "no fired timer was dispatched twice"


def test_sigkill_coordinator_mid_run_loses_nothing(tmp_path):
    with TimerService(tasks=TASKS, capacity=20_000, executors=2) as svc:
        _kill_mid_run(svc, "coordinator", tmp_path, kills=3)


def test_sigkill_reaper_mid_run_loses_nothing(tmp_path):
    with TimerService(tasks=TASKS, capacity=20_000, executors=2) as svc:
        _kill_mid_run(svc, "reaper", tmp_path, kills=3)


def test_executor_killed_mid_task_is_replaced_and_recorded_crashed(tmp_path):
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        c.schedule("record", {"path": str(log), "tag": "slow", "sleep_ms": 5000}, delay_ms=1)
        wait_for(lambda: len(read_log(log)) == 1, what="the slow task to start")
        pid = svc.procs["exec0"].pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: svc.stats()["crashed"] == 1, what="crash recorded")
        c.schedule("record", {"path": str(log), "tag": "after"}, delay_ms=1)
        wait_for(lambda: svc.stats()["completed"] == 1, what="the next task")
        st = svc.stats()
        assert svc.restarts["exec0"] == 1 and st["processes"]["exec0"]["alive"]
        with svc.client() as c:  # any process reads the count from the segment
            assert c.stats()["restarts"] == {"exec0": 1}
        assert st["pending"] == 0
    assert [r[0] for r in read_log(log)] == ["slow", "after"]


def test_garbage_in_rings_is_counted_and_skipped(service, tmp_path):
    log = tmp_path / "log"
    rng = np.random.default_rng(7)
    with service.client() as c:
        c.schedule("record", {"path": str(log), "tag": "before"}, delay_ms=1)
        junk = rng.integers(-(2**63), 2**63 - 1, size=(500, 2), dtype=np.int64)
        junk[:10, 1] = junk[:10, 0] ^ C.CHECK_SUBMIT  # pass the check
        junk[10:20, 1] = junk[10:20, 0] ^ C.CHECK_CANCEL
        mem = c._mem
        producer = mem.producer[c.ring]
        assert producer.push(junk) == 500
        for ring in mem.dispatch:
            ring.push(rng.integers(0, 2**40, size=(50, 2), dtype=np.int64))
        for ring in mem.results:
            ring.push(rng.integers(-(2**62), 2**62, size=(50, C.RESULT_RECORD), dtype=np.int64))
        mem.ring_bell("coordinator")
        wait_for(lambda: service.stats()["ring_garbage"] >= 600, what="garbage counted")
        ring = producer.words
        ring[C.RING_HEAD] = ring[C.RING_TAIL] + 10**12  # a head far beyond anything published
        wait_for(lambda: service.stats()["ring_garbage"] >= 601, what="corrupt head counted")
        assert not producer.pending(), "the coordinator skipped to the corrupt head"
        c.schedule("record", {"path": str(log), "tag": "after"}, delay_ms=1)
        wait_for(lambda: service.stats()["completed"] == 2, what="runs after the garbage")
    st = service.stats()
    assert all(v["alive"] for v in st["processes"].values()) and not st["restarts"]
    assert_once_never_early(read_log(log), ["before", "after"])


def test_lock_holder_killed_mid_update_is_repaired(service, tmp_path):
    log = tmp_path / "log"
    with service.client() as c:
        tags = [f"t{i}" for i in range(300)]
        for i, tag in enumerate(tags):
            c.schedule("record", {"path": str(log), "tag": tag}, delay_ms=200 + i)
        wait_for(
            lambda: (
                service.stats()["pending"] == 300 and not service.mem.producer[c.ring].pending()
            ),
            what="all linked",
        )
        code = textwrap.dedent(f"""
            import os, signal
            import numpy as np
            from shmwheel.segment import layout as L, contract as C
            mem = L.ServiceMemory.attach({service.name!r})
            with mem.locked():
                w = mem.wheel  # half-done update: bitmaps and bucket heads scrambled
                w[w[C.H_OFF_BITS]: w[C.H_OFF_NODES]] = 0
                w[w[C.H_OFF_NODES]: w[C.H_OFF_NODES] + 64] = 12345
                os.kill(os.getpid(), signal.SIGKILL)
        """)
        subprocess.run([sys.executable, "-c", code], timeout=60)
        with service.mem.locked():  # the next holder repairs
            verify(service.mem)
        assert service.stats()["repairs"] == 1
        wait_for(lambda: service.stats()["completed"] == 300, what="every run after repair")
    assert_once_never_early(read_log(log), tags)


def test_dead_client_ring_is_reclaimed(service):
    code = textwrap.dedent(f"""
        import os, shmwheel
        c = shmwheel.connect({service.name!r})
        for _ in range(10):
            c.schedule("boom", None, delay_ms=60_000)
        print("ok", flush=True)
        os._exit(0)  # die without closing
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(Path(__file__).parent),
    )
    assert out.stdout.strip() == "ok", out.stderr
    wait_for(lambda: service.stats()["clients"] == 0, what="ring reclaimed")
    assert service.stats()["pending"] == 10, "what the dead client published is kept"


def test_segments_and_semaphores_are_private_to_the_user(service):
    files = shm.service_files(service.name)
    assert len(files) == 2 + service.config.executors + 1  # segment, coordinator, reaper, execs
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o600, f


def test_full_ring_waits_for_the_coordinator_then_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(client_mod.Client, "RING_WAIT_S", 0.3)
    log = tmp_path / "log"
    with (
        TimerService(tasks=TASKS, capacity=100, executors=1, ring_capacity=8) as svc,
        svc.client() as c,
    ):
        coordinator = svc.procs["coordinator"].pid
        os.kill(coordinator, signal.SIGSTOP)
        try:
            for i in range(4):
                c.schedule("record", {"path": str(log), "tag": f"f{i}"}, delay_ms=1)
            with pytest.raises(Full, match="4 of 10 timers were accepted") as e:
                c.schedule_many(
                    "record", [1] * 10, [{"path": str(log), "tag": f"m{i}"} for i in range(10)]
                )
            accepted = e.value.accepted
            assert len(accepted) == 4
            with pytest.raises(Full, match=r"ring .* stayed full"):
                c.schedule("record", {"path": str(log), "tag": "lost"}, delay_ms=1)
        finally:
            os.kill(coordinator, signal.SIGCONT)
        wait_for(lambda: svc.stats()["completed"] == 8, what="the accepted eight")
        c.schedule("record", {"path": str(log), "tag": "f4"}, delay_ms=1)
        wait_for(lambda: svc.stats()["completed"] == 9, what="one more")
        st = svc.stats()
        assert st["scheduled"] == 9 and st["pending"] == 0
    assert_once_never_early(
        read_log(log), [f"f{i}" for i in range(5)] + [f"m{i}" for i in range(4)]
    )


def test_close_after_the_service_stopped_is_quiet():
    svc = TimerService(tasks=TASKS, capacity=100, executors=1).start()
    c = shmwheel.connect(svc.name)
    svc.stop()
    c.close()
    assert c.closed


def test_segment_lock_is_released_when_repair_raises():
    name = f"{MINE}lock"
    seg = shm.Segment(shm.segment_name(name), 4096)
    try:
        seg.words[5] = 1  # dirty

        def broken_repair():
            raise RuntimeError("repair failed")

        with pytest.raises(RuntimeError, match="repair failed"):
            with seg.locked(5, broken_repair):
                pass
        assert seg.words[5] == 1, "still dirty: the next holder retries the repair"
        repaired = []
        with seg.locked(5, lambda: repaired.append(1)):  # would block if the lock leaked
            pass
        assert repaired == [1] and seg.words[5] == 0
    finally:
        seg.close()
        seg.unlink()


def test_client_refuses_use_after_close_and_across_fork(service):
    c = service.client()
    c.close()
    with pytest.raises(ShmwheelError, match="closed"):
        c.schedule("boom", None, delay_ms=1)
    with pytest.raises(ShmwheelError, match=r"does not exist|no service"):
        shmwheel.connect("no-such-service")
    with service.client() as c2:
        pid = os.fork()
        if pid == 0:  # the child shares c2's ring: it must refuse, not corrupt it
            try:
                c2.schedule("boom", None, delay_ms=1)
                os._exit(1)
            except ShmwheelError:
                os._exit(0)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert service.stats()["scheduled"] == 0


def test_embedding_process_killed_service_exits_and_cleans_up():
    p, name = embedding_process(new_session=False)
    try:
        assert name and service_processes(name)
    finally:
        p.kill()
        p.wait()
    wait_for(lambda: not service_processes(name), timeout=10, what="service processes to exit")
    wait_for(lambda: not shm.service_files(name), timeout=10, what="segments unlinked")


@pytest.mark.exclusive  # plants a stale segment any start would sweep
def test_next_start_sweeps_segments_of_a_dead_owner():
    p, name = embedding_process(new_session=True)
    os.killpg(p.pid, signal.SIGKILL)  # the whole group: nobody is left to unlink
    p.wait()
    wait_for(lambda: not service_processes(name), timeout=10, what="group to die")
    assert name and shm.service_files(name), "a whole-group kill leaves the segment behind"
    with TimerService(tasks=TASKS, capacity=100, executors=1):
        assert not shm.service_files(name), "start swept the dead owner's segment"


def test_layout_mismatch_is_a_clear_error():
    name = f"t{os.getpid()}-bad"
    seg = shm.Segment(shm.segment_name(name), 1 << 16)
    try:
        with pytest.raises(LayoutError, match="not a shmwheel service"):
            shmwheel.connect(name)
        seg.words[L.W_MAGIC] = np.int64(np.uint64(L.MAGIC).view(np.int64))
        seg.words[L.W_VERSION] = 99
        with pytest.raises(LayoutError, match="layout version 99"):
            shmwheel.connect(name)
    finally:
        seg.close()
        seg.unlink()


def test_architecture_check(monkeypatch):
    monkeypatch.setattr(L.platform, "machine", lambda: "aarch64")
    with pytest.raises(RuntimeError, match="x86-64 only; this machine is 'aarch64'"):
        L.check_architecture()


def test_service_arguments_are_checked():
    with pytest.raises(ValueError, match="module-level"):
        TimerService(tasks={"x": lambda p: None})
    with pytest.raises(ValueError, match="cannot import"):
        TimerService(tasks={"x": "no_such_module:fn"})
    with pytest.raises(ValueError, match="capacity"):
        TimerService(tasks=TASKS, capacity=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        TimerService(tasks=TASKS, colour="red")
    with pytest.raises(ValueError, match="journal_fsync must be one of"):
        TimerService(tasks=TASKS, journal="/tmp/j", journal_fsync="sometimes")
    with pytest.raises(ValueError, match="journal_segment_bytes"):
        TimerService(tasks=TASKS, journal="/tmp/j", journal_segment_bytes=10)
    with pytest.raises(ValueError, match="journal must be a directory path"):
        TimerService(tasks=TASKS, journal="")


def test_client_calls_after_stop_raise():
    svc = TimerService(tasks=TASKS, capacity=100, executors=1).start()
    c = svc.client()
    svc.stop()
    for call in (
        c.stats,
        lambda: c.schedule("boom", None, delay_ms=1),
        lambda: c.cancel(1),
        lambda: c.schedule_many("boom", [1]),
    ):
        with pytest.raises(ShmwheelError, match="stopping"):
            call()
    c.close()  # quiet
    with pytest.raises(ShmwheelError, match="closed"):
        c.stats()
    with pytest.raises(ValueError, match="service name"):
        TimerService("bad name!", tasks=TASKS)


def test_load_producer_drives_the_service_through_the_public_api():
    from shmwheel.examples import producer_load as producer

    with (
        TimerService(
            tasks={"noop": "shmwheel.examples.tasks:noop"}, capacity=10_000, executors=1
        ) as svc,
        svc.client() as c,
    ):
        f = producer.run(
            c,
            count=3000,
            delay_ms=(5, 50),
            cancel_fraction=0.2,
            cancel_at=0.5,
            payload_size=40,
            batch=64,
            seed=3,
        )
        # "pending" stops counting a timer when it fires, "in_flight" when it has run
        wait_for(
            lambda: svc.stats()["pending"] == 0 and svc.stats()["in_flight"] == 0,
            what="everything settled",
        )
        st = svc.stats()
    assert f["scheduled"] == st["scheduled"] == 3000
    assert f["cancelled_true"] == st["cancelled"] and f["cancelled_true"] > 0
    assert st["completed"] == 3000 - st["cancelled"] and st["early"] == 0
    with pytest.raises(ValueError):
        producer.run(c, count=-1)


def test_client_killed_mid_write_leaves_no_half_record():
    with TimerService(tasks=TASKS, capacity=64, executors=1) as svc:
        code = textwrap.dedent(f"""
            import os, shmwheel
            from shmwheel.segment import contract as C
            c = shmwheel.connect({svc.name!r})
            h = c._take(); c._take(); c._take()  # three slots reserved, one half-written
            slot = C.handle_slot(h)
            c._mem.side[slot * C.SIDE_WORDS + C.S_META] = 12345  # a torn side record
            c._mem.nodes()[slot, C.F_GS] = C.gs_make(C.handle_gen(h), C.ST_SUBMITTED)
            # marked submitted, never published
            os._exit(0)
        """)
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        wait_for(lambda: svc.stats()["clients"] == 0, what="the dead client's ring reclaimed")
        with svc.client() as c:  # every slot is free again: all 64 fit, none ran
            c.schedule_many("boom", [60_000] * 64)
            wait_for(lambda: svc.stats()["pending"] == 64, what="64 pending")
        st = svc.stats()
        assert st["fired"] == 0 and st["ring_garbage"] == 0


def test_tasks_of_one_script_share_its_globals(tmp_path):
    script = tmp_path / "my_tasks.py"
    script.write_text(
        "seen = []\ndef add(p):\n    seen.append(p)\ndef count(p):\n    return len(seen)\n"
    )
    from shmwheel.service.tasks import resolve

    add, count = resolve(f"{script}:add"), resolve(f"{script}:count")
    add(1)
    add(2)
    assert count(None) == 2, "one module object per script, not one per task"


@pytest.mark.exclusive  # kills on a timer: run alone
@pytest.mark.system  # a crash loop
def test_chaos_soak_small():
    """A few seconds of bench/chaos.py: random SIGKILLs of every role under load."""
    script = Path(__file__).resolve().parent.parent / "bench" / "chaos.py"
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "--seconds",
            "4",
            "--rate",
            "5000",
            "--kill-every-ms",
            "250",
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0 and "invariants hold" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "kills {}" not in out.stdout, "the soak must actually kill something"
