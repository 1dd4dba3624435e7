"""The table of the multiprocess-service workloads, W1-W10: for each, what it runs, which
of its figures are compared with which peer's, the further figures printed, and its goals;
the default W7 levels and which workloads have a Redis peer.
"""

from __future__ import annotations

import functools

from . import journal_workloads as JW
from . import purgatory_workloads as PW
from . import service_footprint as FP
from . import service_ops as OPS
from . import service_producers as PR
from . import service_timing as TM
from .workload import Workload


def service_workloads(
    producers: list[int] | None = None,
    levels: list[int] | None = None,
    redis: bool = False,
    recovery_n: int = JW.RECOVERY_N,
) -> list[Workload]:
    """W1-W10. With `redis`, the Redis sorted-set peer's rows too (main() sets
    service_common.use_redis to the same value so that the workloads measure it).
    `recovery_n` only names W9's recovery goal: the workload recovers sizes["recovery"]
    timers."""
    S = "shmwheel"
    R = "redis"

    def rd(*items):  # the Redis rows / notes, only when it runs
        return list(items) if redis else []

    ks = producers or PR.producer_counts()
    lv = sorted(levels or DEFAULT_LEVELS)
    late = [(q, f"{q}: {S} service") for q in ("p50", "p99", "p99.9")]
    peers_late = ("heapq+thread", "asyncio call_at", "sched run()", *rd(f"{R} ZSET + Lua claim"))
    produce_goal = (
        [("c. 2 producers / 1 producer", "ratio: 2 producers / 1 producer", ">=", 1.6)]
        if 1 in ks and 2 in ks
        else []
    )
    return [
        Workload(
            "svc_schedule_call",
            "schedule rate, per call",
            OPS.svc_schedule_call,
            "service",
            [
                (f"{S} Client.schedule", "heapq+thread schedule"),
                (f"{S} Client.schedule", "asyncio call_later"),
                (f"{S} Client.schedule", "sched enter"),
                *rd((f"{S} Client.schedule", f"{R} ZADD")),
            ],
            notes=[
                f"{S} Client.schedule, 3-field dict payload",
                "ratio: Client.schedule / heapq+thread",
                *rd(f"{R} timers (per call)"),
            ],
            goals=[
                ("a. Client.schedule, per call", f"{S} Client.schedule", ">=", 1.5e6),
                ("a. schedule / heapq+thread", "ratio: Client.schedule / heapq+thread", ">=", 2.0),
                (
                    "a. schedule, 3-field dict payload",
                    f"{S} Client.schedule, 3-field dict payload",
                    ">=",
                    1e6,
                ),
            ],
            wid="W1",
        ),
        Workload(
            "svc_schedule_many",
            "schedule rate, batch",
            OPS.svc_schedule_many,
            "service",
            [
                (f"{S} Client.schedule_many", "heapq+thread schedule_many"),
                (f"{S} Client.schedule_many", "asyncio call_later loop"),
                (f"{S} Client.schedule_many", "sched enter loop"),
                *rd((f"{S} Client.schedule_many", f"{R} ZADD pipelined")),
            ],
            notes=rd(f"{R} timers (batch)"),
            goals=[("b. Client.schedule_many", f"{S} Client.schedule_many", ">=", 10e6)],
            wid="W1",
        ),
        Workload(
            "svc_cancel",
            "cancel rate",
            OPS.svc_cancel,
            "service",
            [
                (f"{S} Client.cancel", "heapq+thread cancel"),
                (f"{S} Client.cancel", "asyncio TimerHandle.cancel"),
                (f"{S} Client.cancel", "sched cancel"),
                (f"{S} Client.cancel_many", "heapq+thread cancel"),
                (f"{S} Client.cancel_many", "asyncio TimerHandle.cancel"),
                (f"{S} Client.cancel_many", "sched cancel"),
                *rd(
                    (f"{S} Client.cancel", f"{R} ZREM"),
                    (f"{S} Client.cancel_many", f"{R} ZREM pipelined"),
                ),
            ],
            notes=[
                "ratio: Client.cancel / asyncio TimerHandle.cancel",
                *rd(f"{R} timers (per call)", f"{R} timers (batch)"),
            ],
            goals=[
                ("d. Client.cancel, per call", f"{S} Client.cancel", ">=", 2e6),
                (
                    "d. cancel / asyncio",
                    "ratio: Client.cancel / asyncio TimerHandle.cancel",
                    ">=",
                    1.0,
                ),
                ("d. Client.cancel_many", f"{S} Client.cancel_many", ">=", 2e6),
            ],
            wid="W2",
        ),
        Workload(
            "svc_memory",
            "bytes per pending timer",
            FP.svc_memory,
            "capacity",
            [
                (f"{S} segment / capacity", "heapq+thread entry"),
                (f"{S} segment / capacity", "asyncio call_later"),
                (f"{S} segment / capacity", "sched event"),
                (f"{S} segment bytes per added timer", "heapq+thread entry"),
                (f"{S} segment bytes per added timer", "asyncio call_later"),
                (f"{S} segment bytes per added timer", "sched event"),
                *[
                    (f"{S} segment bytes per added timer", f"{peer} RSS delta")
                    for peer in FP.RSS_PEERS
                ],
                *rd(
                    (f"{S} segment / capacity", f"{R} used_memory / member"),
                    (f"{S} segment bytes per added timer", f"{R} used_memory / member"),
                ),
            ],
            unit="B",
            notes=[
                f"{S} payload arena / capacity",
                f"{S} segment bytes",
                f"{S} wheel+side / capacity",
            ],
            goals=[
                ("e. segment bytes / capacity", f"{S} segment / capacity", "<=", 48),
                (
                    "e. segment bytes per added timer",
                    f"{S} segment bytes per added timer",
                    "<=",
                    48,
                ),
            ],
            wid="W3",
        ),
        Workload(
            "svc_lateness",
            "precision: lateness (no-op tasks)",
            TM.svc_lateness,
            "lateness",
            [(k, f"{q}: {peer}") for q, k in late for peer in peers_late],
            unit="ms",
            notes=[f"{w}: {who}" for w in ("max", "early") for who in (f"{S} service", *peers_late)]
            + [
                f"completed: {S} service",
                "sched default delayfunc: time.sleep(0) per event",
                *rd(f"completed: {R} ZSET + Lua claim"),
            ],
            goals=[
                (f"f. lateness {q}", k, "<=", t)
                for (q, k), t in zip(late, (0.3, 1.0, 2.0), strict=True)
            ]
            + [("f. early runs", f"early: {S} service", "<=", 0)],
            wid="W4",
        ),
        Workload(
            "svc_producers",
            "producer processes, aggregate",
            functools.partial(PR.svc_producers, ks=ks),
            "service",
            [
                (f"{S} {k} producer processes", f"{peer} {k} threads{how}")
                for k in ks
                for peer, how in (("heapq+thread", ""), ("asyncio", " (call_soon_threadsafe)"))
            ],
            notes=[f"{S} {k} producers, per producer (mean)" for k in ks]
            + [f"{S} {k} producers, coordinator CPU us per timer" for k in ks]
            + (["ratio: 2 producers / 1 producer"] if produce_goal else []),
            goals=produce_goal,
            wid="W5",
        ),
        Workload(
            "svc_fire",
            "dispatch: fired->executed (no-op)",
            TM.svc_fire,
            "service",
            [
                (f"{S} fired->executed", "ProcessPoolExecutor.submit"),
                (f"{S} fired->executed", "multiprocessing.Pool.imap_unordered"),
                (f"{S} fired->executed", "heapq+thread (in-process)"),
                (f"{S} fired->executed", "asyncio call_at (in-process)"),
                *rd((f"{S} fired->executed", f"{R} ZSET + Lua claim")),
            ],
            notes=[f"{S} executors"],
            goals=[("g. fired->executed", f"{S} fired->executed", ">=", 1e6)],
            wid="W6",
        ),
        Workload(
            "svc_startup",
            "start-up: import and start()",
            FP.svc_startup,
            "service",
            [
                ("import shmwheel", "import asyncio"),
                (
                    f"{S} TimerService.start() (1M capacity)",
                    "ProcessPoolExecutor start + one task per worker",
                ),
            ],
            unit="ms",
            notes=[f"{S} TimerService.stop()", "import shmwheel + first use of TimerService"],
            goals=[
                ("h. import shmwheel", "import shmwheel", "<=", 150),
                ("h. TimerService.start()", f"{S} TimerService.start() (1M capacity)", "<=", 2000),
            ],
            wid="W8",
        ),
        Workload(
            "svc_scale",
            "scale: cost per op vs pending",
            functools.partial(OPS.svc_scale, levels=lv),
            "service",
            [
                (f"{S} {op} @ {OPS.level_label(x)}", f"heapq+thread {op} @ {OPS.level_label(x)}")
                for op in ("schedule", "cancel")
                for x in lv
            ],
            unit="us/op",
            wid="W7",
        ),
        *journal_workloads(recovery_n),
        *purgatory_workloads(),
    ]


