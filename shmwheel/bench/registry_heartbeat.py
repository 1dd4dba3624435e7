"""W11 and W12 of the bench table: the heartbeat (``service_heartbeat``) and leases
(``service_lease``), with their notes and goals (registry_service puts them in table
order, last)."""

from __future__ import annotations

from . import service_heartbeat as HB
from . import service_lease as LS
from .service_common import S
from .workload import Goal, Workload


def heartbeat_workloads() -> list[Workload]:
    """W11: reset against cancel + schedule, shmwheel's own and its peers'; W12: leases."""
    return [
        Workload(
            "svc_heartbeat",
            "heartbeat: reset vs cancel + schedule",
            HB.svc_heartbeat,
            "service",
            [(HB.RESET, peer) for peer in (HB.PAIR, HB.ASYNCIO, HB.HEAP)],
            notes=[HB.TIMERS, HB.R_PAIR, HB.R_ASYNCIO, HB.RESET + HB.CPU, HB.PAIR + HB.CPU],
            goals=[
                Goal(
                    "reset / shmwheel cancel + schedule",
                    HB.R_PAIR,
                    ">=",
                    2.0,
                    "issue 22: a heartbeat deadline moves in one step (one ring record, "
                    "same id, no race window) instead of a cancel and a schedule; median of "
                    "the per-repetition ratios",
                    "reset costs the caller more than half a cancel + schedule pair; each "
                    "reset still publishes one ring record the coordinator relinks, which a "
                    "sustained rate includes",
                ),
                Goal(
                    "reset / asyncio cancel + call_later",
                    HB.R_ASYNCIO,
                    ">=",
                    3.0,
                    "issue 22: moving a deadline across processes beats the in-process "
                    "idiom an asyncio user has (cancel the TimerHandle, call_later again)",
                    "a heartbeat through the shared service costs more than a third of "
                    "asyncio's pair in its own loop",
                ),
            ],
            wid="W11",
            about=f"N = n/10 timers with 30-60 s heartbeat timeouts, each moved once per "
            f"round for {HB.ROUNDS} rounds, none firing: shmwheel's TimerHandle.reset, "
            f"then its cancel + schedule (alternating which goes first), beside asyncio's "
            f"cancel + call_later in a running loop and the heapq+thread timer's",
            explain={
                HB.ASYNCIO: f"in one running loop that turns every {HB.YIELD_EVERY} "
                "heartbeats (as a server's loop runs between the events it handles), so "
                "it drops its cancelled handles from its heap as in production.",
                HB.HEAP: "the heapq docs' lazy deletion: the cancelled entry stays in the "
                "heap, marked, until its deadline would have come.",
            },
        ),
        *lease_workloads(),
    ]


def lease_workloads() -> list[Workload]:
    """W12: Lease.beat (from one and from K processes) against TimerHandle.reset and
    asyncio's Timeout.reschedule; and how late an expiry task starts."""
    late = [f"{LS.EXPIRE} {q}" for q in LS.QS]
    return [
        Workload(
            "svc_lease",
            "lease: beats",
            LS.svc_lease,
            "service",
            [(LS.BEAT, LS.ASYNCIO), (LS.BEAT_K, LS.ASYNCIO), (LS.RESET, LS.ASYNCIO)],
            notes=[LS.LEASES, LS.R_RESET],
            goals=[
                Goal(
                    "Lease.beat / TimerHandle.reset",
                    LS.R_RESET,
                    ">=",
                    0.9,
                    "issue 35: a lease's beat is a reset (one slot per lease, O(1) per "
                    "beat); what the Lease adds in Python must cost at most a tenth of it",
                    "the Lease's own Python (its ttl, the bool) costs more than a tenth of a reset",
                ),
            ],
            wid="W12",
            about=f"N = n/10 leases with 30-60 s ttls, each beaten {LS.ROUNDS} times, none "
            f"expiring: Lease.beat in this process beside TimerHandle.reset on as many "
            f"timers (alternating which goes first), then from {LS.K} spawned holder "
            f"processes the leases were handed to (pickled); asyncio's Timeout.reschedule "
            f"on N asyncio.timeout contexts in one loop",
        ),
        Workload(
            "svc_lease_expiry",
            "lease: expiry delay",
            LS.svc_lease_expiry,
            "service",
            [(f"{x}: {S}", f"{x}: asyncio") for x in late],
            unit="ms",
            goals=[
                Goal(
                    "expiry p99 after the last beat's ttl",
                    f"{LS.EXPIRE} p99: {S}",
                    "<=",
                    2.0,
                    "issue 35: a holder that stops beating is declared dead within its ttl "
                    "and 2 ms, in the executor pool, on a quiet machine",
                    "expiry tasks started later: compare W4's lateness of the same run (an "
                    "expiry is a timer firing) and the machine's (python bench/vm_jitter.py)",
                ),
            ],
            wid="W12",
            about=f"n/50 leases (at least 100) held by {LS.K} spawned processes, beaten "
            f"{LS.BEATS} times with a far ttl and then once with a ttl of {LS.AHEAD_MS} ms "
            f"+ up to {LS.SPREAD_MS} ms (spread): ms from the deadline that last beat set "
            f"to its expiry task's start; asyncio timeouts rescheduled alike in one loop, "
            f"from when() to the except block",
        ),
    ]
