"""The fire context of the task an executor is running (``shmwheel.context()``)."""

from typing import Any, NamedTuple

from ... import _native as N


class FireContext(NamedTuple):
    """What fired: the timer's handle id, key, deadline (monotonic ms), when the reaper
    fired it (monotonic ms), which run this is (1 for the first; repeats count up), and,
    in the on_expire task of a lease (``Client.lease``), the lease's holder (None for any
    other timer, or a lease made without one)."""

    id: int
    key: Any
    deadline_ms: int
    fired_ms: int
    attempt: int
    holder: str | None = None


def context() -> FireContext:
    """The FireContext of the running task; RuntimeError outside a task. The executor's
    native loop keeps the raw values; the tuple is built only when a task asks."""
    raw = N.fire_context()
    if raw is None:
        raise RuntimeError("shmwheel.context() is only available inside a task run by an executor")
    id, key, deadline_ms, fired_ms, attempt = raw
    if type(key) is list:  # a lease's timer, keyed [holder] (segment/payload.py, encode_lease)
        return FireContext(id, None, deadline_ms, fired_ms, attempt, key[0])
    if type(key) is dict:  # a calendar timer, keyed by its calendar (service/calendar.py)
        return FireContext(id, key.get("key"), deadline_ms, fired_ms, attempt)
    return FireContext(*raw)