def purgatory_workloads() -> list[Workload]:
    """W10: the purgatory across processes beside Kafka's in process and asyncio."""
    S = "shmwheel"
    shapes = ("per call", f"batched ({PW.BATCH} per key)")
    return [
        Workload(
            "svc_purgatory",
            "purgatory: watch + complete",
            PW.svc_purgatory,
            "ops",
            [
                (f"{S} watch + complete, {sh}", f"{peer} watch + complete, {sh}")
                for sh in shapes
                for peer in ("in-process purgatory", "asyncio")
            ],
            notes=[f"{S} watch + complete, {sh}, client loop" for sh in shapes],
            goals=[
                (
                    "cross-process watch + complete, per call, vs in-process purgatory",
                    f"ratio: {S} / in-process purgatory, per call",
                    ">=",
                    1.0,
                )
            ],
            wid="W10",
        ),
        Workload(
            "svc_purgatory_expire",
            "purgatory: watch + expire",
            PW.svc_purgatory_expire,
            "ops",
            [
                (f"{S} watch + expire", f"{peer} watch + expire")
                for peer in ("in-process purgatory", "asyncio")
            ],
            notes=[f"{S} watch + expire, client loop"],
            wid="W10",
        ),
    ]


def journal_workloads(recovery_n: int = JW.RECOVERY_N) -> list[Workload]:
    """W9: W1 with the journal on beside off; recovery of `recovery_n` pending timers."""
    S = "shmwheel"
    rates = [
        (f"{S} {what}, journal on", f"{S} {what}, journal off")
        for what in ("Client.schedule", "Client.schedule_many")
    ]
    start = f"{S} start(), recovering the pending timers"
    return [
        Workload(
            "svc_journal",
            "journal: schedule rate, on / off",
            JW.svc_journal,
            "service",
            rates,
            notes=[
                f"{k}, {how}"
                for k in ("ratio: journal on / off", "journal bytes per timer")
                for how in ("per call", "batch")
            ],
            goals=[("journal on / off, per call", "ratio: journal on / off, per call", ">=", 0.70)],
            wid="W9",
        ),
        Workload(
            "svc_recovery",
            "journal: recovery, start()",
            JW.svc_recovery,
            "recovery",
            [(start, f"{S} start(), no journal")],
            unit="ms",
            notes=[
                f"{S} recovery['seconds']",
                f"{S} stop() with the timers pending",
                "timers recovered",
                "pending after recovery",
                "journal disk bytes before recovery",
                "journal segments read",
            ],
            goals=[
                (f"recovery of {OPS.level_label(recovery_n)} pending, start()", start, "<=", 5000)
            ],
            wid="W9",
        ),
    ]


DEFAULT_LEVELS = [10_000, 100_000, 1_000_000]
FULL_LEVEL = 10_000_000


REDIS_KEYS = {
    "svc_schedule_call",
    "svc_schedule_many",
    "svc_cancel",
    "svc_memory",
    "svc_lateness",
    "svc_fire",
}  # the workloads with a Redis peer
