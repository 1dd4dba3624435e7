"""The task of tests/test_calendar.py: one JSON line per run of a calendar timer (the
deadline its run carried, its start on the monotonic and the wall clock, its run number,
its key) to payload["path"], in one O_APPEND write."""

from __future__ import annotations

import time
from typing import Any

from lease_tasks import append_json

import shmwheel


def stamp(payload: dict[str, Any]) -> None:
    mono, wall = time.monotonic_ns(), time.time_ns()
    ctx = shmwheel.context()
    row = {"id": ctx.id, "deadline_ms": ctx.deadline_ms, "mono_ns": mono, "wall_ns": wall}
    append_json(payload["path"], {**row, "attempt": ctx.attempt, "key": ctx.key})
