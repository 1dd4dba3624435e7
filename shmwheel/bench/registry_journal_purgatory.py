"""W9 and W10 of the bench table: the journal (schedule rates with it on beside off, and
recovery) and the cross-process purgatory, with their notes and goals (registry_service
puts them in table order).
"""

from __future__ import annotations

from . import journal_workloads as JW
from . import purgatory_workloads as PW
from . import service_ops as OPS
from .workload import Goal, Workload


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
                Goal(
                    "watch + complete, per call / in-process purgatory",
                    f"ratio: {S} / in-process purgatory, per call",
                    ">=",
                    1.0,
                    "issue 10: Kafka's purgatory across processes (heartbeats, acks from N "
                    "workers) at least as fast as Kafka's in-process one; median of the "
                    "per-repetition ratios",
                    "sharing the purgatory across processes costs throughput against keeping "
                    "it in one process",
                )
            ],
            wid="W10",
            about="n operations watched and completed (the client loop), each until its task "
            "has run, beside Kafka's in-process DelayedOperationPurgatory and asyncio futures "
            "with call_later timeouts",
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
            about="n operations watched with 20 ms timeouts, none completed, each until its "
            "expiry task has run",
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
            goals=[
                Goal(
                    "journal on / off, per call",
                    "ratio: journal on / off, per call",
                    ">=",
                    0.70,
                    "issue 9: the journal (every lifecycle event on disk, so that a crash of "
                    "the whole service loses nothing) costs at most 30 % of per-call rate",
                    "journaling costs producers more than 30 %. Single repetitions of this "
                    "ratio range from 0.6x to 1.2x on a shared VM: re-run with --reps 5",
                ),
                Goal(
                    "journal on / off, batch",
                    "ratio: journal on / off, batch",
                    ">=",
                    0.80,
                    "issue 21: bulk loads (schedule_many) keep at least 80 % of their rate "
                    "with the journal on",
                    "the coordinator's drain thread spends about 45 ns of CPU per timer on "
                    "the journal (walking the batch's slots, encoding, CRC-32C, write(2)) "
                    "beside about 45 ns on the rest; 0.8x needs the journal's share under "
                    "about 12 ns (docs/performance.md, 'Journal, batch')",
                ),
            ],
            wid="W9",
            about="W1's schedule rates on a journaled service (fsync every 100 ms, the "
            "default) beside the same service without a journal: shmwheel against itself",
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
                Goal(
                    f"recovery of {OPS.level_label(recovery_n)} pending, start()",
                    start,
                    "<=",
                    5000,
                    "issue 9: after the whole service dies, 1 M pending timers are back "
                    "within 5 s of start() (set for 1 M; other sizes recover n)",
                    "a service restarted after a crash is down longer than the goal allows",
                )
            ],
            wid="W9",
            about="start() of a service on the journal of a stopped one holding n pending "
            "timers (every one re-armed), beside start() with no journal",
        ),
    ]
