"""The supervisor's watchdog (shmwheel/service/supervisor/watchdog.py): each sickness induced, then
detected within its period, repaired or failed loudly, nothing run twice or early; a
corrupt owner word never unlinks a live segment."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import TASKS, assert_once_never_early, read_log, wait_for

from shmwheel import ShmwheelError, TimerService
from shmwheel.segment import census, shm
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from shmwheel.service.supervisor import watchdog as W

# run alone (no other xdist worker's test meanwhile): stalls and restarts are timed
pytestmark = pytest.mark.exclusive


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    """A shorter stall bound than the default, so each case takes seconds."""
    monkeypatch.setattr(W, "STALL_S", 1.0)
    monkeypatch.delenv(W.ENV, raising=False)


@contextlib.contextmanager
def stopped(pid: int):
    """SIGSTOP `pid`; SIGCONT it on the way out, whatever happened (it may be dead)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def health(svc: TimerService) -> dict:
    return svc.stats()["health"]


def schedule(c, log: Path, prefix: str, n: int, spread_ms: int, sleep_ms: float = 0.0) -> list:
    tags = [f"{prefix}{i}" for i in range(n)]
    for i, tag in enumerate(tags):
        payload = {"path": str(log), "tag": tag, "sleep_ms": sleep_ms}
        c.schedule("record", payload, delay_ms=1 + i * spread_ms // max(1, n))
    return tags


def finish(svc: TimerService, log: Path, tags: list) -> None:
    """Every timer ran once, never early; a run an executor was killed in (stopped
    mid-task) is recorded crashed, not run again."""
    done = lambda: svc.stats()["completed"] + svc.stats()["crashed"]  # noqa: E731
    try:
        wait_for(lambda: done() >= len(tags), timeout=60, what="every run")
    except AssertionError:  # say where the runs are (seen once under a loaded CI run)
        st = svc.stats()
        keys = ("scheduled", "fired", "completed", "crashed", "pending", "in_flight")
        raise AssertionError(
            f"{len(tags)} timers, {len(read_log(log))} log lines, "
            + ", ".join(f"{k} {st[k]}" for k in keys)
            + f", restarts {svc.restarts}, health {st['health']}"
        ) from None
    time.sleep(0.2)
    st = svc.stats()
    assert st["completed"] + st["crashed"] == len(tags) and st["pending"] == 0
    assert st["in_flight"] == 0 and st["early"] == 0
    rows = read_log(log)
    if st["crashed"]:  # at most once each; the crashed run may have written its line
        ran = {r[0] for r in rows}
        assert len(rows) == len(ran) and len(ran) >= len(tags) - st["crashed"]
        tags = sorted(ran)
    assert_once_never_early(rows, tags)


def test_health_is_ok_in_stats_and_readable_from_any_process():
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        assert health(svc) == {"state": "ok", "reasons": []}
        assert c.stats()["health"] == {"state": "ok", "reasons": []}
        assert svc.mem.header[L.W_HEALTH] == W.OK and svc.mem.header[L.W_HEALTH_REASONS] == 0


def test_watchdog_off_by_environment(monkeypatch):
    monkeypatch.setenv(W.ENV, "0")
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
        time.sleep(2 * W.PERIOD_S)
        assert health(svc) == {"state": "ok", "reasons": ["watchdog_off"]}


@pytest.mark.parametrize("role", ["coordinator", "exec0"])
def test_stopped_process_with_work_is_killed_and_restarted(role, tmp_path):
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=20_000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "a", 300, 300)
        pid = svc.procs[role].pid
        t0 = time.monotonic()
        with stopped(pid):
            tags += schedule(c, log, "b", 300, 300)  # work for the stopped process
            wait_for(lambda: svc.restarts.get(role) == 1, timeout=10, what=f"{role} restarted")
            took = time.monotonic() - t0
            assert W.STALL_S <= took <= W.STALL_S + 2 * W.PERIOD_S + 0.5, took
        h = health(svc)
        assert h["state"] == "degraded" and "stopped" in h["reasons"]
        finish(svc, log, tags)
        assert svc.restarts == {role: 1}


def test_stalled_coordinator_without_stop_signal_is_killed(tmp_path, monkeypatch):
    """A coordinator that has work and whose rings do not move (here: its loop is made
    to drain nothing) is killed once it has made no progress for STALL_S."""
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=20_000, executors=1) as svc, svc.client() as c:
        pid = svc.procs["coordinator"].pid
        with stopped(pid):  # stopped, but its state hidden from the stopped check
            monkeypatch.setattr(W, "proc_state", lambda pid: "S")
            tags = schedule(c, log, "s", 200, 100)
            wait_for(lambda: svc.restarts.get("coordinator") == 1, timeout=10, what="restart")
        assert "stalled" in health(svc)["reasons"]
        finish(svc, log, tags)


