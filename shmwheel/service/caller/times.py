"""The time arguments of a client's calls, checked and made deadlines in one place.

``delay_ms``, ``deadline_ms`` and ``at`` (``schedule``, ``reset``), ``every_ms`` (a
repeating timer), ``timeout_ms`` (``watch``) and ``delays_ms`` (``schedule_many``) are decided
here, before the caller takes a slot, so a refused argument never costs one. A delay must
be a finite number of milliseconds in ``[0, limit)``, where ``limit`` is the client's
``_max_delay`` (a quarter of the wheel's span); an absolute ``deadline_ms`` an int in
``[0, now + limit)`` (monotonic time is never negative; a deadline already past fires at
once, and its lateness counts from it); ``at`` an aware datetime, made a monotonic deadline
once, at the call (``wall_deadline``). Anything else is a ``TypeError`` (not a number) or
a ``ValueError`` (out of range), with a message that says what to change; an int too large
for a float is out of range too, not an ``OverflowError``.

A delay becomes a deadline by the one rule of a client, written once in C
(shmwheel/native/producer.h, ``producer_due_ms``) and used by the native paths and, through
``due_ms`` and ``due_ms_many`` below, by these: the monotonic clock in ns plus the delay
rounded up to the ns, rounded up to the ms. So a timer never fires before its delay,
whichever path scheduled it (tests/test_client_paths.py runs both with the same inputs).
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Sequence

import numpy as np

from ... import _native as N


def check_delay(value: object, what: str, limit: int) -> float:
    """`value` as a float of milliseconds in [0, limit), or the API's TypeError /
    ValueError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of milliseconds, got {type(value).__name__}")
    if isinstance(value, int) and not -limit < value < limit:  # exact: no float overflow
        v = -1.0 if value < 0 else float(limit)
    else:
        v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{what} must be finite, got {value!r}")
    if v < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    if v >= limit:
        raise ValueError(
            f"{what}={value!r} is beyond the wheel's range ({limit} ms); "
            f"use a shorter delay or a larger tick_ms/wheel_size"
        )
    return v


def due_ms(now_ns: int, delay_ms: float) -> int:
    """The deadline (monotonic ms) of a checked delay from `now_ns` (the native rule)."""
    return N.due_ms(now_ns, delay_ms)


def deadline(delay_ms: object, deadline_ms: object, limit: int, at: object = None) -> int:
    """``schedule``'s (and ``reset``'s) deadline: from exactly one of a delay, an absolute
    monotonic deadline, or a wall-clock time ``at``."""
    if (delay_ms is not None) + (deadline_ms is not None) + (at is not None) != 1:
        raise TypeError("pass exactly one of delay_ms=, deadline_ms= or at=")
    now_ns = time.monotonic_ns()
    if delay_ms is not None:
        return due_ms(now_ns, check_delay(delay_ms, "delay_ms", limit))
    if at is not None:
        d = wall_deadline(at, now_ns)
        if d - now_ns // 1_000_000 >= limit:
            raise ValueError(f"at={at!r} is beyond the wheel's range ({limit} ms from now)")
        return max(d, 0)  # long past: due at once
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, (int, np.integer)):
        raise TypeError(
            f"deadline_ms must be an int (monotonic ms), got {type(deadline_ms).__name__}"
        )
    d = int(deadline_ms)
    if d < 0:
        raise ValueError(
            f"deadline_ms={d} is negative: a deadline is a monotonic time in ms "
            f"(time.monotonic_ns() // 1_000_000), never below 0"
        )
    if d - now_ns // 1_000_000 >= limit:
        raise ValueError(f"deadline_ms={d} is beyond the wheel's range ({limit} ms from now)")
    return d


def wall_deadline(at: object, now_ns: int) -> int:
    """The monotonic deadline (ms) of the wall-clock time `at`, an aware datetime: the
    distance from the wall clock's now to `at`, added to the monotonic clock's now (both
    read here, once), rounded up to the ms. A time already past gives a deadline already
    past (the timer fires at once). Afterwards the deadline is monotonic: a jump of the
    wall clock does not move it."""
    if not isinstance(at, datetime.datetime):
        raise TypeError(f"at must be a datetime, got {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(
            f"at={at!r} is a naive datetime: pass an aware one (e.g. "
            f"datetime.now(timezone.utc) + timedelta(...)), so that its instant is defined"
        )
    wall_now_ns = time.time_ns()
    delta_us = (at - datetime.datetime.fromtimestamp(0, datetime.UTC)) // _US
    return -(-(now_ns + delta_us * 1000 - wall_now_ns) // 1_000_000)


_US = datetime.timedelta(microseconds=1)


def timeout_deadline(timeout_ms: object, limit: int) -> int:
    """``watch``'s deadline: its timeout checked as a delay is (the common case first)."""
    if (type(timeout_ms) is int or type(timeout_ms) is float) and 0 <= timeout_ms < limit:
        return due_ms(time.monotonic_ns(), timeout_ms)
    return due_ms(time.monotonic_ns(), check_delay(timeout_ms, "timeout_ms", limit))


def check_delays(delays_ms: Sequence[float] | np.ndarray, limit: int) -> np.ndarray:
    """``schedule_many``'s delays as a float64 array, each checked as ``check_delay``
    checks one."""
    try:
        d = np.asarray(delays_ms, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"delays_ms must lie in [0, {limit}) ms: one is too large") from None
    except (TypeError, ValueError) as e:
        raise TypeError(f"delays_ms must be a sequence of numbers: {e}") from None
    if d.ndim != 1:
        raise ValueError("delays_ms must be one-dimensional")
    if not np.isfinite(d).all():
        raise ValueError("delays_ms must all be finite (no NaN or infinity)")
    if len(d) and (d.min() < 0 or d.max() >= limit):
        raise ValueError(f"delays_ms must lie in [0, {limit}) ms")
    return d


def due_ms_many(now_ns: int, delays_ms: np.ndarray) -> np.ndarray:
    """``due_ms`` of each checked delay (an int64 array)."""
    due = np.empty(len(delays_ms), np.int64)
    N.due_ms_many(now_ns, np.ascontiguousarray(delays_ms, np.float64), due)
    return due
