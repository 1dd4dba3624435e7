"""Sample tasks for a shmwheel service: register them by name, e.g.
``TimerService(tasks={"log": "shmwheel.examples.tasks:log_fire"})``
(importable from any directory once shmwheel is installed), or pass the functions.
"""

from __future__ import annotations

import os
import time
from typing import Any

import shmwheel


def noop(payload: Any) -> None:
    """Does nothing: for measuring the service itself."""


def log_fire(payload: Any) -> None:
    """Print what fired and how late (ms) it ran."""
    ctx = shmwheel.context()
    late = time.monotonic_ns() / 1e6 - ctx.deadline_ms
    print(
        f"timer {ctx.id:#x} key={ctx.key!r} attempt={ctx.attempt} payload={payload!r} "
        f"late={late:.3f} ms",
        flush=True,
    )


def lease_expired(payload: Any) -> None:
    """A lease's on_expire task (Client.lease): print whose lease expired and how long
    after the deadline its last beat set."""
    ctx = shmwheel.context()
    late = time.monotonic_ns() / 1e6 - ctx.deadline_ms
    print(f"lease of {ctx.holder} expired ({late:.1f} ms after its ttl): {payload!r}", flush=True)


def append_line(payload: Any) -> None:
    """Append one line "id deadline_ms run_ns attempt tag key" to the file payload["path"]
    (one O_APPEND write, so lines from many executors never interleave); then sleep
    payload["sleep_ms"] if given (a slow task)."""
    ctx = shmwheel.context()
    now = time.monotonic_ns()
    line = f"{ctx.id} {ctx.deadline_ms} {now} {ctx.attempt} {payload.get('tag', '')} {ctx.key}\n"
    fd = os.open(payload["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    if payload.get("sleep_ms"):
        time.sleep(payload["sleep_ms"] / 1000)


def fail(payload: Any) -> None:
    """Raises, to show how task errors are counted and logged."""
    raise RuntimeError(f"sample failure for payload {payload!r}")


def sleep_ms(payload: Any) -> None:
    """Sleep payload milliseconds (a slow task)."""
    time.sleep(float(payload) / 1000)