def test_nobody_is_judged_stalled_while_another_process_is_stopped(tmp_path, monkeypatch):
    """A process SIGSTOPped while it holds the segment lock blocks the others: they show
    work and no progress through no fault of their own. The stopped one is killed first;
    the others' stall clocks wait for it. Here the reaper's stall is real but hidden (it is
    stopped with its state reported running) and has run most of STALL_S when the
    coordinator is stopped: the coordinator must still be the first one restarted."""
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=20_000, executors=1) as svc, svc.client() as c:
        wd, reaper = svc._watchdog, svc.procs["reaper"].pid
        real = W.proc_state
        monkeypatch.setattr(W, "proc_state", lambda pid: "S" if pid == reaper else real(pid))
        tags = schedule(c, log, "r", 100, 2000)
        # the schedules linked first: with records left in its ring, a coordinator waiting
        # on a lock the (hidden) stopped reaper holds has work and no progress of its own,
        # and its stall clock would run from the reaper's stop (seen once in a clean run)
        wait_for(lambda: not any(r.pending() for r in svc.mem.producer), what="the links")
        with stopped(reaper):
            # the reaper has work and no progress: its clock stops being refreshed
            clock = lambda: time.monotonic() - wd.progress.get("reaper", (0, 1e18))[1]  # noqa: E731
            wait_for(lambda: clock() >= 0.6 * W.STALL_S, timeout=10, what="the reaper's stall")
            with stopped(svc.procs["coordinator"].pid):
                wait_for(lambda: svc.restarts, timeout=10, what="a restart")
                assert svc.restarts == {"coordinator": 1}, svc.restarts
            wait_for(lambda: svc.restarts.get("reaper") == 1, timeout=10, what="the reaper's")
        assert {"stopped", "stalled"} <= set(health(svc)["reasons"])
        finish(svc, log, tags)


def test_a_reaper_waiting_for_busy_executors_is_not_judged_stalled(tmp_path):
    """Executors busy with long tasks and their dispatch rings full: due timers wait (in
    the reaper's backlog and in the wheel) and the reaper loops, alive, for several stall
    bounds. It is late, and says so, but it is not stalled: nothing is restarted."""
    log = tmp_path / "log"
    with TimerService(
        tasks=TASKS, capacity=1000, executors=1, dispatch_capacity=8
    ) as svc, svc.client() as c:  # fmt: skip
        tags = schedule(c, log, "long", 1, 0, sleep_ms=3500)
        wait_for(lambda: len(read_log(log)) == 1, what="the long task to start")
        tags += schedule(c, log, "after", 40, 200)  # room for 8: the rest wait
        time.sleep(3 * W.STALL_S)
        assert svc.restarts == {}, (svc.restarts, health(svc))
        assert "stalled" not in health(svc)["reasons"]
        finish(svc, log, tags)


@pytest.mark.parametrize("word", [C.RING_HEAD, C.RING_TAIL], ids=["head", "tail"])
def test_result_ring_index_moved_by_a_stray_write_is_rederived(word, tmp_path, caplog):
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=20_000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "a", 200, 50)
        wait_for(lambda: svc.stats()["completed"] == 200, what="the first runs")
        ring = svc.mem.results[0]
        ring.words[word] += 123_457  # a stray write, while nobody writes it
        tags += schedule(c, log, "b", 1500, 300)
        with caplog.at_level(logging.ERROR, "shmwheel.service"):
            # the watchdog's thread repairs the index, then logs: wait for both
            wait_for(
                lambda: not ring.corrupt() and "re-derived its" in caplog.text,
                timeout=5,
                what="the index re-derived and logged",
            )
        # the tick that repaired the index publishes the health after it: wait for it
        wait_for(lambda: "ring_index" in health(svc)["reasons"], timeout=2, what="degraded")
        finish(svc, log, tags)


@pytest.mark.parametrize(
    "word, value",
    [(L.W_STOPPING, 1), (L.W_META_LEN, 10**6), (L.W_MAGIC, 0), (L.W_READY, 1 << 40)],
    ids=["stopping", "meta_len", "magic", "ready"],
)
def test_header_word_out_of_range_is_restored_without_a_crash_loop(word, value, tmp_path):
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=20_000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "h", 500, 600)
        svc.mem.header[word] = value
        os.kill(svc.procs["coordinator"].pid, signal.SIGKILL)  # its restart reads the header
        wait_for(lambda: "header" in health(svc)["reasons"], timeout=2, what="detected")
        finish(svc, log, tags)
        assert all(n <= 2 for n in svc.restarts.values()), svc.restarts
        assert health(svc)["state"] == "degraded"


