"""The cross-process purgatory and the futures side of handles, with real processes:
completion against expiry across processes (one outcome each, in the tasks and in
result()), several keys and amounts, bounded watch lists under churn, bad input, the
outcome notification (result, done, callbacks, await, a handle rebuilt in another process),
and SIGKILL of each service process with operations in flight."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import now_ms, racing, service_processes, wait_for

import shmwheel
from shmwheel import Full, ShmwheelError, TimerService
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from tests import ops_tasks

TASKS = {
    "completed": "tests.ops_tasks:completed",
    "expired": "tests.ops_tasks:expired",
    "slow_completed": "tests.ops_tasks:slow_completed",
    "slow_expired": "tests.ops_tasks:slow_expired",
    "noop": "shmwheel.examples.tasks:noop",
    "fail": "shmwheel.examples.tasks:fail",
}


@pytest.fixture
def counts(tmp_path, monkeypatch):
    """The tasks' counters for n operations: (completed runs, expired runs) readers."""

    def make(n: int):
        paths = {}
        for env, name in ((ops_tasks.COMPLETED_ENV, "c"), (ops_tasks.EXPIRED_ENV, "e")):
            p = tmp_path / name
            np.memmap(p, dtype=np.int32, mode="w+", shape=n).flush()
            monkeypatch.setenv(env, str(p))  # executors inherit it
            paths[name] = p
        return lambda: (
            np.fromfile(paths["c"], dtype=np.int32),
            np.fromfile(paths["e"], dtype=np.int32),
        )

    return make


def _other_process_result(name: str, op_id: int, q) -> None:
    with shmwheel.connect(name) as c:
        op = c.operation(op_id)
        q.put((op.id == op_id, op.result(10)))


def test_operations_complete_or_expire_once_and_handles_are_futures(counts):
    read = counts(8)
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        one = c.watch(["a"], 5000, on_complete="completed", on_expire="expired", payload=0)
        two = c.watch(["b", "c", "b"], 5000, on_complete="completed", payload=1, required=2)
        amt = c.watch([7], 5000, on_complete="completed", payload=2, required=5)
        late = c.watch([b"x"], 30, on_complete="completed", on_expire="expired", payload=3)
        gone = c.watch(["g"], 5000, on_complete="completed", on_expire="expired", payload=4)
        assert not one.done() and not two.done()
        called = []
        one.add_done_callback(called.append)
        assert c.check_and_complete("a") == 1
        assert one.result(5) == "completed" and one.done() and not one.cancelled()
        wait_for(lambda: called == [one], what="the callback")
        assert c.check_and_complete("b") == 0, "required=2: one signal is not enough"
        assert c.check_and_complete("c") == 1, "a key named twice counts once"
        assert two.result(5) == "completed"
        assert c.check_and_complete(7, amount=4) == 0
        assert c.check_and_complete(7, amount=3) == 1
        assert amt.result(5) == "completed"
        assert late.result(5) == "expired"
        assert c.check_and_complete(b"x") == 0, "an expired operation completes no more"
        assert gone.cancel() is True and gone.cancelled() and gone.result(1) == "cancelled"
        assert c.check_and_complete("g") == 0
        assert c.check_and_complete("nobody") == 0

        # a handle rebuilt from its id in another process waits there too
        q = mp.get_context("spawn").Queue()
        waiting = c.watch(["w"], 5000, on_complete="noop")
        p = mp.get_context("spawn").Process(
            target=_other_process_result, args=(svc.name, waiting.id, q)
        )
        p.start()
        time.sleep(0.5)
        assert c.check_and_complete("w") == 1
        assert q.get(timeout=20) == (True, "completed")
        p.join(10)

        # await, without blocking the loop
        async def main() -> tuple[str, str, int]:
            op = c.watch(["aw"], 5000, on_complete="noop")
            timer = c.schedule("noop", delay_ms=20)
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.001)
                    ticks += 1

            t = asyncio.ensure_future(tick())
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, c.check_and_complete, "aw")
            a, b = await op, await timer
            t.cancel()
            return a, b, ticks

        a, b, ticks = asyncio.run(main())
        assert (a, b) == ("completed", "ok") and ticks > 10, "the loop kept running"

        # timers: every outcome, equality, repr, and a handle from an id
        ok = c.schedule("noop", delay_ms=1)
        bad = c.schedule("fail", 0, delay_ms=1)
        never = c.schedule("noop", delay_ms=10_000)
        assert ok.result(5) == "ok" and bad.result(5) == "error"
        assert never.cancel() and never.result(1) == "cancelled" and never.cancelled()
        assert c.handle(ok.id) == ok and hash(c.handle(ok.id)) == hash(ok)
        assert c.handle(ok.id) != c.operation(ok.id), "a timer is not an operation"
        assert repr(one).startswith(f"Operation(id={one.id:#x}")
        with pytest.raises(TimeoutError):
            c.schedule("noop", delay_ms=10_000).result(0.05)
        st = svc.stats()["operations"]
        assert st["watched"] == 7 and st["completed"] == 5 and st["expired"] == 1
    completed, expired = read()
    assert completed[:5].tolist() == [1, 1, 1, 0, 0] and expired[:5].tolist() == [0, 0, 0, 1, 0]


