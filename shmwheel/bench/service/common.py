"""What every multiprocess-service workload shares: the bench's mutable run state, the
no-op task, and the helpers that start, warm and time a service.

The workloads live by capability: ``ops`` (W1 schedule, W2 cancel, W7 scale),
``footprint`` (W3 memory, W8 start-up), ``timing`` (W4 lateness, W6
fire) and ``producers`` (W5); ``table.registry`` lists them. Like
``inprocess.core``, every function takes a size and returns ``{figure: value}`` for one
repetition. Each starts its own ``TimerService`` (default executors, so the pool is sized
from nproc), measures it, stops it in a ``finally`` (which ends every service process and
unlinks its segment and semaphores), and only then measures the baselines, so the idle
service does not share the CPU with them. The producer in the single-producer workloads
is this process (the bench); timers that must not fire while they are measured get
delays of 30-60 s, and stopping the service drops them.

The run state (``use_redis``, ``REDIS_CALL_N``, ``REDIS_BATCH_N``, ``services_started``,
``leaked``, ``lateness_samples``, ``lateness_hists``) is defined here and only here:
``python -m shmwheel.bench`` assigns and reads it as ``common.NAME``, and every
workload module reads it through this module object (``common.use_redis``), never through
a ``from ... import`` copy, so that main()'s assignments reach them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...segment import shm
from ...service.caller.client import Client
from ...service.supervisor.supervisor import TimerService

S = "shmwheel"

FAR_LO_MS, FAR_HI_MS = 30_000, 60_000  # never due while measured
MEMORY_CAPACITY = 1_000_000  # the service's default capacity
BATCH = 100_000  # schedule_many batch size

services_started: list[str] = []  # every service name this process started (for leak checks)
leaked: list[str] = []  # services that left files in /dev/shm after stop()
# W4 raw lateness for --plot: system -> per-repetition arrays of ms (peers, exact) and the
# shmwheel service's lateness histogram counts per repetition (stats()["lateness_histogram"])
lateness_samples: dict[str, list[np.ndarray]] = {}
lateness_hists: list[list[int]] = []

# The Redis sorted-set peer (baselines.RedisDelayQueue) runs only when main() sets this
# (redis-server on PATH, the redis module importable, and a probe server answered PING).
use_redis = False
R = "redis"
REDIS_CALL_N = 10_000  # per-call ZADD / ZREM are round-trip bound (~15k/s): at most this many
REDIS_BATCH_N = 100_000  # pipelined ZADD / ZREM: at most this many per repetition


def _redis_members(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def noop_task(payload: Any) -> None:
    """The task every service workload registers: does nothing."""


TASKS = {"noop": noop_task}  # executors import it as shmwheel.bench.service.common:noop_task


def _far_delays(n: int, seed: int = 1) -> np.ndarray:
    """n delays (ms, float) uniform in [30, 60] s."""
    return np.random.default_rng(seed).uniform(FAR_LO_MS, FAR_HI_MS, n)


@contextmanager
def _service(capacity: int = MEMORY_CAPACITY, **options: Any) -> Iterator[TimerService]:
    """A started service, stopped on exit; complains (stderr) if stop() left files."""
    with owned(TimerService(tasks=TASKS, capacity=capacity, **options)) as svc:
        svc.start()
        yield svc


@contextmanager
def owned(svc: TimerService) -> Iterator[TimerService]:
    """`svc`, which the caller starts (and may time), stopped on exit whatever happens;
    complains (stderr) if stop() left files."""
    services_started.append(svc.name)
    try:
        try:
            yield svc
        finally:
            svc.stop()  # a no-op if it never started or is stopped already
    finally:
        left = shm.service_files(svc.name)
        if left:
            leaked.append(svc.name)
            print(
                f"bench: service {svc.name} left {[str(p) for p in left]} after stop()",
                flush=True,
                file=sys.stderr,
            )


def _wait_completed(
    svc: TimerService, n: int, deadline_s: float, poll_s: float = 0.002
) -> tuple[dict[str, Any], float]:
    """Poll stats() until `completed` reaches n or time.monotonic() passes deadline_s;
    (the last stats, the monotonic time they were read)."""
    while True:
        st = svc.stats()
        t = time.monotonic()
        if st["completed"] >= n or t > deadline_s:
            return st, t
        time.sleep(poll_s)


def warm(c: Client) -> None:
    """Run every client call once or twice before timing (the first calls fill the client's
    caches of reserved slots and arena blocks); leaves nothing scheduled."""
    hs = [c.schedule("noop", delay_ms=FAR_HI_MS) for _ in range(600)]  # > one slot batch
    c.cancel(hs.pop())
    c.cancel_many(np.array([h.id for h in hs], np.int64))
    c.cancel_many(c.schedule_many("noop", np.full(600, float(FAR_HI_MS))))


def _capacity_for(n: int) -> int:
    """Room for n timers and the clients' reserved-slot caches (a start formats the whole
    wheel, so a smaller capacity starts faster)."""
    return int(n * 1.1) + 16_384
