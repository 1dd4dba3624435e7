"""Leases (Client.lease): beaten, released, expired exactly once and never before the last
beat's ttl, the holder named in the expiry task's context, held from several spawned
processes (the lease handed over pickled), and kept across a whole-service SIGKILL by the
journal. The race of a beat against the fire is reset's (tests/test_reset.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import json
import math
import multiprocessing as mp
import os
import pickle
import subprocess
import sys
from pathlib import Path

import lease_tasks
import pytest
from helpers import read_json_lines, wait_for

from shmwheel import Lease, TaskError, TimerService
from shmwheel.segment import layout as L

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))  # the crash harness
from journal_crash_harness import _cleanup_shm, _set_subreaper, kill_group

HERE = Path(__file__).resolve().parent
TASKS = {"expired": "lease_tasks:expired", "boom": "shmwheel.examples.tasks:fail"}


@pytest.fixture
def svc():
    with TimerService(tasks=TASKS, capacity=64, executors=2) as s:
        yield s


def expiries(log: Path, holder: str | None = None) -> list[dict]:
    return [r for r in read_json_lines(log) if holder is None or r["holder"] == holder]


def test_beat_release_and_their_outcomes(svc, tmp_path):
    log = tmp_path / "log"
    with svc.client() as c:
        lease = c.lease(5000, on_expire="expired", payload={"path": str(log)}, holder="w")
        assert isinstance(lease, Lease) and isinstance(lease, cf.Future)
        assert (lease.holder, lease.ttl_ms) == ("w", 5000)
        first = lease.deadline_ms
        assert lease.beat(20_000) and lease.deadline_ms >= first + 14_000  # a ttl of its own
        assert lease.beat() and lease.deadline_ms < first + 1_000  # back to the lease's ttl
        assert not lease.done() and not lease.running()
        assert lease.release() is True  # it was held
        assert lease.release() is False and lease.beat() is False  # over
        assert lease.result(timeout=5) == "released"
        assert lease.cancelled() and lease.done() and lease.exception() is None
        # a lease without on_expire: no task, only the outcome
        bare = c.lease(30)
        assert bare.result(timeout=10) == "expired" and not bare.cancelled()
        assert bare.beat() is False and bare.release() is False
        assert asyncio.run(_awaited(c.lease(30))) == "expired"
    assert expiries(log) == []  # the released lease never expired


async def _awaited(lease: Lease) -> str:
    return await lease


def test_expiry_runs_once_never_early_and_names_its_holder(svc, tmp_path):
    log = tmp_path / "log"
    with svc.client() as c:
        lease = c.lease(60, on_expire="expired", payload={"path": str(log)}, holder="h1")
        for _ in range(3):
            assert lease.beat()
        assert lease.result(timeout=10) == "expired"
        assert lease.beat() is False and lease.release() is False
        failing = c.lease(10, on_expire="boom", holder="h2")
        assert failing.result(timeout=10) == "expired"
        assert isinstance(failing.exception(), TaskError)  # what its task raised
    (row,) = expiries(log)
    assert (row["id"], row["holder"], row["key"]) == (lease.id, "h1", None)
    assert row["deadline_ms"] == lease.deadline_ms  # the last beat's deadline
    assert row["run_ns"] >= lease.deadline_ms * 1_000_000  # never before it


def test_bad_arguments_raise_at_the_call(svc):
    with svc.client() as c:
        for ttl in (0, -1, math.nan, math.inf, 2**62):
            with pytest.raises(ValueError):
                c.lease(ttl)
        with pytest.raises(TypeError):
            c.lease("100")
        with pytest.raises(TypeError):
            c.lease(100, holder=7)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="unknown task"):
            c.lease(100, on_expire="nope")
        with pytest.raises(TypeError):
            c.lease(100, payload=object())
        lease = c.lease(60_000)
        with pytest.raises(ValueError):
            lease.beat(0)
        for bad in (-5, math.nan, math.inf, 2**62):
            with pytest.raises(ValueError):
                lease.beat(ttl_ms=bad)
        for bad in ("5", True):
            with pytest.raises(TypeError):
                lease.beat(bad)
        with pytest.raises(TypeError):
            lease.beat(1, 2)
        with pytest.raises(TypeError):
            lease.beat(ttl=5)
        assert lease.beat(ttl_ms=30_000) and lease.beat(None)
        assert lease.release()
    with pytest.raises(ValueError, match="reserved"):
        TimerService(tasks={L.NO_TASK: "shmwheel.examples.tasks:noop"})


def test_a_lease_pickles_with_its_holder_and_ttl(svc):
    with svc.client() as c:
        lease = c.lease(60_000, holder="p")
        back = pickle.loads(pickle.dumps(lease))
        assert type(back) is Lease and back == lease
        assert (back.id, back.holder, back.ttl_ms) == (lease.id, "p", 60_000)
        assert back.beat() and back.release() and lease.result(timeout=5) == "released"


# -- several holders, each a spawned process ---------------------------------------------
TTL_MS, BEAT_MS = 1500, 20


def test_leases_held_from_spawned_processes(tmp_path):
    """Four holders, each beating the lease it was handed: "kept" beats throughout (never
    expires), "quits" stops beating (expires once, at its last beat's deadline, and its late
    beat is False), "frees" releases (never expires), "plain" beats, then releases. Each
    lease is made once its holder process is up, and handed to it through a queue."""
    log = tmp_path / "expired.jsonl"
    spawn = mp.get_context("spawn")
    plan = {"kept": "beat", "quits": "stop", "frees": "release", "plain": "beat"}
    with TimerService(tasks=TASKS, capacity=64, executors=2) as svc, svc.client() as c:
        handed, ready = {h: spawn.Queue() for h in plan}, {h: spawn.Event() for h in plan}
        long = {h: spawn.Event() for h in plan}
        stop, after = spawn.Event(), spawn.Event()
        procs = {
            h: spawn.Process(
                target=lease_tasks.hold,
                args=(
                    ready[h],
                    handed[h],
                    str(tmp_path / f"{h}.json"),
                    BEAT_MS,
                    long[h],
                    stop,
                    then,
                    after,
                ),
            )
            for h, then in plan.items()
        }
        leases: dict[str, Lease] = {}
        try:
            for p in procs.values():
                p.start()
            payload = {"path": str(log)}
            for h in plan:
                assert ready[h].wait(60), f"holder {h} never started"
                leases[h] = c.lease(TTL_MS, on_expire="expired", payload=payload, holder=h)
                handed[h].put(leases[h])
            for h in plan:  # each beaten for longer than its ttl
                assert long[h].wait(60), f"holder {h} never beat for long"
            stop.set()
            wait_for(lambda: expiries(log, "quits"), timeout=30, what="the quitter's expiry")
            after.set()
            for p in procs.values():
                p.join(60)
            assert [p.exitcode for p in procs.values()] == [0] * len(plan)
        finally:
            for p in procs.values():
                if p.is_alive():
                    p.kill()
                    p.join()
        assert leases["quits"].result(timeout=10) == "expired"
        late_ms = svc.stats()["lateness_ms"]["max"]
    reports = {h: json.loads((tmp_path / f"{h}.json").read_text()) for h in plan}
    for h, rep in reports.items():
        assert rep["holder"] == h
        _check_beats(h, leases[h].deadline_ms, rep["rows"], expiries(log, h))  # (as made)
    rows = reports["quits"]["rows"]
    beats = [r for r in rows if r[0] == "beat"]
    assert beats and all(ok for _, _, _, ok, _ in beats)
    (row,) = expiries(log, "quits")  # once
    _, _, returned_ns, _, deadline = beats[-1]
    assert row["deadline_ms"] == deadline  # the last beat's, not an earlier one
    assert deadline <= returned_ns // 1_000_000 + TTL_MS + 1  # ttl from that beat
    assert row["run_ns"] >= deadline * 1_000_000  # never before it
    assert row["run_ns"] / 1e6 - deadline <= late_ms + 50  # within the service's lateness
    assert rows[-1][0] == "late beat" and rows[-1][3] is False  # it learns it was dead
    for h in ("frees", "plain"):
        assert reports[h]["rows"][-1][0] == "release" and reports[h]["rows"][-1][3] is True
    assert reports["kept"]["rows"][-1][3] is True  # still held at the end: released then


def _check_beats(holder: str, made_ms: int, rows: list, expired: list[dict]) -> None:
    """The invariants of one holder's calls, whatever the machine's load. The lease as made
    promises it until its deadline `made_ms`, and a beat that returned True at `called`
    until `called` + ttl at least: its deadline is no earlier, no call before the promise is
    False (a timer never fires early), and the lease may expire only if some call came
    after a promise had passed (else it was beaten throughout, and must not have
    expired)."""
    assert len(expired) <= 1, f"{holder}: expired {len(expired)} times"
    promised, late = made_ms * 1_000_000, False
    for what, called, returned, ok, after in rows:
        if not ok:
            assert returned >= promised, f"{holder}: {what} lost before the lease's deadline"
        late |= called >= promised
        if ok and what == "beat":
            promised = called + TTL_MS * 1_000_000
            assert after * 1_000_000 >= promised, f"{holder}: a beat left the deadline short"
    if expired and holder != "quits":
        assert late, f"{holder} expired while beaten within its ttl"


# -- a whole-service SIGKILL -----------------------------------------------------------------
def test_a_lease_survives_a_whole_service_sigkill(tmp_path):
    """The embedding process and every service process SIGKILLed; the service started again
    on its journal keeps the lease (same id, the last beat's deadline) and expires it once,
    never early; a lease released before the kill stays released."""
    name = f"s{os.getpid()}-lease"
    journal = tmp_path / "journal"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE)]))
    subreaper = _set_subreaper(True)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "lease_tasks.py"), str(tmp_path), name, str(journal)],
        cwd=str(HERE.parent),
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ready = tmp_path / "ready.json"
        wait_for(lambda: ready.exists() or proc.poll() is not None, timeout=60, what="driver")
        assert ready.exists(), f"the driver exited {proc.returncode}"
        kill_group(proc.pid, proc)
        info = json.loads(ready.read_text())
        with TimerService(name, tasks=TASKS, capacity=64, executors=1, journal=journal) as s:
            assert s.recovery["recovered"] == 1  # the kept lease; not the released one
            log = tmp_path / "expired.jsonl"
            wait_for(lambda: expiries(log), timeout=30, what="the kept lease's expiry")
            wait_for(lambda: s.stats()["pending"] == 0, what="nothing left")
        rows = expiries(log)
        assert [(r["id"], r["holder"]) for r in rows] == [(info["kept"], "kept")]
        assert rows[0]["deadline_ms"] == info["deadline"]
        assert rows[0]["run_ns"] >= info["deadline"] * 1_000_000
    finally:
        if proc.poll() is None:
            kill_group(proc.pid, proc)
        _cleanup_shm(name)
        if subreaper:
            _set_subreaper(False)
