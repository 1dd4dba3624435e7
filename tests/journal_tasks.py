"""A task for the journal's tests: ``journal_tasks:fired_seen`` (executors import it with
tests/ on their PYTHONPATH, which the supervisor hands them from the test process)."""

from __future__ import annotations

from typing import Any

from helpers import append_line

import shmwheel


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
