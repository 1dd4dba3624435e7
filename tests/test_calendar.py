"""Calendar timers (Client.schedule(cron=...)): the next run is cronsim's answer in the
timer's zone (the DST rules of docs/api.md pinned by a table), a run each period, misfires
"skip" and "once" after a stop and a restart on the journal with each fire time run at
most once, and every bad argument refused at the call."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from helpers import now_ms, read_json_lines, wait_for

from shmwheel import TimerService
from shmwheel.service import calendar as CAL

TASKS = {"stamp": "calendar_tasks:stamp"}
WALLS = ("wall0_ns", "wall1_ns")
LOAD_MS = 250  # how much later than its fire time a deadline may be made on a busy machine
EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)
BERLIN, NEW_YORK = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")


def at(zone: ZoneInfo, *fields: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*fields, tzinfo=zone, fold=fold)


# (expression, zone, after, the next two fire times): the DST rules docs/api.md states
DST = [
    # spring, Berlin 2026-03-29 02:00 -> 03:00: a daily 02:30 that does not exist runs at
    # 03:00, the first valid time after the gap; a */30 loses the missing half hours
    (
        "30 2 * * *",
        BERLIN,
        at(BERLIN, 2026, 3, 28, 12),
        [at(BERLIN, 2026, 3, 29, 3), at(BERLIN, 2026, 3, 30, 2, 30)],
    ),
    (
        "*/30 * * * *",
        BERLIN,
        at(BERLIN, 2026, 3, 29, 1, 40),
        [at(BERLIN, 2026, 3, 29, 3), at(BERLIN, 2026, 3, 29, 3, 30)],
    ),
    # autumn, Berlin 2026-10-25 03:00 -> 02:00: a daily 02:30 runs once, at the first
    # occurrence; a */30 runs in both
    (
        "30 2 * * *",
        BERLIN,
        at(BERLIN, 2026, 10, 24, 12),
        [at(BERLIN, 2026, 10, 25, 2, 30), at(BERLIN, 2026, 10, 26, 2, 30)],
    ),
    (
        "*/30 * * * *",
        BERLIN,
        at(BERLIN, 2026, 10, 25, 2, 10),
        [at(BERLIN, 2026, 10, 25, 2, 30), at(BERLIN, 2026, 10, 25, 2, 0, fold=1)],
    ),
    # New York: spring 2026-03-08 02:00 -> 03:00, autumn 2026-11-01 02:00 -> 01:00
    (
        "15 2 * * *",
        NEW_YORK,
        at(NEW_YORK, 2026, 3, 7, 12),
        [at(NEW_YORK, 2026, 3, 8, 3), at(NEW_YORK, 2026, 3, 9, 2, 15)],
    ),
    (
        "30 1 * * *",
        NEW_YORK,
        at(NEW_YORK, 2026, 10, 31, 12),
        [at(NEW_YORK, 2026, 11, 1, 1, 30), at(NEW_YORK, 2026, 11, 2, 1, 30)],
    ),
]


@pytest.mark.parametrize("expr,zone,after,expected", DST, ids=[f"{d[0]}@{d[2]}" for d in DST])
def test_dst_rules(expr, zone, after, expected):
    spec = CAL.spec(expr, zone.key, "skip", None)
    first = CAL.next_fire(spec, after)
    second = CAL.next_fire(spec, first)
    assert [first, second] == expected  # aware equality: the same instants
    assert [first.utcoffset(), second.utcoffset()] == [e.utcoffset() for e in expected]


TABLE = [
    ("* * * * *", None),
    ("*/5 * * * * *", "UTC"),  # seconds first: every 5 s
    ("0 3 * * *", "Europe/Berlin"),
    ("30 2 * * 1-5", "America/New_York"),
    ("0 0 L * *", "Asia/Tokyo"),
    ("0 12 * * MON#2", "Australia/Lord_Howe"),  # a half-hour DST shift
    ("15 10 1 JAN *", "Pacific/Chatham"),
]


def test_the_next_run_is_cronsims_answer(tmp_path):
    with TimerService(tasks=TASKS, capacity=64, executors=1) as svc, svc.client() as c:
        for expr, tz in TABLE:
            wall0, mono0 = time.time_ns(), time.monotonic_ns()
            h = c.schedule("stamp", {"path": str(tmp_path / "x")}, cron=expr, tz=tz)
            wall1, mono1 = time.time_ns(), time.monotonic_ns()
            zone = ZoneInfo(tz or "UTC")
            want = next(CronSim(expr, dt.datetime.fromtimestamp(wall0 / 1e9, zone)))
            # its monotonic deadline: cronsim's instant on the monotonic clock, whose offset
            # from the wall clock during the call lies in [mono0 - wall1, mono1 - wall0]
            f = (want - EPOCH) // dt.timedelta(microseconds=1) * 1000
            lo, hi = (f + mono0 - wall1) / 1e6, (f + mono1 - wall0) / 1e6 + 1
            assert lo <= h.deadline_ms <= hi, (expr, tz, want)
            assert c.handle(h.id).deadline_ms == h.deadline_ms
            assert h.cancel()


def fire_s(r: dict) -> int:
    """The whole wall-clock second of a run's deadline, checked not to be before it: the
    deadline is a fire time rounded up to the ms, made monotonic by reading both clocks
    (wall first); on the wall clock it lies between lo and hi (the wall clock read on
    either side of the run's monotonic start)."""
    lo, hi = (r[w] / 1e6 - (r["mono_ns"] / 1e6 - r["deadline_ms"]) for w in WALLS)
    second = int(hi // 1000)  # the whole second at or before it
    assert lo <= second * 1000 + LOAD_MS, (lo, hi)  # after it (a busy machine: later), not early
    return second


def test_a_run_each_period_at_its_fire_time(tmp_path):
    log = tmp_path / "runs"
    with TimerService(tasks=TASKS, capacity=64, executors=1) as svc, svc.client() as c:
        h = c.schedule("stamp", {"path": str(log)}, cron="* * * * * *", key="k")
        wait_for(lambda: len(read_json_lines(log)) >= 3, timeout=30, what="three runs")
        h.cancel()  # (False if a run is in flight: it stops after that run)
        late_max = svc.stats()["lateness_ms"]["max"]
    rows = read_json_lines(log)[:3]
    assert [r["attempt"] for r in rows] == [1, 2, 3] and {r["key"] for r in rows} == {"k"}
    assert rows[0]["deadline_ms"] == h.deadline_ms
    for r in rows:
        assert r["mono_ns"] >= r["deadline_ms"] * 1_000_000  # never early
        assert r["mono_ns"] / 1e6 - r["deadline_ms"] <= late_max + 50
    seconds = [fire_s(r) for r in rows]
    assert [b - a for a, b in itertools.pairwise(seconds)] == [1, 1]  # each second, once


@pytest.mark.parametrize("misfire", ["skip", "once"])
def test_misfires_after_a_restart_on_the_journal(tmp_path, misfire):
    """Stopped with a journal for more than two fire times: on the restart "once" runs one
    catch-up run for the fire times missed, "skip" none; then a run each second; no fire
    time (deadline) runs twice."""
    log, journal = tmp_path / "runs", tmp_path / "journal"
    opts = {"tasks": TASKS, "capacity": 64, "executors": 1, "journal": journal}
    with TimerService(**opts) as svc, svc.client() as c:
        h = c.schedule("stamp", {"path": str(log)}, cron="* * * * * *", misfire=misfire)
        wait_for(lambda: len(read_json_lines(log)) >= 2, timeout=30, what="two runs")
    stopped_ms = now_ms()
    before = read_json_lines(log)
    wait_for(lambda: now_ms() > stopped_ms + 2500, what="time down")
    with TimerService(**opts) as svc:
        assert svc.recovery["recovered"] == 1
        wait_for(lambda: len(read_json_lines(log)) >= len(before) + 2, timeout=30, what="runs")
    after = read_json_lines(log)[len(before) :]
    late = [r for r in after if r["mono_ns"] / 1e6 - r["deadline_ms"] > CAL.MISFIRE_GRACE_MS]
    if misfire == "once":  # one run for all missed: the journal's next, due while it was down
        assert late == after[:1] and after[0]["deadline_ms"] < stopped_ms + 1000 + LOAD_MS
        regular = after[1:]
    else:
        assert late == []  # skipped
        regular = after
    assert regular and regular[0]["deadline_ms"] > stopped_ms + 2500  # no missed one runs
    seconds = [fire_s(r) for r in before + regular]
    assert len(set(seconds)) == len(seconds)  # no fire time ran twice
    assert all(b - a == 1 for a, b in itertools.pairwise(fire_s(r) for r in regular))
    assert [r["attempt"] for r in before] == list(range(1, len(before) + 1))
    assert {r["id"] for r in before + after} == {h.id}  # the same timer, kept by the journal


def test_bad_calendars_raise_at_the_call():
    with TimerService(tasks=TASKS, capacity=64, executors=1) as svc, svc.client() as c:
        now = now_ms()
        for kw in (
            {"cron": "61 * * * *"},
            {"cron": "* * * *"},
            {"cron": "0 0 30 2 *"},
            {"cron": "* * * * *", "tz": "Mars/Olympus"},
            {"cron": "* * * * *", "tz": "../etc/passwd"},
            {"cron": "* * * * *", "misfire": "all"},
            {"cron": "* * * * *", "delay_ms": 5},
            {"cron": "* * * * *", "deadline_ms": now + 5},
            {"cron": "* * * * *", "at": dt.datetime.now(dt.UTC)},
            {"cron": "* * * * *", "every_ms": 1000},
            {"tz": "UTC", "delay_ms": 5},
            {"misfire": "once", "delay_ms": 5},
        ):
            with pytest.raises(ValueError):
                c.schedule("stamp", None, **kw)
        for kw in ({"cron": 5}, {"cron": "* * * * *", "tz": 1}, {"cron": "* * * * *", "key": 1.5}):
            with pytest.raises(TypeError):
                c.schedule("stamp", None, **kw)
        with pytest.raises(ValueError, match="unknown task"):
            c.schedule("nope", None, cron="* * * * *")
        assert svc.stats()["pending"] == 0  # nothing was taken
