"""Cancel against fire across processes, at scale: 100,000 races, one winner each."""

from __future__ import annotations

import time

import numpy as np
import race_tasks
from helpers import now_ms, racing, wait_for

from shmwheel import TimerService

N = 100_000
CANCELLERS = 3
LEAD_MS = 400  # the first deadline, from the schedule_many call
WINDOW_MS = 400  # deadlines spread evenly over [LEAD_MS, LEAD_MS + WINDOW_MS)
JITTER_MS = 3  # each cancel is aimed at its timer's deadline +- this


def test_cancel_races_fire_across_processes_one_winner_each(tmp_path, monkeypatch):
    counts_path, seen_path = tmp_path / "counts", tmp_path / "seen"
    np.memmap(counts_path, dtype=np.int32, mode="w+", shape=N).flush()
    np.memmap(seen_path, dtype=np.int64, mode="w+", shape=N).flush()
    np.memmap(tmp_path / "results", dtype=np.int8, mode="w+", shape=N).flush()
    monkeypatch.setenv(race_tasks.COUNTS_ENV, str(counts_path))  # executors inherit it
    monkeypatch.setenv(race_tasks.SEEN_ENV, str(seen_path))
    t0 = time.monotonic()
    with (
        TimerService(tasks={"hit": "race_tasks:hit"}, capacity=2 * N, executors=2) as svc,
        svc.client() as c,
    ):
        with racing(
            race_tasks.canceller, svc.name, str(tmp_path), CANCELLERS, JITTER_MS, "canceller"
        ) as release:
            hs = c.schedule_many("hit", LEAD_MS + np.arange(N) * (WINDOW_MS / N), list(range(N)))
            scheduled_by = now_ms()
            np.save(tmp_path / "ids.npy", hs.ids)
            np.save(tmp_path / "deadlines.npy", hs.deadlines_ms)
            release()
            margin = int(hs.deadlines_ms.min()) - scheduled_by  # printed: ~150-250 ms
        wait_for(
            lambda: (s := svc.stats())["completed"] + s["cancelled"] + s["task_errors"] >= N,
            30,
            lambda: f"every timer: {svc.stats()}",
        )
        time.sleep(0.1)  # a run twice would show up now
        st = svc.stats()
    elapsed = time.monotonic() - t0

    counts = np.fromfile(counts_path, dtype=np.int32)
    seen = np.fromfile(seen_path, dtype=np.int64)
    results = np.fromfile(tmp_path / "results", dtype=np.int8)
    won, lost = results == 1, results == 2
    print(
        f"\n{N} races: cancel won {int(won.sum())}, fire won {int(lost.sum())} "
        f"({elapsed:.1f} s; stats { ({k: st[k] for k in ('cancelled', 'completed', 'early')}) }, "
        f"lateness {st['lateness_ms']}, scheduled {margin} ms before the first deadline)"
    )
    assert (won | lost).all(), f"{int((~(won | lost)).sum())} timers were never cancelled"
    twice = np.flatnonzero(counts > 1)
    assert not len(twice), f"{len(twice)} timers ran more than once, e.g. {twice[:5]}"
    bad_won = np.flatnonzero(won & (counts != 0))
    assert not len(bad_won), (
        f"{len(bad_won)} timers ran although their cancel returned True, e.g. {bad_won[:5]}"
    )
    bad_lost = np.flatnonzero(lost & (counts != 1))
    assert not len(bad_lost), (
        f"{len(bad_lost)} timers never ran although their cancel returned False, "
        f"e.g. {bad_lost[:5]}"
    )
    assert (seen[lost] == hs.ids[lost]).all(), "a run carried another timer's payload"
    assert won.sum() >= N // 100 and lost.sum() >= N // 100, "the test must really race"
    assert st["cancelled"] == won.sum() and st["completed"] == lost.sum()
    assert st["task_errors"] == 0 and st["early"] == 0 and st["pending"] == 0
