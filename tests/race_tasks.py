"""The task and the canceller processes of tests/test_races.py.

The task runs in the service's executors: it counts, in a memory-mapped file shared by
every process of the test, that timer `i` (its payload) ran, and records the id it ran
under. The file paths come from the environment, which executors inherit from the
process that started the service.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import shmwheel

COUNTS_ENV = "SHMWHEEL_RACE_COUNTS"  # int32[n]: how many times timer i ran
SEEN_ENV = "SHMWHEEL_RACE_SEEN"  # int64[n]: the timer id that run of i had

_maps: tuple[np.ndarray, np.ndarray] | None = None  # opened once per executor


def hit(i: Any) -> None:
    """The raced task: counts[i] += 1 and seen[i] = this timer's id."""
    global _maps
    if _maps is None:
        _maps = (
            np.memmap(os.environ[COUNTS_ENV], dtype=np.int32, mode="r+"),
            np.memmap(os.environ[SEEN_ENV], dtype=np.int64, mode="r+"),
        )
    counts, seen = _maps
    counts[i] += 1
    seen[i] = shmwheel.context().id


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def canceller(name: str, workdir: str, k: int, j: int, jitter_ms: int, ready: Any, go: Any) -> None:
    """Canceller j of k (a spawned process): connect, say ready, wait for the batch; then
    cancel timers i = j, j + k, j + 2k, ... each at its own deadline plus a random offset in
    [-jitter_ms, +jitter_ms], so that cancels meet the reaper's fires; record each result
    in results[i] (1 = cancel won, 2 = lost)."""
    d = Path(workdir)
    with shmwheel.connect(name) as client:
        ready.set()
        if not go.wait(60):
            raise RuntimeError("no go signal")
        ids = np.load(d / "ids.npy")
        deadlines = np.load(d / "deadlines.npy")
        results = np.memmap(d / "results", dtype=np.int8, mode="r+")
        mine = np.arange(j, len(ids), k)
        rng = np.random.default_rng(1000 + j)
        at = deadlines[mine] + rng.integers(-jitter_ms, jitter_ms + 1, len(mine))
        order = np.argsort(at, kind="stable")
        mine, at = mine[order], at[order]
        pos = 0
        while pos < len(mine):
            end = int(np.searchsorted(at, now_ms(), side="right"))
            if end == pos:
                time.sleep(0.0002)
                continue
            batch = mine[pos:end]
            won = client.cancel_many(ids[batch])
            results[batch] = np.where(won, 1, 2)
            pos = end
        results.flush()
