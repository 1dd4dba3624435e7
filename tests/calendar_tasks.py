"""The task of tests/test_calendar.py: one JSON line per run of a calendar timer (the
deadline its run carried, its start on the monotonic clock, and the wall clock read
just before and just after that, its run number,
its key) to payload["path"], in one O_APPEND write."""

from __future__ import annotations

import time
from typing import Any

from helpers import append_json

import shmwheel


def stamp(payload: dict[str, Any]) -> None:
    wall0, mono, wall1 = time.time_ns(), time.monotonic_ns(), time.time_ns()
    ctx = shmwheel.context()
    row = {"id": ctx.id, "deadline_ms": ctx.deadline_ms, "mono_ns": mono}
    row |= {"wall0_ns": wall0, "wall1_ns": wall1}
    append_json(payload["path"], {**row, "attempt": ctx.attempt, "key": ctx.key})
