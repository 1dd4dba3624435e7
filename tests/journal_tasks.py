"""The task of the whole-service crash harness (tests/journal_crash_harness.py).

Executors import it as ``journal_tasks:mark``: the driver process has tests/ on its
sys.path, and the supervisor hands that path to its children as PYTHONPATH. The log path
and the cycle come from the environment the executors inherit from their driver.
"""

from __future__ import annotations

import os
import time
from typing import Any

from helpers import append_line

import shmwheel


def mark(payload: Any) -> None:
    """Append one line to the executions log ($JC_EXEC_LOG), with a single O_APPEND write
    made first thing, then sleep payload[1] ms (a task still running at the kill):

        E id attempt start_ns deadline_ms fired_ms cycle pid tag

    `payload` is [tag, sleep_ms]; start_ns is time.monotonic_ns() as the task starts."""
    start_ns = time.monotonic_ns()
    ctx = shmwheel.context()
    tag, sleep_ms = payload[0], payload[1]
    line = (
        f"E {ctx.id} {ctx.attempt} {start_ns} {ctx.deadline_ms} {ctx.fired_ms} "
        f"{os.environ.get('JC_CYCLE', '?')} {os.getpid()} {tag}\n"
    )
    append_line(os.environ["JC_EXEC_LOG"], line)
    if sleep_ms:
        time.sleep(sleep_ms / 1000)


def fired_seen(payload: Any) -> None:
    """Look in the journal for this run's fired record, as the task starts, and append
    what was found to a log: ``F id attempt seen``. `payload` is [journal dir, log path].
    The reaper writes the record before it hands the timer to an executor (reaper.py), so
    seen is 1 however slow the journal's disk is."""
    from shmwheel import journal as J

    ctx = shmwheel.context()
    seen = any(
        r["kind"] == "fired" and r["id"] == ctx.id and r["run"] == ctx.attempt
        for r in J.records(payload[0], rejects=[])  # (a tail being written is a reject)
    )
    append_line(payload[1], f"F {ctx.id} {ctx.attempt} {int(seen)}\n")
