"""Calendar timers (``Client.schedule(task, cron=...)``): when each run is, by the cronsim
library, in a named time zone.

A calendar timer is a repeating timer (FLAG_REPEAT, as ``every_ms``) whose key is a dict,
``{"cron", "tz", "misfire", "key"}`` (no key of schedule() is a dict: segment/payload.py).
Its deadline is its next fire time, a wall-clock instant made a monotonic deadline when it
is computed (``next_ms``). The re-arm after each run is the repeating timer's,
deadline + period, done natively when the outcome is settled (shmwheel/native/slots.c,
``slot_settle``); the period is rewritten during the run so that the sum is the next fire
time: the executor (shmwheel/native/executor.c) calls ``Executor._on_calendar``
(service/processes/executor.py) before the task, which decides a misfire (``runs``), and after it,
which computes the next fire time after the run's end (``next_ms``). So the next time is
computed in Python, once per run, in the executor that ran it; the journal records it as any
repeating timer's next deadline (its OUTCOME), so a restart keeps it.

Misfires: a run that starts more than MISFIRE_GRACE_MS after its fire time (the service was
down or late) is a misfire. ``"skip"``: the task does not run for it; ``"once"``: it runs,
once for all the fire times missed. Either way the next run is the first fire time after
now: missed fire times are never run one by one.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported where used: a client that makes no calendar pays nothing)
    from zoneinfo import ZoneInfo

MISFIRES = ("skip", "once")
MISFIRE_GRACE_MS = 1000  # a run starting later than this after its fire time missed it


def zone(tz: object) -> ZoneInfo:
    """The time zone named `tz` (None: UTC), or ValueError / TypeError."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if tz is None:
        return ZoneInfo("UTC")
    if not isinstance(tz, str):
        raise TypeError(f"tz must be a time zone name (str) or None, got {type(tz).__name__}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(
            f"unknown time zone {tz!r} (an IANA name, e.g. 'Europe/Berlin'): {e}"
        ) from None


def spec(cron: object, tz: object, misfire: object, key: object) -> dict[str, Any]:
    """A calendar timer's key dict, every argument checked (ValueError / TypeError)."""
    from cronsim import CronSim, CronSimError

    if not isinstance(cron, str):
        raise TypeError(f"cron must be a cron expression (str), got {type(cron).__name__}")
    if misfire not in MISFIRES:
        raise ValueError(f"misfire must be one of {MISFIRES}, got {misfire!r}")
    zone(tz)
    try:
        next(CronSim(cron, datetime.now(UTC)))
    except CronSimError as e:
        raise ValueError(f"bad cron expression {cron!r}: {e}") from None
    except StopIteration:  # pragma: no cover - cronsim refuses what never matches
        raise ValueError(f"cron expression {cron!r} never matches") from None
    return {"cron": cron, "tz": tz, "misfire": misfire, "key": key}


def next_fire(s: dict[str, Any], after: datetime) -> datetime:
    """The first fire time of calendar `s` strictly after `after` (aware), in its zone."""
    from cronsim import CronSim

    return next(CronSim(s["cron"], after.astimezone(zone(s["tz"]))))


def next_ms(s: dict[str, Any]) -> int:
    """The monotonic deadline (ms) of `s`'s first fire time after now: the distance from
    the wall clock's now to it, added to the monotonic now, rounded up to the ms. The wall
    clock is read first, so a pause between the two reads makes the deadline later, never
    earlier than the fire time."""
    wall_ns = time.time_ns()
    mono_ns = time.monotonic_ns()
    fire = next_fire(s, _EPOCH + timedelta(microseconds=wall_ns // 1000))
    fire_ns = (fire - _EPOCH) // _US * 1000
    return -(-(mono_ns + fire_ns - wall_ns) // 1_000_000)


_EPOCH = datetime.fromtimestamp(0, UTC)
_US = timedelta(microseconds=1)


def runs(s: dict[str, Any], deadline_ms: int, now_ms: int) -> bool:
    """Whether the task runs for the fire time at `deadline_ms`, starting at `now_ms`: not
    for a misfire with misfire="skip"."""
    return s["misfire"] == "once" or now_ms - deadline_ms <= MISFIRE_GRACE_MS
