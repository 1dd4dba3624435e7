"""W11 and W12 of the bench table: the heartbeat (``service.heartbeat``) and leases
(``service.lease``), with their notes and goals; ``ROWS``, at the end, is the table.
"""

from __future__ import annotations

from ..service import heartbeat, lease
from ..service.common import S
from ..workload import Goal, Workload
from .row import Row, Terms

LATE = [f"{lease.EXPIRE} {q}" for q in lease.QS]


def heartbeat_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "heartbeat: reset vs cancel + schedule",
        row.run,
        "service",
        [(heartbeat.RESET, peer) for peer in (heartbeat.PAIR, heartbeat.ASYNCIO, heartbeat.HEAP)],
        notes=[
            heartbeat.TIMERS,
            heartbeat.R_PAIR,
            heartbeat.R_ASYNCIO,
            heartbeat.RESET + heartbeat.CPU,
            heartbeat.PAIR + heartbeat.CPU,
        ],
        goals=[
            Goal(
                "reset / shmwheel cancel + schedule",
                heartbeat.R_PAIR,
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
                heartbeat.R_ASYNCIO,
                ">=",
                3.0,
                "issue 22: moving a deadline across processes beats the in-process "
                "idiom an asyncio user has (cancel the TimerHandle, call_later again)",
                "a heartbeat through the shared service costs more than a third of "
                "asyncio's pair in its own loop",
            ),
        ],
        wid=row.id,
        about=f"N = n/10 timers with 30-60 s heartbeat timeouts, each moved once per "
        f"round for {heartbeat.ROUNDS} rounds, none firing: shmwheel's TimerHandle.reset, "
        f"then its cancel + schedule (alternating which goes first), beside asyncio's "
        f"cancel + call_later in a running loop and the heapq+thread timer's",
        explain={
            heartbeat.ASYNCIO: f"in one running loop that turns every {heartbeat.YIELD_EVERY} "
            "heartbeats (as a server's loop runs between the events it handles), so "
            "it drops its cancelled handles from its heap as in production.",
            heartbeat.HEAP: "the heapq docs' lazy deletion: the cancelled entry stays in the "
            "heap, marked, until its deadline would have come.",
        },
    )


def lease_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "lease: beats",
        row.run,
        "service",
        [(lease.BEAT, lease.ASYNCIO), (lease.BEAT_K, lease.ASYNCIO), (lease.RESET, lease.ASYNCIO)],
        notes=[lease.LEASES, lease.R_RESET],
        goals=[
            Goal(
                "Lease.beat / TimerHandle.reset",
                lease.R_RESET,
                ">=",
                0.9,
                "issue 35: a lease's beat is a reset (one slot per lease, O(1) per "
                "beat); what the Lease adds in Python must cost at most a tenth of it",
                "the Lease's own Python (its ttl, the bool) costs more than a tenth of a reset",
            ),
        ],
        wid=row.id,
        about=f"N = n/10 leases with 30-60 s ttls, each beaten {lease.ROUNDS} times, none "
        f"expiring: Lease.beat in this process beside TimerHandle.reset on as many "
        f"timers (alternating which goes first), then from {lease.K} spawned holder "
        f"processes the leases were handed to (pickled); asyncio's Timeout.reschedule "
        f"on N asyncio.timeout contexts in one loop",
    )


def lease_expiry_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "lease: expiry delay",
        row.run,
        "service",
        [(f"{x}: {S}", f"{x}: asyncio") for x in LATE],
        unit="ms",
        goals=[
            Goal(
                "expiry p99 after the last beat's ttl",
                f"{lease.EXPIRE} p99: {S}",
                "<=",
                2.0,
                "issue 35: a holder that stops beating is declared dead within its ttl "
                "and 2 ms, in the executor pool, on a quiet machine",
                "expiry tasks started later: compare W4's lateness of the same run (an "
                "expiry is a timer firing) and the machine's (python bench/vm_jitter.py)",
            ),
        ],
        wid=row.id,
        about=f"n/50 leases (at least 100) held by {lease.K} spawned processes, beaten "
        f"{lease.BEATS} times with a far ttl and then once with a ttl of {lease.AHEAD_MS} ms "
        f"+ up to {lease.SPREAD_MS} ms (spread): ms from the deadline that last beat set "
        f"to its expiry task's start; asyncio timeouts rescheduled alike in one loop, "
        f"from when() to the except block",
    )


ROWS = [
    # id,   name,               measured by,             spec: peers, notes, goals
    Row("W11", "svc_heartbeat",    heartbeat.svc_heartbeat, heartbeat_spec),
    Row("W12", "svc_lease",        lease.svc_lease,         lease_spec),
    Row("W12", "svc_lease_expiry", lease.svc_lease_expiry,  lease_expiry_spec),
]  # fmt: skip
