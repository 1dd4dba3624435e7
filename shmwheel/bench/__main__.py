"""python -m shmwheel.bench: shmwheel against its peers, measured in one run.

Each workload is run for shmwheel and its baselines in the same repetition; repetitions
are interleaved across workloads and the table shows medians, so drift on a shared
machine hits every system alike. Ratios above 1 favour shmwheel. The svc_* workloads
start a multiprocess TimerService each (stopped before the next) and print their goals;
W9's journals live in temporary directories, removed before the next workload.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import journal_workloads as JW
from . import purgatory_workloads as PW
from . import service_workloads as SW
from . import workloads as W
from .baselines import RedisDelayQueue, redis_status


@dataclass
class Workload:
    key: str
    title: str
    run: Callable[[int], W.Figures]
    size: str  # which size it takes: "core", "timer", "kernel", "service", "lateness",
    #            "capacity", "recovery"
    rows: list[tuple[str, str]]  # (shmwheel figure, baseline figure) pairs to compare
    unit: str = "ops/s"
    reps: list[W.Figures] = field(default_factory=list)
    seconds: float = 0.0  # wall time of all its repetitions
    notes: list[str] = field(default_factory=list)  # further figures, printed without ratio
    # (what, figure, op, target)
    goals: list[tuple[str, str, str, float]] = field(default_factory=list)
    wid: str = ""  # "W1".."W9" for the service workloads; "" for the further ones

    @property
    def label(self) -> str:
        return f"{self.wid} {self.title}" if self.wid else self.title

    def median(self) -> W.Figures:
        keys = self.reps[0].keys() if self.reps else []
        return {k: statistics.median(r[k] for r in self.reps) for k in keys}


def workloads(
    producers: list[int] | None = None,
    levels: list[int] | None = None,
    redis: bool = False,
    recovery_n: int = JW.RECOVERY_N,
) -> list[Workload]:
    """W1-W9 first (each multiprocess-service workload against its peers, with the Redis
    peer's rows if `redis`), then the further in-process workloads (wheel core, Kafka
    layer, kernels)."""
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
        ),
    ]


def service_workloads(
    producers: list[int] | None = None,
    levels: list[int] | None = None,
    redis: bool = False,
    recovery_n: int = JW.RECOVERY_N,
) -> list[Workload]:
    """W1-W9. With `redis`, the Redis sorted-set peer's rows too (main() sets
    SW.use_redis to the same value so that the workloads measure it). `recovery_n` only
    names W9's recovery goal: the workload recovers sizes["recovery"] timers."""
    S = "shmwheel"
    R = "redis"

    def rd(*items):  # the Redis rows / notes, only when it runs
        return list(items) if redis else []

    ks = producers or SW.producer_counts()
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
            SW.svc_schedule_call,
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
            SW.svc_schedule_many,
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
            SW.svc_cancel,
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
            SW.svc_memory,
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
                    for peer in SW.RSS_PEERS
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
            SW.svc_lateness,
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
            functools.partial(SW.svc_producers, ks=ks),
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
            SW.svc_fire,
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
            SW.svc_startup,
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
            functools.partial(SW.svc_scale, levels=lv),
            "service",
            [
                (f"{S} {op} @ {SW.level_label(x)}", f"heapq+thread {op} @ {SW.level_label(x)}")
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
                (f"recovery of {SW.level_label(recovery_n)} pending, start()", start, "<=", 5000)
            ],
            wid="W9",
        ),
    ]


DEFAULT_LEVELS = [10_000, 100_000, 1_000_000]
FULL_LEVEL = 10_000_000


GROUPS = {"service": "every svc_* workload (W1-W10)", "inprocess": "every other workload"}


def machine() -> dict:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numpy

    cc = sysconfig.get_config_var("CC") or "cc"
    return {
        "cores": len(os.sched_getaffinity(0)),
        "cpu": model,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "native": f"C extension built with {cc.split()[0]}",
        "loadavg_start": os.getloadavg()[0],
    }


LOWER_IS_BETTER = ("B", "us", "ms", "us/op")


def fmt(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value:,.0f} B"
    if unit == "us":
        return f"{value:,.0f} us"
    if unit == "us/op":
        return f"{value:,.2f} us/op"
    if unit == "ms":
        return f"{value:,.3f} ms"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {suffix}/s"
    return f"{value:.0f} /s"


def ratio(a: float, b: float, unit: str) -> str:
    top, bottom = (b, a) if unit in LOWER_IS_BETTER else (a, b)
    return f"{top / bottom:>6.2g}x" if bottom > 0 else f"{'-':>7}"


