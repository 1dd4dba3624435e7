"""W9 and W10 of the bench table: the journal (schedule rates with it on beside off, and
recovery) and the cross-process purgatory, with their notes and goals; ``ROWS``, at the
end, is the table.
"""

from __future__ import annotations

from ..journal import workloads as journal_workloads
from ..service import ops as OPS
from ..service import purgatory
from ..workload import Goal, Workload
from .row import Row, Terms

S = "shmwheel"
SHAPES = ("per call", f"batched ({purgatory.BATCH} per key)")
RATES = [
    (f"{S} {what}, journal on", f"{S} {what}, journal off")
    for what in ("Client.schedule", "Client.schedule_many")
]
START = f"{S} start(), recovering the pending timers"


def purgatory_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "purgatory: watch + complete",
        row.run,
        "ops",
        [
            (f"{S} watch + complete, {sh}", f"{peer} watch + complete, {sh}")
            for sh in SHAPES
            for peer in ("in-process purgatory", "asyncio")
        ],
        notes=[f"{S} watch + complete, {sh}, client loop" for sh in SHAPES],
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
        wid=row.id,
        about="n operations watched and completed (the client loop), each until its task "
        "has run, beside Kafka's in-process DelayedOperationPurgatory and asyncio futures "
        "with call_later timeouts",
    )


def purgatory_expire_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "purgatory: watch + expire",
        row.run,
        "ops",
        [
            (f"{S} watch + expire", f"{peer} watch + expire")
            for peer in ("in-process purgatory", "asyncio")
        ],
        notes=[f"{S} watch + expire, client loop"],
        wid=row.id,
        about="n operations watched with 20 ms timeouts, none completed, each until its "
        "expiry task has run",
    )


def journal_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "journal: schedule rate, on / off",
        row.run,
        "service",
        RATES,
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
        wid=row.id,
        about="W1's schedule rates on a journaled service (fsync every 100 ms, the "
        "default) beside the same service without a journal: shmwheel against itself",
    )


def recovery_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "journal: recovery, start()",
        row.run,
        "recovery",
        [(START, f"{S} start(), no journal")],
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
                f"recovery of {OPS.level_label(t.recovery_n)} pending, start()",
                START,
                "<=",
                5000,
                "issue 9: after the whole service dies, 1 M pending timers are back "
                "within 5 s of start() (set for 1 M; other sizes recover n)",
                "a service restarted after a crash is down longer than the goal allows",
            )
        ],
        wid=row.id,
        about="start() of a service on the journal of a stopped one holding n pending "
        "timers (every one re-armed), beside start() with no journal",
    )


ROWS = [
    # id,   name,                   measured by,                     spec: peers, notes, goals
    Row("W9",  "svc_journal",          journal_workloads.svc_journal,   journal_spec),
    Row("W9",  "svc_recovery",         journal_workloads.svc_recovery,  recovery_spec),
    Row("W10", "svc_purgatory",        purgatory.svc_purgatory,         purgatory_spec),
    Row("W10", "svc_purgatory_expire", purgatory.svc_purgatory_expire,  purgatory_expire_spec),
]  # fmt: skip
