"""The fire context of the task an executor is running (``shmwheel.context()``)."""

from __future__ import annotations

from typing import Any, NamedTuple


class FireContext(NamedTuple):
    """What fired: the timer's handle id, key, deadline (monotonic ms), when the reaper
    fired it (monotonic ms) and which run this is (1 for the first; repeats count up)."""

    id: int
    key: Any
    deadline_ms: int
    fired_ms: int
    attempt: int


_current: FireContext | None = None  # set by the executor around each task call


def context() -> FireContext:
    """The FireContext of the running task; RuntimeError outside a task."""
    if _current is None:
        raise RuntimeError("shmwheel.context() is only available inside a task run by an executor")
    return _current