def table(selected: list[Workload]) -> str:
    cells = []
    for w in selected:
        med = w.median()
        for i, (mine, theirs) in enumerate(w.rows):
            a, b = med[mine], med[theirs]
            cells.append(
                (
                    w.label if i == 0 else "",
                    f"{mine} {fmt(a, w.unit)}",
                    f"{theirs} {fmt(b, w.unit)}",
                    ratio(a, b, w.unit),
                )
            )
    widths = [
        max([len(h)] + [len(c[i]) for c in cells])
        for i, h in enumerate(("workload", "shmwheel", "baseline"))
    ]
    head = (
        f"{'workload':<{widths[0]}}  {'shmwheel':<{widths[1]}}  "
        f"{'baseline':<{widths[2]}}  {'ratio':>7}"
    )
    lines = [head, "-" * len(head)]
    for c in cells:
        lines.append(f"{c[0]:<{widths[0]}}  {c[1]:<{widths[1]}}  {c[2]:<{widths[2]}}  {c[3]}")
    return "\n".join(lines)


def notes(selected: list[Workload]) -> str:
    lines = []
    for w in selected:
        med = w.median()
        for k in w.notes:
            unit = (
                ""
                if k.startswith(
                    (
                        "early",
                        "completed",
                        "shmwheel executors",
                        "ratio",
                        "redis timers",
                        "timers",
                        "pending",
                        "journal",
                    )
                )
                else w.unit
            )
            value = (
                f"{med[k]:.2f}x"
                if k.startswith("ratio")
                else f"{med[k]:.3f} us"
                if k.endswith("CPU us per timer")
                else f"{med[k]:,.{1 if 'per timer' in k else 0}f} B"
                if k.startswith("journal") and "bytes" in k
                else f"{med[k]:,.0f}"
                if not unit
                else fmt(med[k], unit)
            )
            lines.append(f"  {w.label}: {k} {value}")
    return "\n".join(["further figures (medians):", *lines]) if lines else ""


def goal_verdicts(selected: list[Workload]) -> list[dict]:
    out = []
    for w in selected:
        med = w.median()
        for what, key, op, target in w.goals:
            v = med[key]
            met = v >= target if op == ">=" else v <= target
            out.append(
                {
                    "goal": what,
                    "figure": key,
                    "op": op,
                    "target": target,
                    "value": v,
                    "unit": w.unit if not key.startswith(("early", "ratio")) else "",
                    "met": bool(met),
                }
            )
    return out


def goals_text(verdicts: list[dict]) -> str:
    if not verdicts:
        return ""
    lines = ["service goals (medians):"]
    for g in verdicts:

        def show(x: float, unit: str = g["unit"], figure: str = g["figure"]) -> str:
            if unit == "B":
                return f"{x:,.2f} B"  # the byte goals are tight: show the fraction
            if figure.startswith("ratio"):
                return f"{x:.2f}x"
            return fmt(x, unit) if unit else f"{x:,.0f}"

        v, t = g["value"], g["target"]
        if t == 0:
            how = ""
        elif g["op"] == ">=":
            how = f" ({v / t:.3g}x the goal)"
        else:
            how = f" ({v / t:.3g}x the limit)"
        lines.append(
            f"  {g['goal']:<34} {g['op']} {show(t):>10}: {show(v):>12}  "
            f"{'met' if g['met'] else 'MISSED'}{how}"
        )
    return "\n".join(lines)


REDIS_KEYS = {
    "svc_schedule_call",
    "svc_schedule_many",
    "svc_cancel",
    "svc_memory",
    "svc_lateness",
    "svc_fire",
}  # the workloads with a Redis peer


def redis_probe() -> tuple[bool, str]:
    """Whether the Redis peer can run here: redis-server on PATH, the redis module
    importable, and a server started on 127.0.0.1 answers PING (then stopped)."""
    ok, why = redis_status()
    if not ok:
        return False, why
    try:
        with RedisDelayQueue() as q:
            version = q.r.info("server")["redis_version"]
    except Exception as e:  # noqa: BLE001 - reported as the reason for the skip
        return False, f"Redis sorted-set baseline skipped: redis-server did not start: {e}"
    return True, (
        f"Redis sorted-set baseline: redis-server {version} on 127.0.0.1, started "
        f"and stopped by the bench (per-call ops on <= {SW.REDIS_CALL_N:,} timers, "
        f"pipelined on <= {SW.REDIS_BATCH_N:,})"
    )


