"""The table of the multiprocess-service workloads, W1-W13: for each, what it runs, which
of its figures are compared with which peer's, the further figures printed, the notes on
figures that need one, and its goals with the issue that set each, what it is for and what
a miss means; the default W7 levels and which workloads have a Redis peer.
"""

from __future__ import annotations

import functools
from typing import TypeVar

from . import journal_workloads as JW
from . import service_footprint as FP
from . import service_ops as OPS
from . import service_producers as PR
from . import service_timing as TM
from .registry_heartbeat import heartbeat_workloads
from .registry_jobs import jobs_workloads
from .registry_journal_purgatory import journal_workloads, purgatory_workloads
from .workload import Goal, Workload

T = TypeVar("T")


def service_workloads(
    producers: list[int] | None = None,
    levels: list[int] | None = None,
    redis: bool = False,
    recovery_n: int = JW.RECOVERY_N,
) -> list[Workload]:
    """W1-W13. With `redis`, the Redis sorted-set peer's rows too (main() sets
    service_common.use_redis to the same value so that the workloads measure it).
    `recovery_n` only names W9's recovery goal: the workload recovers sizes["recovery"]
    timers."""
    S = "shmwheel"
    R = "redis"

    def rd(*items: T) -> list[T]:  # the Redis rows / notes, only when it runs
        return list(items) if redis else []

    ks = producers or PR.producer_counts()
    lv = sorted(levels or DEFAULT_LEVELS)
    late = [(q, f"{q}: {S} service") for q in ("p50", "p99", "p99.9")]
    late_why = (
        "issue 3: a task starts close to its deadline (request timeouts, heartbeats), "
        "measured in the executor process where it runs"
    )
    late_miss = (
        "tasks started later than the goal. On a shared VM the machine itself oversleeps "
        "1-3 ms now and then (python bench/vm_jitter.py): compare the peers' same "
        "percentile in this run before blaming the service"
    )
    peers_late = ("heapq+thread", "asyncio call_at", "sched run()", *rd(f"{R} ZSET + Lua claim"))
    produce_goal = (
        [
            Goal(
                "2 producers / 1 producer",
                "ratio: 2 producers / 1 producer",
                ">=",
                1.6,
                "issue 8: producers in several processes add up (issue 3 asked 1.5 M/s from "
                "two); each scheduling process should not slow the others",
                "two producers scale less than asked. On 2 cores two producers and the "
                "coordinator share two CPUs, which caps two at about 1.53x one "
                "(docs/performance.md); more cores lift the cap",
            )
        ]
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
                Goal(
                    "Client.schedule, per call",
                    f"{S} Client.schedule",
                    ">=",
                    1.5e6,
                    "issue 8 (issue 3 asked 1 M/s): producers that schedule a timer per event "
                    "(a job's timeout, a retry) at native speed",
                    "each call costs over 0.67 us of the producer's own CPU",
                ),
                Goal(
                    "schedule / heapq+thread",
                    "ratio: Client.schedule / heapq+thread",
                    ">=",
                    2.0,
                    "issue 8: the shared service beats the timer a user would write in their "
                    "own process (a heap and a thread); median of the per-repetition ratios",
                    "a single process would schedule faster with its own heap than through "
                    "the service",
                ),
                Goal(
                    "schedule, 3-field dict payload",
                    f"{S} Client.schedule, 3-field dict payload",
                    ">=",
                    1e6,
                    "issue 8: real timers carry a payload (here a job id, a try count and a "
                    "queue name: 29 bytes packed)",
                    "a payload over 8 packed bytes goes through msgpack into an arena block; "
                    "that copy and the block's bookkeeping cost the difference",
                ),
            ],
            wid="W1",
            about="n timers (delays 30-60 s) scheduled one call at a time by one producer "
            "process into a running service; each peer schedules in its own process",
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
            goals=[
                Goal(
                    "Client.schedule_many",
                    f"{S} Client.schedule_many",
                    ">=",
                    10e6,
                    "issue 3: loading many timers at once (a batch of jobs, a re-arm) at "
                    "array speed",
                    "the coordinator links the timers slower than the batch is written, and "
                    "the producer waits for ring space",
                )
            ],
            wid="W1",
            about="5n timers in schedule_many batches of up to 100k; the heap timer gets a "
            "batch method too; asyncio and sched have none, so they loop over n",
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
                Goal(
                    "Client.cancel, per call",
                    f"{S} Client.cancel",
                    ">=",
                    2e6,
                    "issue 3: most timeouts are cancelled before they fire (the answer came "
                    "in time), so cancel is as hot a path as schedule",
                    "each cancel costs the canceller over 0.5 us",
                ),
                Goal(
                    "cancel / asyncio",
                    "ratio: Client.cancel / asyncio TimerHandle.cancel",
                    ">=",
                    1.0,
                    "issue 8: a cancel across processes (one compare-and-swap) is at least as "
                    "fast as asyncio's in-process TimerHandle.cancel",
                    "cancelling through the service is slower than cancelling in one process",
                ),
                Goal(
                    "Client.cancel_many",
                    f"{S} Client.cancel_many",
                    ">=",
                    2e6,
                    "issue 3's cancel goal, for cancels in batches",
                    "a batch of cancels is no faster than the per-call goal",
                ),
            ],
            wid="W2",
            about="n pending timers cancelled one call at a time, and another n in one "
            "cancel_many (each must return True); every peer cancels its own pending timers",
            explain={
                "sched cancel": "sched.scheduler.cancel removes the event from a list and "
                "re-heapifies it: O(pending) per call. With n timers pending it manages a few "
                "hundred cancels a second, so it runs for 0.2 s and that rate is shown. The "
                "multiple measures sched's design, not shmwheel's speed."
            },
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
                f"{S} fixed regions / capacity",
                f"{S} segment bytes",
                f"{S} wheel+side / capacity",
            ],
            goals=[
                Goal(
                    "segment bytes / capacity",
                    f"{S} segment / capacity",
                    "<=",
                    64,
                    "issue 26 (issue 3 asked 48 B a timer): a service's shared memory is RAM "
                    "held for its whole life; 1 M timers of capacity should take <= 64 MB",
                    "the regions not sized by capacity grew: with the defaults (32 clients, one "
                    "executor) they are 15 MB at 1 M (producer rings 8.4 MB, payload arena "
                    "4.8 MB, the rest under 2 MB; segment/sizes.py); each further "
                    "executor adds 0.72 MB (its rings and error log)",
                ),
                Goal(
                    "segment bytes per added timer",
                    f"{S} segment bytes per added timer",
                    "<=",
                    48,
                    "issues 3 and 26: a timer of capacity costs a 32-byte wheel node and a "
                    "16-byte side record, no more (the purgatory and the outcomes keep nothing "
                    "per slot since issue 26)",
                    "a region grew a word per slot: segment/layout.py's segment_layout says which",
                ),
            ],
            wid="W3",
            about="shared memory of a default (1 M-capacity) service: the whole segment over "
            "its capacity, and what one more timer of capacity adds; the peers' Python "
            "allocations (tracemalloc) or RSS growth per pending entry",
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
                Goal(f"lateness {q}", k, "<=", t, late_why, late_miss)
                for (q, k), t in zip(late, (0.3, 1.0, 2.0), strict=True)
            ]
            + [
                Goal(
                    "early runs",
                    f"early: {S} service",
                    "<=",
                    0,
                    "issues 2 and 3: a task never runs before its deadline (Kafka's wheel "
                    "fires up to 1 ms early); correctness, not speed",
                    "a task ran before its deadline: a bug, whatever the machine's load",
                )
            ],
            wid="W4",
            about="how late n no-op tasks start after their deadlines (rounded up to a whole "
            "ms), due over a window of n/100 ms (0.5-2 s) that starts 1 s ahead (0.3 s for "
            "n < 100k); shmwheel measured "
            "in its executor processes, the peers in this one",
            explain={
                f"p99.9: {S} service": "one task in 1,000 starts later than this. The "
                "machine's own stalls (1-3 ms oversleeps on a shared VM: python "
                "bench/vm_jitter.py) set this tail for every system: read it beside the "
                "peers' in the same run."
            },
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
            about="k producer processes each scheduling n timers per call into one service "
            "at once (all k together); the peers' k threads into one heap timer or one "
            "asyncio loop",
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
            goals=[
                Goal(
                    "fired->executed",
                    f"{S} fired->executed",
                    ">=",
                    1e6,
                    "issue 3: a burst of due timers (a wave of timeouts) reaches the executor "
                    "processes at 1 M/s",
                    "a burst of due timers waits longer to run than the goal allows",
                )
            ],
            wid="W6",
            about="n no-op timers due at one deadline, from the deadline until every task has "
            "run in an executor process; the process pools run the no-op n times (they "
            "dispatch work now, not at a deadline)",
            explain={
                "ProcessPoolExecutor.submit": "a pickled call and a pipe round trip per "
                "task: the stdlib's nearest way to run work in other processes, not built "
                "for millions of tiny tasks."
            },
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
            notes=[
                f"{S} TimerService.stop()",
                f"{S} executor replaced: SIGKILL -> next timer run",
                "import shmwheel + first use of TimerService",
                f"{S} modules without a bytecode cache",
            ],
            goals=[
                Goal(
                    "import shmwheel",
                    "import shmwheel",
                    "<=",
                    150,
                    "issue 8: every program that uses shmwheel pays this at start (numba's "
                    "import once took 0.4 s)",
                    "every script and command using shmwheel starts slower",
                ),
                Goal(
                    "TimerService.start()",
                    f"{S} TimerService.start() (1M capacity)",
                    "<=",
                    100,
                    "issue 33: a test suite starts a service per test, a scheduler one per "
                    "pool (issue 8 asked 2 s)",
                    "start() waits for one interpreter (the zygote) to import numpy and the "
                    "service layer, 110-130 ms of CPU on the loaded 2-core VM, 20-40 ms more "
                    "when it compiles shmwheel from source (the 'without a bytecode cache' figure: "
                    "PYTHONDONTWRITEBYTECODE; docs/performance.md, issue 33); a loaded "
                    "machine stretches it",
                ),
                Goal(
                    "TimerService.stop()",
                    f"{S} TimerService.stop()",
                    "<=",
                    50,
                    "issue 33: stop() stays quick beside the faster start",
                    "stopping waits for every process to exit",
                ),
                Goal(
                    "executor replaced",
                    f"{S} executor replaced: SIGKILL -> next timer run",
                    "<=",
                    50,
                    "issue 33: a job stopped by killing its worker waits for the replacement",
                    "a killed executor's timers wait longer for a replacement",
                ),
            ],
            wid="W8",
            about="import in a fresh interpreter; start() of a 1 M-capacity service until "
            "every process is ready, beside starting a process pool and running one task on "
            "each worker; every executor SIGKILLed with a timer due now, until it has run "
            "(median of 5 kills); stop()",
            explain={
                f"{S} TimerService.start() (1M capacity)": "start() creates the segment for "
                "1 M timers (W3's size) and starts the coordinator, the reaper and the "
                "executors, waiting until each is ready; the pool only starts its workers.",
                f"{S} modules without a bytecode cache": "shmwheel modules "
                "this process loaded without a usable bytecode cache while Python writes "
                "none (PYTHONDONTWRITEBYTECODE): each start()'s zygote compiles those the "
                "roles import (25) from source, 20-40 ms of CPU.",
            },
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
            about="per-call schedule, then cancel, of 10k timers with more already pending "
            "(the levels on the sizes line): the cost should stay flat as pending grows",
        ),
        *journal_workloads(recovery_n),
        *purgatory_workloads(),
        *heartbeat_workloads(),
        *jobs_workloads(),
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
