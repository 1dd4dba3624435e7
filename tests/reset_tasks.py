"""The task and the racer processes of tests/test_reset.py's race: resets and cancels from
several processes against each other and against the reaper's fire.

The task runs in the service's executors: it counts, in memory-mapped files shared by
every process of the test, that timer `i` (its payload) ran, with the deadline its run
carried (``shmwheel.context().deadline_ms``) and when it started. Each racer acts on every
timer, at the timer's deadline plus a random offset, with a reset to a new deadline a few
ms ahead (most of the time) or a cancel, and records what each call returned.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from helpers import now_ms, racer_client, share, shared_array, sleep_until_ms

import shmwheel

RUN_ENV = "SHMWHEEL_RESET_RUNS"  # int64[n, 3]: runs, the run's deadline_ms, its start (ns)
CANCEL_SHARE = 0.15  # the part of a racer's actions that are cancels
AHEAD_MS = 6  # a reset moves the deadline to now + [0, AHEAD_MS] ms


def stamp(i: Any) -> None:
    """The raced task: runs[i] = (runs + 1, this run's deadline, its start in ns)."""
    start = time.monotonic_ns()
    runs = shared_array(RUN_ENV, np.int64).reshape(-1, 3)
    runs[i, 0] += 1
    runs[i, 1] = shmwheel.context().deadline_ms
    runs[i, 2] = start


def resetter(name: str, workdir: str, k: int, j: int, jitter_ms: int, ready: Any, go: Any) -> None:
    """Racer j of k (a spawned process; see helpers.racing): every timer, at its
    deadline + [-jitter_ms, jitter_ms], is reset to now + [0, AHEAD_MS] ms or cancelled.
    Writes acts_<j>.npy: per timer (kind 1 reset / 2 cancel, returned 1 True / 0 False,
    the deadline a reset asked for)."""
    d = Path(workdir)
    rng = np.random.default_rng(7000 + j)
    with racer_client(name, ready, go) as client:
        ids = np.load(d / "ids.npy")
        deadlines = np.load(d / "deadlines.npy")
        # every racer acts on every timer: racer j's "share" of a k = 1 split
        order, at = share(deadlines, 1, 0, jitter_ms, seed=8000 + j)
        acts = np.zeros((len(ids), 3), np.int64)
        cancels = rng.random(len(ids)) < CANCEL_SHARE
        ahead = rng.integers(0, AHEAD_MS + 1, len(ids))
        for i, t in zip(order.tolist(), at.tolist(), strict=True):
            sleep_until_ms(t)
            if cancels[i]:
                acts[i] = (2, client.cancel(int(ids[i])), 0)
            else:
                want = now_ms() + int(ahead[i])
                acts[i] = (1, client.reset(int(ids[i]), deadline_ms=want), want)
        np.save(d / f"acts_{j}.npy", acts)