def main(argv: list[str] | None = None) -> int:
    names = [w.key for w in workloads()]
    ap = argparse.ArgumentParser(prog="python -m shmwheel.bench", description=__doc__)
    groups = ", ".join(f"{k} ({v})" for k, v in GROUPS.items())
    ap.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, 1 repetition, W7 to 100k pending (CI smoke)",
    )
    ap.add_argument(
        "--full",
        action="store_true",
        help="also W7 at 10M pending (needs ~2 GiB and a minute more)",
    )
    ap.add_argument("--n", type=int, help="timers per wheel-core workload (default 500,000)")
    ap.add_argument(
        "--timer-n", type=int, help="tasks per in-process timer workload (default 100,000)"
    )
    ap.add_argument(
        "--svc-n",
        type=int,
        help="timers per service workload W1, W2, W5, W6, W9 (default 100,000; "
        "schedule_many schedules 5x this)",
    )
    ap.add_argument(
        "--recovery-n", type=int, help=f"pending timers W9 recovers (default {JW.RECOVERY_N:,})"
    )
    ap.add_argument(
        "--ops-n", type=int, help="operations per purgatory workload W10 (default 20,000)"
    )
    ap.add_argument(
        "--lateness-n",
        type=int,
        help="timers in W4, spread over a window of n/100 ms clamped to "
        "[0.5, 2] s starting 1 s ahead (default 200,000)",
    )
    ap.add_argument(
        "--producers",
        default="1,2,nproc",
        metavar="LIST",
        help="W5 producer process counts, e.g. 1,2,nproc (default; duplicates dropped)",
    )
    ap.add_argument("--reps", type=int, help="repetitions, medians reported (default 2)")
    ap.add_argument(
        "--workloads", help=f"comma-separated subset of: {','.join(names)}; or a group: {groups}"
    )
    ap.add_argument(
        "--no-redis",
        action="store_true",
        help="leave out the Redis sorted-set peer even if redis-server is installed",
    )
    ap.add_argument("--json", metavar="PATH", help="write every raw figure to PATH")
    ap.add_argument(
        "--plot",
        metavar="DIR",
        help="write PNG charts to DIR (lateness CDF, rates, cost vs pending; "
        "needs matplotlib: pip install 'shmwheel[bench]')",
    )
    ap.add_argument(
        "--journal-audit",
        action="store_true",
        help="instead of the workloads: write a journal from a service run and audit it "
        "with the PySpark pipeline (pip install 'shmwheel[spark]'; Java 17+), beside a "
        "single-process pandas pass",
    )
    ap.add_argument(
        "--audit-timers",
        type=int,
        default=20_000,
        help="one-shot timers of the --journal-audit run (default 20,000)",
    )
    ap.add_argument("--audit-out", metavar="DIR", help="keep the audit's tables and report")
    args = ap.parse_args(argv)

    if args.journal_audit:
        from . import journal_audit

        return journal_audit.run(args.audit_timers, args.audit_out)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error(
                "--plot needs matplotlib, which is not installed: "
                "pip install 'shmwheel[bench]' (or pip install matplotlib)"
            )
    try:
        producers = SW.producer_counts(args.producers)
    except ValueError as e:
        ap.error(f"--producers: {e}")
    levels = [10_000, 100_000] if args.quick else list(DEFAULT_LEVELS)
    if args.full:
        levels.append(FULL_LEVEL)
    n = args.n or (100_000 if args.quick else 500_000)
    timer_n = args.timer_n or (20_000 if args.quick else 100_000)
    svc_n = args.svc_n or (20_000 if args.quick else 100_000)
    lateness_n = args.lateness_n or (20_000 if args.quick else 200_000)
    recovery_n = args.recovery_n or (100_000 if args.quick else JW.RECOVERY_N)
    reps = args.reps or (1 if args.quick else 2)
    sizes = {
        "core": n,
        "timer": timer_n,
        "kernel": 5_000 if args.quick else 20_000,
        "service": svc_n,
        "lateness": lateness_n,
        "capacity": SW.MEMORY_CAPACITY,
        "recovery": recovery_n,
        "ops": args.ops_n or (5_000 if args.quick else 20_000),
    }
    if min(n, svc_n, lateness_n, recovery_n) < 1000 or timer_n < 100 or reps < 1:
        ap.error(
            "--n, --svc-n, --lateness-n and --recovery-n must be >= 1000, --timer-n "
            ">= 100 and --reps >= 1"
        )
    wanted_keys = set(names)
    if args.workloads:
        wanted_keys = set()
        for x in (x.strip() for x in args.workloads.split(",")):
            if x == "service":
                wanted_keys |= {k for k in names if k.startswith("svc_")}
            elif x == "inprocess":
                wanted_keys |= {k for k in names if not k.startswith("svc_")}
            elif x:
                wanted_keys.add(x)
        unknown = sorted(wanted_keys - set(names))
        if unknown:
            ap.error(
                f"unknown workloads {unknown}; choose from {names} or a group ({', '.join(GROUPS)})"
            )
    if args.quick:  # per-call Redis rates are round-trip bound: a few thousand suffice
        SW.REDIS_CALL_N, SW.REDIS_BATCH_N = 2_000, 20_000
    if args.no_redis:
        use_redis, why = False, "Redis sorted-set baseline skipped: --no-redis"
    elif wanted_keys & REDIS_KEYS:
        use_redis, why = redis_probe()
    else:
        use_redis, why = False, "Redis sorted-set baseline: not used by the selected workloads"
    SW.use_redis = use_redis
    selected = [
        w for w in workloads(producers, levels, use_redis, recovery_n) if w.key in wanted_keys
    ]

    info = machine()
    print(
        f"shmwheel bench: {info['cores']} cores, {info['cpu']}, Python {info['python']}, "
        f"{info['native']}; load {info['loadavg_start']:.2f}",
        file=sys.stderr,
    )
    note = f"note: {why}"
    print(note, file=sys.stderr)
    loads = [info["loadavg_start"]]
    started = time.perf_counter()
    total = reps * len(selected)
    step = 0
    try:
        for rep in range(reps):
            for w in selected:
                step += 1
                print(
                    f"[{step}/{total}] rep {rep + 1}/{reps}: {w.label} (n={sizes[w.size]:,}) ...",
                    file=sys.stderr,
                    flush=True,
                )
                t = time.perf_counter()
                w.reps.append(w.run(sizes[w.size]))
                w.seconds += time.perf_counter() - t
                loads.append(os.getloadavg()[0])
    except KeyboardInterrupt:
        # the workload's `with` blocks have stopped its service (processes and segments)
        # and its producer processes and pools on the way out
        print(
            f"\ninterrupted during step {step}/{total}: services stopped, nothing printed",
            file=sys.stderr,
            flush=True,
        )
        return 130
    info["loadavg_end"] = os.getloadavg()[0]
    info["loadavg_max"] = max(loads)
    info["seconds"] = round(time.perf_counter() - started, 1)

    print(
        f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, {info['native']}"
    )
    print(
        f"load average during the run: {info['loadavg_start']:.2f} -> "
        f"{info['loadavg_end']:.2f} (max {info['loadavg_max']:.2f}); {reps} "
        f"repetition(s), interleaved, medians; {info['seconds']} s"
    )
    print(
        f"sizes: service n={svc_n:,} (W1 batch 5n), W4 lateness n={lateness_n:,}, W5 "
        f"producers {','.join(map(str, producers))}, W7 pending "
        f"{', '.join(SW.level_label(x) for x in levels)}, W9 recovery n={recovery_n:,}; "
        f"wheel core n={n:,}, in-process timers n={timer_n:,}"
    )
    print(
        f"ratio = shmwheel / baseline for rates, baseline / shmwheel for bytes, us and ms "
        f"(above 1 favours shmwheel); {note[len('note: ') :]}\n"
    )
    print(table(selected))
    verdicts = goal_verdicts(selected)
    for part in (notes(selected), goals_text(verdicts)):
        if part:
            print("\n" + part)
    if SW.leaked:
        print(f"\nWARNING: services left files in /dev/shm after stop(): {SW.leaked}")
    if args.json:
        doc = {
            "machine": info,
            "args": vars(args),
            "sizes": sizes,
            "producers": producers,
            "scale_levels": levels,
            "workloads": {
                w.key: {
                    "w": w.wid,
                    "title": w.title,
                    "unit": w.unit,
                    "reps": w.reps,
                    "median": w.median(),
                    "rows": w.rows,
                    "notes": w.notes,
                    "seconds": round(w.seconds, 1),
                }
                for w in selected
            },
            "goals": verdicts,
            "services_started": SW.services_started,
            "services_leaked": SW.leaked,
            "baselines_skipped": [] if use_redis else [note],
            "redis": {
                "ran": use_redis,
                "note": note[len("note: ") :],
                "call_n_max": SW.REDIS_CALL_N,
                "batch_n_max": SW.REDIS_BATCH_N,
            },
            "lateness_histograms": {
                "shmwheel service": SW.lateness_hists,
                "buckets": "bucket 0 below 1 us, bucket i >= 1 for "
                "[2^((i-1)/8), 2^(i/8)) us; one list per repetition",
            },
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.json}", file=sys.stderr)
    if args.plot:
        from .plots import write_plots

        for path in write_plots(args.plot, selected, SW.lateness_samples, SW.lateness_hists):
            print(f"wrote {path}", file=sys.stderr)
    return 1 if SW.leaked else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # while printing or writing results: nothing is running
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
