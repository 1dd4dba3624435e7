"""An executor stuck in one task does not hold the timers dispatched behind it
(docs/concepts.md, "Stuck executors"): once its task has run `stuck_after_ms` with records
waiting behind it on its dispatch ring, the reaper claims those records (a CAS each) and
the other executors run them; the stuck executor skips them when its task returns. Each
accepted timer runs exactly once, none early, whether the stuck executor wakes during the
takeover, returns late, or is SIGKILLed; with a journal a restart runs none again."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from descendant_tasks import assert_each_ran_once_none_early, runs
from helpers import stop_all, wait_for

from shmwheel import TimerService

TASKS = {
    "hang": "stuck_tasks:hang",
    "jitter": "stuck_tasks:jitter",
    "record": "descendant_tasks:record",
}


def _ran(marks: Path, kind: str = "") -> set[int]:
    return {int(p.name.split(".")[1]) for p in marks.glob(f"run.*{kind}")}


def _quiet(svc: TimerService) -> bool:
    """Nothing pending, nothing in flight, every dispatch ring consumed."""
    st = svc.stats()
    assert svc.mem is not None
    drained = all(r.pending() == 0 for r in svc.mem.dispatch)
    return st["pending"] == 0 and st["in_flight"] == 0 and drained


def _hung_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: bool):
    """A service of 2 executors; one hangs in a task, 200 timers are due just after it.
    Returns (service, marks, hang id, ids, the hung executor's pid)."""
    marks = tmp_path / "runs"
    marks.mkdir()
    monkeypatch.setenv("DESC_RUNS", str(marks))
    jdir = tmp_path / "journal" if journal else None
    svc = TimerService(tasks=TASKS, capacity=4096, executors=2, journal=jdir, stuck_after_ms=300)
    svc.start()
    with svc.client() as c:
        hang = c.schedule("hang", None, delay_ms=10).id
        wait_for(lambda: _ran(marks, "hang"), what="the hanging task to start")
        ids = [c.schedule("record", 0, delay_ms=30 + i // 10).id for i in range(200)]
    (hung,) = {int(p.name.split(".")[2]) for p in marks.glob("run.*hang")}
    return svc, marks, hang, ids, hung


@pytest.mark.parametrize("journal", [False, True], ids=["memory", "journal"])
def test_timers_behind_a_hung_task_run_on_the_other_executor(tmp_path, monkeypatch, journal):
    """The issue's case: all 200 run while the task still hangs, none on the hung
    executor, exactly once, none early; health says "stuck"; when the hung task returns,
    nothing runs twice (and a restart on the journal runs nothing again)."""
    svc, marks, hang, ids, hung = _hung_service(tmp_path, monkeypatch, journal)
    svc2 = None
    try:
        wait_for(lambda: _ran(marks, "record") >= set(ids), timeout=30, what="the 200 timers")
        assert not (marks / "release").exists()
        assert not [r for r in runs(marks) if r[0] in ids and r[1] == hung]
        st = svc.stats()
        assert st["taken_over"] > 0, st
        assert st["stuck_executors"], st
        wait_for(lambda: "stuck" in svc.stats()["health"]["reasons"], what="health: stuck")
        assert svc.stats()["health"]["state"] == "degraded"
        (marks / "release").touch()
        wait_for(lambda: svc.stats()["completed"] >= 201 and _quiet(svc), what="quiet")
        wait_for(lambda: not svc.stats()["stuck_executors"], what="the executor to run again")
        assert_each_ran_once_none_early(marks, [hang, *ids])
        # the hung executor, back, skipped what was taken (claimed: ring.h) rather than
        # finding each one's slot freed already (a record it would have run, had the
        # other executor not finished it first)
        st = svc.stats()
        assert st["early"] == 0 and st["completed"] == 201 and st["ring_garbage"] == 0, st
        svc.stop()
        if journal:
            svc2 = TimerService(
                tasks=TASKS, capacity=4096, executors=2, journal=tmp_path / "journal"
            ).start()
            assert svc2.recovery["recovered"] == 0, svc2.recovery
            svc2.stop()
            assert_each_ran_once_none_early(marks, [hang, *ids])
    finally:
        (marks / "release").touch()
        stop_all(svc, svc2)


def test_a_stuck_executor_sigkilled_after_the_takeover(tmp_path, monkeypatch):
    """The hung executor is SIGKILLed once the others ran its timers: its task's outcome is
    "crashed", its replacement runs none of the taken timers again."""
    svc, marks, hang, ids, hung = _hung_service(tmp_path, monkeypatch, journal=True)
    try:
        wait_for(lambda: _ran(marks, "record") >= set(ids), timeout=30, what="the 200 timers")
        os.kill(hung, signal.SIGKILL)
        wait_for(lambda: svc.stats()["crashed"] == 1 and _quiet(svc), what="the crash settled")
        wait_for(lambda: not svc.stats()["stuck_executors"], what="the replacement")
        assert_each_ran_once_none_early(marks, [hang, *ids])
        assert svc.stats()["completed"] == 200
    finally:
        (marks / "release").touch()
        svc.stop()


@pytest.mark.parametrize("round_", range(6))
def test_stuck_executors_wake_during_the_takeover(tmp_path, monkeypatch, round_):
    """A threshold of 1 ms against runs of 0-30 ms: the reaper judges executors stuck and
    takes their records all the time, while they wake and claim the same records. Every
    timer runs exactly once, none early, with the journal; a restart runs none again."""
    marks = tmp_path / "runs"
    marks.mkdir()
    monkeypatch.setenv("DESC_RUNS", str(marks))
    jdir = tmp_path / "journal"
    svc = TimerService(tasks=TASKS, capacity=8192, executors=3, journal=jdir, stuck_after_ms=1)
    svc2 = None
    try:
        svc.start()
        with svc.client() as c:
            ids = [c.schedule("jitter", 10 * (i % 4), delay_ms=20 + i // 4).id for i in range(300)]
        wait_for(lambda: _quiet(svc) and len(_ran(marks)) >= len(ids), timeout=60, what="runs")
        taken = svc.stats()["taken_over"]
        assert taken > 0, "no takeover happened: the test did not test the race"
        svc.stop()
        assert_each_ran_once_none_early(marks, ids)
        svc2 = TimerService(tasks=TASKS, capacity=8192, executors=3, journal=jdir).start()
        assert svc2.recovery["recovered"] == 0, svc2.recovery
        svc2.stop()
        assert_each_ran_once_none_early(marks, ids)
    finally:
        stop_all(svc, svc2)
