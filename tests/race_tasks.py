"""The task and the canceller processes of tests/test_races.py, and what every racing
test shares: the racer processes' start (``racing``) and each racer's share of the items
at jittered times (``share``); tests/ops_tasks.py races completions the same way.

The task runs in the service's executors: it counts, in a memory-mapped file shared by
every process of the test, that timer `i` (its payload) ran, and records the id it ran
under. The file paths come from the environment, which executors inherit from the
process that started the service.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import shmwheel
from shmwheel.segment.contract import now_ms

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


def share(
    deadlines: np.ndarray, k: int, j: int, jitter_ms: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Racer j of k's items (i = j, j + k, ...) and the time to act on each: its deadline
    plus a random offset in [-jitter_ms, +jitter_ms]; both sorted by that time."""
    mine = np.arange(j, len(deadlines), k)
    rng = np.random.default_rng(seed + j)
    at = deadlines[mine] + rng.integers(-jitter_ms, jitter_ms + 1, len(mine))
    order = np.argsort(at, kind="stable")
    return mine[order], at[order]


@contextmanager
def racing(
    target: Callable[..., None], name: str, workdir: str, k: int, jitter_ms: int, who: str
) -> Iterator[Callable[[], None]]:
    """Spawn k racers ``target(name, workdir, k, j, jitter_ms, ready, go)`` and wait until
    each has connected; yields ``release()``, which lets them go, waits for them and
    asserts that each exited 0. Racers still alive at the end are killed."""
    spawn = mp.get_context("spawn")
    ready = [spawn.Event() for _ in range(k)]
    go = spawn.Event()
    procs = [
        spawn.Process(target=target, args=(name, workdir, k, j, jitter_ms, ready[j], go))
        for j in range(k)
    ]
    for p in procs:
        p.start()

    def release() -> None:
        go.set()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * k, f"a {who} failed"

    try:
        give_up = time.monotonic() + 60
        for e, p in zip(ready, procs, strict=True):
            while not e.wait(0.1):
                assert p.is_alive(), f"a {who} died before it connected"
                assert time.monotonic() < give_up, f"a {who} did not connect"
        yield release
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


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
