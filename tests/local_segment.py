"""A service's tables in this process's memory, for the tests that drive the slot state
machine and the native core with no process running (no coordinator, reaper or executor):
a small ServiceConfig, a local segment with some client rings claimed, and a Client whose
wake-ups go nowhere."""

from __future__ import annotations

import os
from typing import Any

from shmwheel.segment import layout as L
from shmwheel.segment.clock import now_ms
from shmwheel.service.caller.client import Client

RECORD_TASK = (("record", "shmwheel.examples.tasks:append_line"),)


class QuietClient(Client):
    """A Client whose wake-ups go nowhere (no coordinator runs on a local segment)."""

    def _bell(self) -> None:
        pass


def small_config(**overrides: Any) -> L.ServiceConfig:
    """A ServiceConfig a test can fill at once: 16 slots, 1 ms ticks, 4 buckets a level, one
    executor, one client, rings of 8, a few arena blocks; `overrides` replace any field."""
    fields: dict[str, Any] = dict(
        capacity=16,
        tick_ms=1,
        wheel_size=4,
        executors=1,
        max_clients=1,
        ring_capacity=8,
        dispatch_capacity=8,
        arena_blocks=(4, 1, 1, 1),
        tasks=RECORD_TASK,
    )
    fields.update(overrides)
    return L.ServiceConfig(**fields)


def local_memory(
    name: str, cfg: L.ServiceConfig, start_ms: int | None = None, clients: int = 1
) -> L.ServiceMemory:
    """A segment of `cfg` in this process's memory whose clock starts at `start_ms` (now by
    default), with the first `clients` rings claimed (for QuietClient(mem, ring))."""
    start = now_ms() if start_ms is None else start_ms
    mem = L.ServiceMemory.create(name, cfg, os.getpid(), start, local=True)
    mem.ring_table[:clients, L.RT_STATE] = L.RING_CLAIMED
    return mem
