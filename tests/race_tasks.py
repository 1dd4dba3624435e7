"""The task and the canceller processes of tests/test_races.py (the racers' skeleton,
``racing``, ``racer_client`` and ``share``, is in tests/helpers.py).

The task runs in the service's executors: it counts, in a memory-mapped file shared by
every process of the test, that timer `i` (its payload) ran, and records the id it ran
under. The file paths come from the environment, which executors inherit from the
process that started the service.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from helpers import racer_client, share, shared_array

import shmwheel
from shmwheel.segment.clock import now_ms

COUNTS_ENV = "SHMWHEEL_RACE_COUNTS"  # int32[n]: how many times timer i ran
SEEN_ENV = "SHMWHEEL_RACE_SEEN"  # int64[n]: the timer id that run of i had


def hit(i: Any) -> None:
    """The raced task: counts[i] += 1 and seen[i] = this timer's id."""
    shared_array(COUNTS_ENV, np.int32)[i] += 1
    shared_array(SEEN_ENV, np.int64)[i] = shmwheel.context().id


def canceller(name: str, workdir: str, k: int, j: int, jitter_ms: int, ready: Any, go: Any) -> None:
    """Canceller j of k (a spawned process): connect, say ready, wait for the batch; then
    cancel timers i = j, j + k, j + 2k, ... each at its own deadline plus a random offset in
    [-jitter_ms, +jitter_ms], so that cancels meet the reaper's fires; record each result
    in results[i] (1 = cancel won, 2 = lost)."""
    d = Path(workdir)
    with racer_client(name, ready, go) as client:
        ids = np.load(d / "ids.npy")
        results = np.memmap(d / "results", dtype=np.int8, mode="r+")
        mine, at = share(np.load(d / "deadlines.npy"), k, j, jitter_ms, seed=1000)
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
