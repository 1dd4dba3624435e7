"""Every workload of ``python -m shmwheel.bench``, in table order: the service workloads
(W1-W10, from ``registry_service``), then the in-process ones (wheel core, Kafka
layer); and the groups ``--workloads`` accepts.
"""

from __future__ import annotations

from . import journal_workloads as JW
from . import workloads as W
from .registry_service import service_workloads
from .workload import Workload


def workloads(
    producers: list[int] | None = None,
    levels: list[int] | None = None,
    redis: bool = False,
    recovery_n: int = JW.RECOVERY_N,
) -> list[Workload]:
    """W1-W10 first (each multiprocess-service workload against its peers, with the Redis
    peer's rows if `redis`), then the further in-process workloads (wheel core, Kafka
    layer)."""
    S = "shmwheel"
    return [
        *service_workloads(producers, levels, redis, recovery_n),
        Workload(
            "schedule_batch",
            "schedule, batch",
            W.core_schedule_batch,
            "core",
            [(f"{S} core insert_many", "heapq heapify")],
        ),
        Workload(
            "schedule_call",
            "schedule, per call",
            W.core_schedule_call,
            "core",
            [(f"{S} core insert", "heapq heappush")],
        ),
        Workload(
            "cancel",
            "cancel",
            W.core_cancel,
            "core",
            [
                (f"{S} core cancel_many", "heapq lazy cancel"),
                (f"{S} core cancel", "heapq lazy cancel"),
            ],
            notes=["ratio: core cancel / heapq lazy cancel"],
            goals=[
                (
                    "wheel core cancel, per call / heapq lazy cancel",
                    "ratio: core cancel / heapq lazy cancel",
                    ">=",
                    1.0,
                )
            ],
        ),
        Workload(
            "expire",
            "expire (collect due)",
            W.core_expire,
            "core",
            [(f"{S} core advance", "heapq heappop")],
        ),
        Workload(
            "stall",
            "longest clock step (wheel 20)",
            W.cascade_stall,
            "core",
            [
                ("max step: pre-cascade", "max step: cascade at expiry (Kafka)"),
                ("p99.9 step: pre-cascade", "p99.9 step: cascade at expiry (Kafka)"),
            ],
            unit="us",
        ),
        Workload(
            "memory",
            "bytes per pending timer",
            W.core_memory,
            "core",
            [(f"{S} core", "heapq entry"), (f"{S} core", "asyncio call_later")],
            unit="B",
        ),
        Workload(
            "timer_ops",
            "in-process timer add/cancel",
            W.timer_schedule_cancel,
            "timer",
            [
                ("add: shmwheel SystemTimer", "add: asyncio call_later"),
                ("add: shmwheel SystemTimer", "add: heapq+thread"),
                ("cancel: shmwheel SystemTimer", "cancel: asyncio call_later"),
                ("cancel: shmwheel SystemTimer", "cancel: heapq+thread"),
            ],
            notes=[
                "ratio: add / asyncio call_later",
                "ratio: add / heapq+thread",
                "ratio: cancel / asyncio call_later",
            ],
            goals=[
                (
                    "SystemTimer.add / asyncio call_later",
                    "ratio: add / asyncio call_later",
                    ">=",
                    1.5,
                ),
                ("SystemTimer.add / heapq + thread", "ratio: add / heapq+thread", ">=", 1.0),
                (
                    "TimerTask.cancel / asyncio TimerHandle.cancel",
                    "ratio: cancel / asyncio call_later",
                    ">=",
                    1.0,
                ),
            ],
        ),
        Workload(
            "timer_fire",
            "in-process fire->run (no-op)",
            W.timer_fire,
            "timer",
            [
                ("shmwheel SystemTimer", "asyncio call_later"),
                ("shmwheel SystemTimer", "heapq+thread"),
            ],
            notes=["ratio: fire->run / asyncio"],
            goals=[("fire -> run / asyncio", "ratio: fire->run / asyncio", ">=", 3.0)],
        ),
        Workload(
            "purgatory_call",
            "in-process purgatory watch + complete",
            W.purgatory_call,
            "timer",
            [
                (
                    "in-process purgatory watch + complete, per call",
                    "asyncio watch + complete, per call",
                )
            ],
            notes=["ratio: in-process purgatory / asyncio, per call"],
            goals=[
                (
                    "in-process purgatory / asyncio",
                    "ratio: in-process purgatory / asyncio, per call",
                    ">=",
                    2.0,
                )
            ],
        ),
    ]


GROUPS = {"service": "every svc_* workload (W1-W10)", "inprocess": "every other workload"}