def test_bad_input_is_refused_at_the_call(counts):
    counts(1)
    with TimerService(tasks=TASKS, capacity=100, executors=1) as svc, svc.client() as c:
        with pytest.raises(ValueError, match="at least one key"):
            c.watch([], 100)
        with pytest.raises(TypeError, match="sequence of keys"):
            c.watch("abc", 100)
        with pytest.raises(TypeError, match="a key must be"):
            c.watch([1.5], 100)
        with pytest.raises(ValueError, match="unknown task"):
            c.watch(["a"], 100, on_complete="nope")
        with pytest.raises(ValueError, match="required must be between"):
            c.watch(["a"], 100, required=0)
        with pytest.raises(TypeError, match="required must be an int"):
            c.watch(["a"], 100, required=1.0)
        with pytest.raises(ValueError, match="timeout_ms must be >= 0"):
            c.watch(["a"], -1)
        with pytest.raises(TypeError, match="msgpack"):
            c.watch(["a"], 100, payload=object())
        with pytest.raises(ValueError, match="at most"):
            c.watch(["a"], 100, payload="x" * 5000)
        with pytest.raises(ValueError, match="amount must be between"):
            c.check_and_complete("a", 0)
        with pytest.raises(TypeError, match="a key must be"):
            c.check_and_complete(None)
        op = c.watch(["a"], 10_000, on_complete="noop")  # nothing accepted was lost
        assert c.check_and_complete("a") == 1 and op.result(5) == "completed"
        assert svc.stats()["operations"]["watched"] == 1


def test_watch_lists_stay_bounded_under_churn(counts):
    """Completed operations leave the watch lists (purged as signals, the reaper and a
    full table meet them), so churn never fills them; live operations can."""
    counts(1)
    with (
        TimerService(tasks=TASKS, capacity=5000, executors=1, watch_capacity=64) as svc,
        svc.client() as c,
    ):
        live = [c.watch([f"live{i}", "shared"], 60_000) for i in range(32)]
        with pytest.raises(Full, match="watch lists"):
            c.watch(["one-too-many"], 60_000)
        assert c.check_and_complete("shared") == 32, "one signal completes every watcher"
        for op in live:
            assert op.result(5) == "completed"
        peak = 0
        for i in range(20_000):  # watch/complete cycles, each on two keys
            c.watch([f"k{i}", f"j{i % 7}"], 60_000)
            assert c.check_and_complete(f"k{i}") == 1
            if i % 1000 == 0:
                peak = max(peak, svc.stats()["operations"]["watch_entries"])
        ops = svc.stats()["operations"]
        assert ops["completed"] == 20_032 and ops["watch_capacity"] == 64
        assert peak <= 64 and ops["purged"] >= 40_000 - 64, ops


def test_completion_races_expiry_across_processes(counts, tmp_path):
    """10,000 operations, each completed by another process at about its timeout: each has
    exactly one outcome, and the task that ran, the completer's count and result() agree."""
    n, completers, jitter_ms = 10_000, 3, 3
    read = counts(n)
    np.memmap(tmp_path / "won", dtype=np.int8, mode="w+", shape=n).flush()
    with (
        TimerService(tasks=TASKS, capacity=2 * n, executors=2, watch_capacity=4 * n) as svc,
        svc.client() as c,
    ):
        with racing(
            ops_tasks.completer, svc.name, str(tmp_path), completers, jitter_ms, "completer"
        ) as release:
            start = now_ms() + 1500
            ops = []
            for i in range(n):
                keys, required, _ = ops_tasks.keys_of(i)
                ops.append(
                    c.watch(
                        keys,
                        start + i * 2500 / n - now_ms(),
                        on_complete="completed",
                        on_expire="expired",
                        payload=i,
                        required=required,
                    )
                )
            for op in ops:  # asked for before any ends: the outcome ring brings each
                op.add_done_callback(lambda h: None)
            np.save(tmp_path / "deadlines.npy", np.array([op.deadline_ms for op in ops]))
            release()
        results = [op.result(30) for op in ops]
        time.sleep(0.1)  # a second run would show now
        st = svc.stats()
    completed, expired = read()
    won = np.fromfile(tmp_path / "won", dtype=np.int8)
    res = np.array(results)
    assert ((completed + expired) == 1).all(), "an operation without exactly one outcome"
    assert (won != 2).all(), "an early signal completed an operation short of required"
    assert ((res == "completed") == (completed == 1)).all(), "result() and the task disagree"
    assert ((won == 1) == (completed == 1)).all(), "check_and_complete's count disagrees"
    c_won, e_won = int((completed == 1).sum()), int((expired == 1).sum())
    print(f"\n{n} races: completed {c_won}, expired {e_won}")
    assert c_won >= n // 100 and e_won >= n // 100, "the test must really race"
    assert st["operations"]["completed"] == c_won and st["operations"]["expired"] == e_won
    assert st["early"] == 0 and st["pending"] == 0


