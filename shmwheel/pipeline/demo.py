"""A real journal to audit: a service run with timers, cancels, repeating timers, failing
tasks and purgatory operations, recorded with ``TimerService(journal=DIR)`` and kept whole
(retention off). ``python -m shmwheel.bench --journal-audit`` and the tests use it; the
returned counts are what the audit must find.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .. import Client, TimerService

log = logging.getLogger("shmwheel.pipeline")

TASKS = {
    "noop": "shmwheel.examples.tasks:noop",
    "fail": "shmwheel.examples.tasks:fail",
}


@dataclass
class DemoCounts:
    """What the run did: what an audit of its journal must count."""

    one_shots: int = 0  # scheduled one-shot timers
    cancelled: int = 0  # of which cancel() returned True
    failing: int = 0  # one-shots (not cancelled) whose task raises
    repeating: int = 0
    repeating_runs: int = 0  # runs of the repeating timers with an outcome
    operations: int = 0
    completed: int = 0  # operations completed by check_and_complete
    expired: int = 0
    records: int = 0  # records the journal holds

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def sized_for(records: int) -> dict[str, int]:
    """``write_demo_journal``'s one_shots and operations for a journal of a little over
    `records` records: 2.9 per one-shot (scheduled, fired, outcome; a tenth scheduled and
    cancelled), about 4.85 per operation, an operation per 100 one-shots (measured: 10 M
    asked, 10,058,754 written)."""
    return {"one_shots": int(records / 2.93), "operations": records // 293}


def write_demo_journal(
    directory: str,
    one_shots: int = 2000,
    repeating: int = 4,
    operations: int = 200,
    spread_ms: float = 300.0,
    seed: int = 1,
    segment_bytes: int = 64 << 20,
    epochs: int = 1,
    pause_s: float = 0.0,
    name: str | None = None,
) -> DemoCounts:
    """Run a service on `directory` (a new journal) and stop it once every timer has its
    outcome; returns what was done (`segment_bytes`: the journal's segment size, small
    for a journal of many segments). A tenth of the one-shots are cancelled before they
    are due, a tenth run the failing task, the repeating timers run every 10 ms until
    cancelled, half the operations are completed and half expire. With `epochs` > 1 the
    service is stopped and started again on the same journal that many times, `pause_s`
    apart (an outage between epochs), the timers shared out between the epochs; the
    service is named `name` in every epoch (by default one name made up for the run)."""
    rng = np.random.default_rng(seed)
    n = DemoCounts()
    name = name or f"demo-{os.getpid()}-{rng.integers(1 << 32):08x}"
    for e in range(epochs):
        if e:
            time.sleep(pause_s)
        share = (one_shots * (e + 1) // epochs - one_shots * e // epochs,
                 operations * (e + 1) // epochs - operations * e // epochs)  # fmt: skip
        _one_epoch(directory, name, n, rng, share[0], repeating, share[1], spread_ms,
                   segment_bytes)  # fmt: skip
    from .. import journal

    n.records = sum(len(seg.rows) for seg in journal.read(directory))
    n.repeating_runs = _count_repeating_runs(directory)
    log.info("demo journal in %s: %s", directory, n.as_dict())
    return n


def _one_epoch(
    directory: str, name: str, n: DemoCounts, rng: np.random.Generator, one_shots: int,
    repeating: int, operations: int, spread_ms: float, segment_bytes: int,
) -> None:  # fmt: skip
    """One run of the service on the journal: its timers added to `n`."""
    cap = max(1024, 2 * (one_shots + operations + repeating))
    svc = _start_quietly(directory, name, cap, operations, segment_bytes)
    try:
        c = svc.client()
        try:
            reps = [c.schedule("noop", i, delay_ms=5.0, every_ms=10.0) for i in range(repeating)]
            n.repeating += repeating
            cancelled, failing = _one_shots(c, rng, one_shots, spread_ms)
            n.one_shots += one_shots
            n.cancelled += cancelled
            n.failing += failing
            keys = [f"job:{n.operations + i}" for i in range(operations)]
            for i, key in enumerate(keys):
                timeout = 50.0 if i % 2 else 60_000.0
                c.watch([key], timeout, on_complete="noop", on_expire="noop", payload=i)
            completed = sum(c.check_and_complete(key) for key in keys[::2])
            n.operations += operations
            n.completed += completed
            n.expired += operations - completed
            time.sleep(0.06)  # let the repeating timers run a few times
            for h in reps:
                h.cancel()
            _wait_runs(svc, (one_shots - cancelled) + operations, spread_ms)
        finally:
            c.close()
        time.sleep(0.05)  # the reaper settles the last outcomes before the stop
    finally:
        svc.stop()


def _start_quietly(
    directory: str, name: str, capacity: int, operations: int, segment_bytes: int
) -> TimerService:
    """A started service journaling into `directory`, its processes logging only
    critical messages (the failing task's tracebacks are expected)."""
    from .. import TimerService
    from ..segment.sizes import DEFAULT_TABLE_CAPACITY

    level = os.environ.get("SHMWHEEL_LOG_LEVEL")
    os.environ["SHMWHEEL_LOG_LEVEL"] = "CRITICAL"
    try:
        svc = TimerService(
            name=name,
            tasks=TASKS,
            capacity=capacity,
            # every operation is live (one key each) until the checks after the last watch
            watch_capacity=max(DEFAULT_TABLE_CAPACITY, 2 * operations),
            executors=1,
            journal=directory,
            journal_keep_hours=1e6,  # keep every segment: the audit reads the whole history
            journal_fsync="none",
            journal_segment_bytes=segment_bytes,
        )
        svc.start()
    finally:
        if level is None:
            del os.environ["SHMWHEEL_LOG_LEVEL"]
        else:
            os.environ["SHMWHEEL_LOG_LEVEL"] = level
    return svc


def _one_shots(
    c: Client, rng: np.random.Generator, one_shots: int, spread_ms: float
) -> tuple[int, int]:
    """`one_shots` timers over `spread_ms`: a tenth run the failing task, a tenth of the
    others are cancelled before they are due. (cancelled, failing)."""
    chunk = 5000
    cancelled = failing = 0
    for start in range(0, one_shots, chunk):
        k = min(chunk, one_shots - start)
        delays = rng.uniform(0, spread_ms, k)
        fail = rng.random(k) < 0.1
        cancel = (rng.random(k) < 0.1) & ~fail
        delays[cancel] += 60_000.0  # not due before the cancel
        ok = c.schedule_many("noop", delays[~fail])
        c.schedule_many("fail", delays[fail])
        cancelled += int(np.count_nonzero(c.cancel_many(ok.ids[cancel[~fail]])))
        failing += int(np.count_nonzero(fail))
    return cancelled, failing


def _wait_runs(svc: TimerService, expect_runs: int, spread_ms: float) -> None:
    """Until nothing is pending and `expect_runs` runs are done (TimeoutError after a
    minute, and more for a big run on a loaded machine: its one executor runs every task,
    3.4 M of them for a 10 M-record journal)."""
    give_up = time.monotonic() + 60 + spread_ms / 1000 + expect_runs / 20_000
    while time.monotonic() < give_up:
        s = svc.stats()
        done = s["completed"] + s["task_errors"] + s["crashed"]
        if s["pending"] == 0 and done >= expect_runs:
            return
        time.sleep(0.02)
    raise TimeoutError(
        f"the demo service did not finish its timers in time: {s['pending']:,} "
        f"pending, {done:,} of {expect_runs:,} runs done"
    )


def _count_repeating_runs(directory: str) -> int:
    """Outcomes of the repeating timers' runs, as the journal has them."""
    from .. import journal

    recs = list(journal.records(directory))
    ids = {r["id"] for r in recs if r["kind"] == "scheduled" and r["period_ms"] > 0}
    return sum(1 for r in recs if r["kind"] == "outcome" and r["id"] in ids)
