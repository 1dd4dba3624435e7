"""A producer process for the service tests (the tasks they run are shmwheel.examples.tasks)."""

from __future__ import annotations

import shmwheel


def produce(name: str, path: str, prefix: str, count: int, max_delay_ms: int) -> list[str]:
    """A worker process: connect, schedule `count` recorded timers, return their tags."""
    import random

    rng = random.Random(prefix)
    tags = []
    with shmwheel.connect(name) as client:
        for i in range(count):
            tag = f"{prefix}-{i}"
            client.schedule(
                "record", {"path": path, "tag": tag}, delay_ms=rng.uniform(0, max_delay_ms)
            )
            tags.append(tag)
    return tags
