"""Tasks and completer processes of tests/test_operations.py.

The tasks run in the service's executors and count, in memory-mapped files shared by every
process of the test (paths from the environment, which executors inherit), how often
operation i (its payload) ran its on_complete task and its on_expire task.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from helpers import racer_client, share, shared_array, sleep_until_ms

import shmwheel

COMPLETED_ENV = "SHMWHEEL_OPS_COMPLETED"  # int32[n]: runs of operation i's on_complete
EXPIRED_ENV = "SHMWHEEL_OPS_EXPIRED"  # int32[n]: runs of its on_expire


def _count(env: str, i: int) -> None:
    shared_array(env, np.int32)[i] += 1


def completed(i: Any) -> None:
    _count(COMPLETED_ENV, i)


def expired(i: Any) -> None:
    _count(EXPIRED_ENV, i)


def slow_completed(i: Any) -> None:
    time.sleep(0.0005)
    _count(COMPLETED_ENV, i)


def slow_expired(i: Any) -> None:
    time.sleep(0.0005)
    _count(EXPIRED_ENV, i)


def keys_of(i: int) -> tuple[list[str], int, list[tuple[str, int]]]:
    """Operation i's keys, required amount, and the signals that complete it: one key
    (i % 3 == 0), two keys each signalled once (1), one key signalled with amount 3 (2)."""
    if i % 3 == 0:
        return [f"k{i}"], 1, [(f"k{i}", 1)]
    if i % 3 == 1:
        return [f"k{i}", f"g{i}"], 2, [(f"k{i}", 1), (f"g{i}", 1)]
    return [f"k{i}"], 3, [(f"k{i}", 3)]


def completer(name: str, workdir: str, k: int, j: int, jitter_ms: int, ready: Any, go: Any) -> None:
    """Completer j of k (a spawned process): for operations i = j, j + k, ..., at the
    operation's timeout plus a random offset in [-jitter_ms, +jitter_ms], send its signals;
    record in won[i] how many operations the last signal completed (0 or 1), or 2 if an
    earlier signal of i completed something (it must not)."""
    d = Path(workdir)
    with racer_client(name, ready, go) as client:
        won = np.memmap(d / "won", dtype=np.int8, mode="r+")
        mine, at = share(np.load(d / "deadlines.npy"), k, j, jitter_ms, seed=2000)
        for i, t in zip(mine.tolist(), at.tolist(), strict=True):
            sleep_until_ms(t)
            signals = keys_of(i)[2]
            early = sum(client.check_and_complete(key, a) for key, a in signals[:-1])
            last = client.check_and_complete(*signals[-1])
            won[i] = 2 if early else last
        won.flush()


def watcher(journal: str, ids_path: str, ready: Any) -> None:
    """A process that embeds a journaled service, watches operations, reports their ids
    and deadlines, and waits to be killed (with its service) by the test."""
    os.setsid()  # its own process group: the test kills it and the service at once
    svc = shmwheel.TimerService(
        tasks={"noop": "shmwheel.examples.tasks:noop"},
        capacity=1000,
        executors=1,
        journal=journal,
        journal_fsync="always",
    ).start()
    c = svc.client()
    ops = [c.watch([f"k{i}", "all"], 60_000, on_complete="noop", required=2) for i in range(20)]
    c.check_and_complete("k0")
    c.check_and_complete("all")  # completes op 0 (k0 + all), counts 1 for the others
    assert ops[0].result(10) == "completed"
    assert ops[1].cancel()
    np.save(ids_path, np.array([[op.id, op.deadline_ms] for op in ops], np.int64))
    ready.set()
    time.sleep(600)