@pytest.mark.parametrize("role", ["coordinator", "reaper", "exec0"])
def test_sigkill_each_service_process_with_operations_in_flight(counts, role):
    """Operations watched, completed and expiring while `role` is killed twice: none is
    lost, none has two outcomes (an executor's death marks its running task crashed)."""
    n = 3000
    read = counts(n)
    with (
        TimerService(tasks=TASKS, capacity=4 * n, executors=2) as svc,
        svc.client() as c,
    ):
        ops = []
        for k in range(2):
            for i in range(k * n // 2, (k + 1) * n // 2):
                ops.append(
                    c.watch(
                        [f"k{i}"],
                        (i % 300) / 3,
                        on_complete="slow_completed",
                        on_expire="slow_expired",
                        payload=i,
                    )
                )
                ops[-1].add_done_callback(lambda h: None)  # asked for before it ends
                if i % 2:
                    c.check_and_complete(f"k{i - 1}")
            time.sleep(0.02)
            pid = svc.procs[role].pid
            os.kill(pid, signal.SIGKILL)
            bit = {"coordinator": L.READY_COORDINATOR, "reaper": L.READY_REAPER}.get(role, 0)
            wait_for(
                lambda: (
                    svc.procs[role].pid != pid
                    and svc.restarts.get(role) == k + 1
                    and (not bit or svc.mem.header[L.W_READY] & bit)
                ),
                what=f"{role} restarted",
            )
        results = [op.result(30) for op in ops]
        time.sleep(0.1)
        st = svc.stats()
    completed, expired = read()
    assert all(r in ("completed", "expired") for r in results)
    ran = completed + expired
    crashed = st["crashed"]
    assert (ran <= 1).all(), "an operation ran twice"
    assert int((ran == 0).sum()) <= crashed, "an operation was lost"
    assert st["pending"] == 0 and st["early"] == 0
    if role != "exec0":
        assert crashed == 0 and (ran == 1).all()


def test_a_client_that_never_asks_pays_nothing():
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        hs = [c.schedule("noop", delay_ms=1) for _ in range(100)]
        c.schedule_many("noop", [1] * 100)
        wait_for(lambda: svc.stats()["completed"] == 200, what="the runs")
        assert c._outcomes is None, "no waiter table until an outcome is asked for"
        assert not any(t.name.startswith("shmwheel-outcomes") for t in threading.enumerate())
        assert not c._mem.waiters[C.WAIT_HEADER :].any(), "no waiter entry was claimed"
        assert hs[0].done(), "done() reads the slot: still no thread"
        assert c._outcomes is not None and c._outcomes._thread is None
    with pytest.raises(ShmwheelError, match="closed"):
        hs[0].result(1)


def test_results_survive_the_client_closing(tmp_path):
    """A client closed while waiters are open fails them clearly, and leaves no thread."""
    with TimerService(tasks=TASKS, capacity=100, executors=1) as svc:
        c = svc.client()
        op = c.watch(["z"], 60_000)
        op.add_done_callback(lambda h: None)
        c.close()
        with pytest.raises(ShmwheelError, match="closed before the outcome"):
            op.result(1)
    assert not any(t.name.startswith("shmwheel-outcomes") for t in threading.enumerate())
    assert Path(tmp_path).exists()


def test_operations_survive_a_whole_service_sigkill_with_the_journal(tmp_path):
    """The embedding process and every service process SIGKILLed at once: the next start
    on the journal re-arms the pending operations (ids and timeouts kept, watched again),
    and neither the completed nor the cancelled one comes back."""
    spawn = mp.get_context("spawn")
    ready = spawn.Event()
    ids_path = tmp_path / "ids.npy"
    p = spawn.Process(target=ops_tasks.watcher, args=(str(tmp_path / "j"), str(ids_path), ready))
    p.start()
    try:
        assert ready.wait(60), "the watcher did not get ready"
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
    rows = np.load(ids_path)
    wait_for(lambda: not service_processes(f"s{p.pid}-"), what="the killed service gone")
    with TimerService(
        tasks={"noop": "shmwheel.examples.tasks:noop"},
        capacity=1000,
        executors=1,
        journal=tmp_path / "j",
    ) as svc:
        assert svc.recovery["recovered"] == 18, svc.recovery
        assert svc.recovery["salvaged"] >= 0
        with svc.client() as c:
            ops = [c.operation(int(i)) for i, _ in rows[2:]]
            assert [op.deadline_ms for op in ops] == rows[2:, 1].tolist()
            assert c.check_and_complete("k0") == 0, "the completed one is not back"
            assert c.check_and_complete("k1") == 0, "the cancelled one is not back"
            assert c.check_and_complete("all") == 0, "amounts restart from zero: 1 of 2"
            assert sum(c.check_and_complete(f"k{i}") for i in range(2, 20)) == 18
            assert all(op.result(5) == "completed" for op in ops)
