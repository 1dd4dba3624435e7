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


# set by the executor around each task call: (id, key, deadline_ms, fired_ns, attempt), a
# plain tuple because most tasks never ask; context() builds the FireContext on demand
_current: tuple[int, Any, int, int, int] | None = None


def context() -> FireContext:
    """The FireContext of the running task; RuntimeError outside a task."""
    raw = _current
    if raw is None:
        raise RuntimeError("shmwheel.context() is only available inside a task run by an executor")
    return FireContext(raw[0], raw[1], raw[2], raw[3] // 1_000_000, raw[4])
