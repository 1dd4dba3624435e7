"""W11 of the bench table: the heartbeat (``service_heartbeat``), with its notes and goals
(registry_service puts it in table order, last)."""

from __future__ import annotations

from . import service_heartbeat as HB
from .workload import Goal, Workload


def heartbeat_workloads() -> list[Workload]:
    """W11: reset against cancel + schedule, shmwheel's own and its peers'."""
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
        )
    ]
