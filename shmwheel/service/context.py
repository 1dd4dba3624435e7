"""The fire context of the task an executor is running (``shmwheel.context()``)."""

from typing import Any, NamedTuple

from .. import _native as N


class FireContext(NamedTuple):
    """What fired: the timer's handle id, key, deadline (monotonic ms), when the reaper
    fired it (monotonic ms) and which run this is (1 for the first; repeats count up)."""

    id: int
    key: Any
    deadline_ms: int
    fired_ms: int
    attempt: int


def context() -> FireContext:
    """The FireContext of the running task; RuntimeError outside a task. The executor's
    native loop keeps the raw values; the tuple is built only when a task asks."""
    raw = N.fire_context()
    if raw is None:
        raise RuntimeError("shmwheel.context() is only available inside a task run by an executor")
    return FireContext(*raw)
