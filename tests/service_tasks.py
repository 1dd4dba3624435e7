"""Tasks and producer processes for the service tests (importable by executors: the tests
directory is on the path the supervisor hands its children)."""

from __future__ import annotations

import os
import time
from typing import Any

import shmwheel


def record(payload: Any) -> None:
    """Append "tag id deadline_ms run_ns attempt key" to payload["path"] (one O_APPEND write)."""
    ctx = shmwheel.context()
    now = time.monotonic_ns()
    line = f"{payload['tag']} {ctx.id} {ctx.deadline_ms} {now} {ctx.attempt} {ctx.key}\n"
    fd = os.open(payload["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    if payload.get("sleep_ms"):
        time.sleep(payload["sleep_ms"] / 1000)


def boom(payload: Any) -> None:
    raise RuntimeError(f"boom {payload}")


def produce(name: str, path: str, prefix: str, count: int, max_delay_ms: int) -> list[str]:
    """A worker process: connect, schedule `count` recorded timers, return their tags."""
    import random
    rng = random.Random(prefix)
    tags = []
    with shmwheel.connect(name) as client:
        for i in range(count):
            tag = f"{prefix}-{i}"
            client.schedule("record", {"path": path, "tag": tag},
                            delay_ms=rng.uniform(0, max_delay_ms))
            tags.append(tag)
    return tags