def test_timers_pending_past_their_bound_are_flagged(tmp_path, monkeypatch):
    monkeypatch.setattr(W, "LATE_S", 0.5)
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "slow", 1, 1, sleep_ms=2000)  # holds the only executor
        tags += schedule(c, log, "q", 5, 5)
        wait_for(lambda: "late" in health(svc)["reasons"], timeout=2.5, what="late flagged")
        assert health(svc)["state"] == "degraded" and not svc.restarts
        finish(svc, log, tags)


def test_crash_loop_backs_off_and_fails_loudly_then_recovers(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(W, "RATE_N", 3)
    monkeypatch.setattr(W, "RATE_WINDOW_S", 2.0)
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "k", 50, 3000)
        with caplog.at_level(logging.WARNING, "shmwheel.service"):
            for k in range(1, 5):
                os.kill(svc.procs["reaper"].pid, signal.SIGKILL)
                wait_for(lambda k=k: svc.restarts.get("reaper") == k, timeout=5, what="restart")
                wait_for(lambda: svc.mem.header[L.W_READY] & L.READY_REAPER, what="ready")
        h = health(svc)
        assert h["state"] == "failed" and "restart_rate" in h["reasons"]
        assert any(r.levelno == logging.CRITICAL for r in caplog.records)
        wait_for(lambda: svc.mem.header[L.W_JREFUSE] == 1, timeout=1, what="the gate")
        with pytest.raises(ShmwheelError, match=r"has failed .*restart_rate"):
            c.schedule("record", {"path": str(log), "tag": "refused"}, delay_ms=1)
        wait_for(lambda: health(svc)["state"] != "failed", timeout=10, what="recovered")
        tags += schedule(c, log, "after", 5, 5)
        finish(svc, log, tags)


def test_role_that_cannot_start_fails_loudly_then_recovers(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(W, "RATE_WINDOW_S", 2.0)
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "f", 20, 200)
        monkeypatch.setenv("SHMWHEEL_LOG_LEVEL", "NO-SUCH-LEVEL")  # each new process dies
        with caplog.at_level(logging.WARNING, "shmwheel.service"):
            os.kill(svc.procs["reaper"].pid, signal.SIGKILL)
            wait_for(lambda: health(svc)["state"] == "failed", timeout=10, what="failed")
        assert "restart_rate" in health(svc)["reasons"]
        assert any(r.levelno == logging.CRITICAL for r in caplog.records)
        assert svc.restarts["reaper"] <= W.START_FAILS + 1, "backed off, no spin"
        monkeypatch.delenv("SHMWHEEL_LOG_LEVEL")
        wait_for(lambda: health(svc)["state"] != "failed", timeout=30, what="recovered")
        finish(svc, log, tags)


@pytest.mark.parametrize("watchdog", ["on", "off"])
def test_corrupt_owner_word_never_unlinks_a_live_segment(watchdog, tmp_path, monkeypatch):
    if watchdog == "off":  # process.py's cross-check alone
        monkeypatch.setenv(W.ENV, "0")
    dead = subprocess.Popen(["true"])
    dead.wait()
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "o", 300, 1500)
        svc.mem.header[L.W_OWNER] = dead.pid  # names no live process
        for role in ("coordinator", "reaper"):  # new processes read the corrupt word
            os.kill(svc.procs[role].pid, signal.SIGKILL)
            wait_for(lambda role=role: svc.restarts.get(role) == 1, what="restarted")
        time.sleep(0.5)
        census.sweep_stale()  # as any other start on the host does: a live service stays
        assert shm.service_files(svc.name), "the live segment was unlinked"
        assert not svc.mem.header[L.W_STOPPING]
        finish(svc, log, tags)
        if watchdog == "on":
            assert svc.mem.header[L.W_OWNER] == os.getpid()
            assert "header" in health(svc)["reasons"]


def test_a_role_restarted_a_few_times_shows_degraded_at_once(tmp_path):
    """Four reaper kills within the window: health says degraded (restarts) as soon as
    the fourth restart is seen, long before the storm rule's twenty would fail it."""
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
        tags = schedule(c, log, "r", 50, 1500)
        for n in range(1, W.RESTARTS_N + 2):
            pid = svc.procs["reaper"].pid
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda n=n: svc.restarts.get("reaper") == n, what=f"restart {n}")
            wait_for(lambda pid=pid: svc.procs["reaper"].pid != pid, what="a new reaper")
        h = health(svc)
        assert h["state"] == "degraded" and "restarts" in h["reasons"], h
        assert "restart_rate" not in h["reasons"]
        finish(svc, log, tags)
