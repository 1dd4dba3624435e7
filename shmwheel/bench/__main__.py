"""python -m shmwheel.bench: shmwheel against its peers, measured in one run.

Each workload is run for shmwheel and its baselines in the same repetition; repetitions
are interleaved across workloads and the table shows medians, so drift on a shared
machine hits every system alike. Ratios above 1 favour shmwheel. The svc_* workloads
start a multiprocess TimerService each (stopped before the next) and print their goals.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import service_workloads as SW
from . import workloads as W


@dataclass
class Workload:
    key: str
    title: str
    run: Callable[[int], W.Figures]
    size: str  # which size it takes: "core", "timer", "kernel", "service", "lateness",
    #            "capacity"
    rows: list[tuple[str, str]]  # (shmwheel figure, baseline figure) pairs to compare
    unit: str = "ops/s"
    reps: list[W.Figures] = field(default_factory=list)
    seconds: float = 0.0  # wall time of all its repetitions
    notes: list[str] = field(default_factory=list)  # further figures, printed without ratio
    # (what, figure, op, target)
    goals: list[tuple[str, str, str, float]] = field(default_factory=list)

    def median(self) -> W.Figures:
        keys = self.reps[0].keys() if self.reps else []
        return {k: statistics.median(r[k] for r in self.reps) for k in keys}


def workloads() -> list[Workload]:
    S = "shmwheel"
    return [
        Workload("schedule_batch", "schedule, batch", W.core_schedule_batch, "core",
                 [(f"{S} core insert_many", "heapq heapify")]),
        Workload("schedule_call", "schedule, per call", W.core_schedule_call, "core",
                 [(f"{S} core insert", "heapq heappush")]),
        Workload("cancel", "cancel", W.core_cancel, "core",
                 [(f"{S} core cancel_many", "heapq lazy cancel"),
                  (f"{S} core cancel", "heapq lazy cancel")]),
        Workload("expire", "expire (collect due)", W.core_expire, "core",
                 [(f"{S} core advance", "heapq heappop")]),
        Workload("stall", "longest clock step (wheel 20)", W.cascade_stall, "core",
                 [("max step: pre-cascade", "max step: cascade at expiry (Kafka)"),
                  ("p99.9 step: pre-cascade", "p99.9 step: cascade at expiry (Kafka)")],
                 unit="us"),
        Workload("memory", "bytes per pending timer", W.core_memory, "core",
                 [(f"{S} core", "heapq entry"), (f"{S} core", "asyncio call_later")],
                 unit="B"),
        Workload("timer_ops", "in-process timer add/cancel", W.timer_schedule_cancel, "timer",
                 [("add: shmwheel SystemTimer", "add: asyncio call_later"),
                  ("add: shmwheel SystemTimer", "add: heapq+thread"),
                  ("cancel: shmwheel SystemTimer", "cancel: asyncio call_later"),
                  ("cancel: shmwheel SystemTimer", "cancel: heapq+thread")]),
        Workload("timer_fire", "in-process fire->run (no-op)", W.timer_fire, "timer",
                 [("shmwheel SystemTimer", "asyncio call_later"),
                  ("shmwheel SystemTimer", "heapq+thread")]),
        Workload("kernels", "wheel kernels: numba vs interpreted", W.kernel_choice, "kernel",
                 [("insert_many: numba", "insert_many: interpreted"),
                  ("cancel_many: numba", "cancel_many: interpreted"),
                  ("cascade+advance: numba", "cascade+advance: interpreted")]),
        *service_workloads(),
    ]


def service_workloads() -> list[Workload]:
    S = "shmwheel"
    late = [(q, f"{q}: {S} service") for q in ("p50", "p99", "p99.9")]
    return [
        Workload("svc_schedule_call", "service schedule, per call", SW.svc_schedule_call,
                 "service",
                 [(f"{S} Client.schedule", "heapq+thread schedule"),
                  (f"{S} Client.schedule", "asyncio call_later")],
                 goals=[("a. Client.schedule, 1 producer", f"{S} Client.schedule", ">=", 1e6)]),
        Workload("svc_schedule_many", "service schedule_many", SW.svc_schedule_many, "service",
                 [(f"{S} Client.schedule_many", "heapq+thread schedule_many"),
                  (f"{S} Client.schedule_many", "asyncio call_later loop")],
                 goals=[("b. Client.schedule_many", f"{S} Client.schedule_many", ">=", 10e6)]),
        Workload("svc_producers", "service, 2 producer processes", SW.svc_two_producers,
                 "service",
                 [(f"{S} 2 producer processes", "heapq+thread 2 threads"),
                  (f"{S} 2 producer processes", "asyncio 2 threads (call_soon_threadsafe)")],
                 notes=[f"{S} per producer (mean)"],
                 goals=[("c. 2 producers, aggregate", f"{S} 2 producer processes", ">=",
                         1.5e6)]),
        Workload("svc_cancel", "service cancel", SW.svc_cancel, "service",
                 [(f"{S} Client.cancel", "heapq+thread cancel"),
                  (f"{S} Client.cancel", "asyncio TimerHandle.cancel"),
                  (f"{S} Client.cancel_many", "heapq+thread cancel"),
                  (f"{S} Client.cancel_many", "asyncio TimerHandle.cancel")],
                 goals=[("d. Client.cancel, per call", f"{S} Client.cancel", ">=", 2e6),
                        ("d. Client.cancel_many", f"{S} Client.cancel_many", ">=", 2e6)]),
        Workload("svc_memory", "service bytes per pending timer", SW.svc_memory, "capacity",
                 [(f"{S} segment / capacity", "heapq+thread entry"),
                  (f"{S} segment / capacity", "asyncio call_later"),
                  (f"{S} segment bytes per added timer", "heapq+thread entry"),
                  (f"{S} segment bytes per added timer", "asyncio call_later")],
                 unit="B", notes=[f"{S} payload arena / capacity", f"{S} segment bytes",
                                  f"{S} wheel+side / capacity"],
                 goals=[("e. segment bytes / capacity", f"{S} segment / capacity", "<=", 48),
                        ("e. segment bytes per added timer",
                         f"{S} segment bytes per added timer", "<=", 48)]),
        Workload("svc_lateness", "service lateness (no-op tasks)", SW.svc_lateness, "lateness",
                 [(k, f"{q}: {peer}") for q, k in late
                  for peer in ("heapq+thread", "asyncio call_at")],
                 unit="ms",
                 notes=[f"{w}: {who}" for w in ("max", "early")
                        for who in (f"{S} service", "heapq+thread", "asyncio call_at")]
                 + [f"completed: {S} service"],
                 goals=[(f"f. lateness {q}", k, "<=", t)
                        for (q, k), t in zip(late, (0.3, 1.0, 2.0), strict=True)]
                 + [("f. early runs", f"early: {S} service", "<=", 0)]),
        Workload("svc_fire", "service fired->executed (no-op)", SW.svc_fire, "service",
                 [(f"{S} fired->executed", "ProcessPoolExecutor.submit"),
                  (f"{S} fired->executed", "heapq+thread (in-process)"),
                  (f"{S} fired->executed", "asyncio call_at (in-process)")],
                 notes=[f"{S} executors"],
                 goals=[("g. fired->executed", f"{S} fired->executed", ">=", 1e6)]),
    ]


GROUPS = {"service": "every svc_* workload", "inprocess": "every other workload"}


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
    import numba
    import numpy
    return {"cores": len(os.sched_getaffinity(0)), "cpu": model,
            "python": platform.python_version(), "numpy": numpy.__version__,
            "numba": numba.__version__, "loadavg_start": os.getloadavg()[0]}


LOWER_IS_BETTER = ("B", "us", "ms")


def fmt(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value:,.0f} B"
    if unit == "us":
        return f"{value:,.0f} us"
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
    lines = [f"{'workload':<30} {'shmwheel':<42} {'baseline':<38} {'ratio':>7}"]
    lines.append("-" * len(lines[0]))
    for w in selected:
        med = w.median()
        for i, (mine, theirs) in enumerate(w.rows):
            a, b = med[mine], med[theirs]
            lines.append(f"{w.title if i == 0 else '':<30} "
                         f"{mine + ' ' + fmt(a, w.unit):<42} "
                         f"{theirs + ' ' + fmt(b, w.unit):<38} {ratio(a, b, w.unit)}")
    return "\n".join(lines)


def notes(selected: list[Workload]) -> str:
    lines = []
    for w in selected:
        med = w.median()
        for k in w.notes:
            unit = "" if k.startswith(("early", "completed", "shmwheel executors")) else w.unit
            value = f"{med[k]:,.0f}" if not unit else fmt(med[k], unit)
            lines.append(f"  {w.title}: {k} {value}")
    return "\n".join(["further figures (medians):", *lines]) if lines else ""


def goal_verdicts(selected: list[Workload]) -> list[dict]:
    out = []
    for w in selected:
        med = w.median()
        for what, key, op, target in w.goals:
            v = med[key]
            met = v >= target if op == ">=" else v <= target
            out.append({"goal": what, "figure": key, "op": op, "target": target, "value": v,
                        "unit": w.unit if not key.startswith("early") else "",
                        "met": bool(met)})
    return out


def goals_text(verdicts: list[dict]) -> str:
    if not verdicts:
        return ""
    lines = ["service goals (medians):"]
    for g in verdicts:
        def show(x: float, unit: str = g["unit"]) -> str:
            if unit == "B":
                return f"{x:,.2f} B"  # the byte goals are tight: show the fraction
            return fmt(x, unit) if unit else f"{x:,.0f}"

        v, t = g["value"], g["target"]
        if t == 0:
            how = ""
        elif g["op"] == ">=":
            how = f" ({v / t:.3g}x the goal)"
        else:
            how = f" ({v / t:.3g}x the limit)"
        lines.append(f"  {g['goal']:<34} {g['op']} {show(t):>10}: {show(v):>12}  "
                     f"{'met' if g['met'] else 'MISSED'}{how}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    names = [w.key for w in workloads()]
    ap = argparse.ArgumentParser(prog="python -m shmwheel.bench", description=__doc__)
    groups = ", ".join(f"{k} ({v})" for k, v in GROUPS.items())
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 repetition (CI smoke)")
    ap.add_argument("--n", type=int, help="timers per wheel-core workload (default 500,000)")
    ap.add_argument("--timer-n", type=int,
                    help="tasks per in-process timer workload (default 100,000)")
    ap.add_argument("--svc-n", type=int,
                    help="timers per service workload (default 100,000; schedule_many "
                         "schedules 5x this)")
    ap.add_argument("--lateness-n", type=int,
                    help="timers in the service lateness workload, spread over n/100 ms "
                         "clamped to [0.5, 2] s (default 200,000)")
    ap.add_argument("--reps", type=int, help="repetitions, medians reported (default 2)")
    ap.add_argument("--workloads",
                    help=f"comma-separated subset of: {','.join(names)}; or a group: {groups}")
    ap.add_argument("--json", metavar="PATH", help="write every raw figure to PATH")
    args = ap.parse_args(argv)

    n = args.n or (100_000 if args.quick else 500_000)
    timer_n = args.timer_n or (20_000 if args.quick else 100_000)
    svc_n = args.svc_n or (20_000 if args.quick else 100_000)
    lateness_n = args.lateness_n or (20_000 if args.quick else 200_000)
    reps = args.reps or (1 if args.quick else 2)
    sizes = {"core": n, "timer": timer_n, "kernel": 5_000 if args.quick else 20_000,
             "service": svc_n, "lateness": lateness_n, "capacity": SW.MEMORY_CAPACITY}
    if n < 1000 or timer_n < 100 or svc_n < 1000 or lateness_n < 1000 or reps < 1:
        ap.error("--n, --svc-n and --lateness-n must be >= 1000, --timer-n >= 100 and "
                 "--reps >= 1")
    selected = workloads()
    if args.workloads:
        wanted = set()
        for x in (x.strip() for x in args.workloads.split(",")):
            if x == "service":
                wanted |= {k for k in names if k.startswith("svc_")}
            elif x == "inprocess":
                wanted |= {k for k in names if not k.startswith("svc_")}
            elif x:
                wanted.add(x)
        unknown = sorted(wanted - set(names))
        if unknown:
            ap.error(f"unknown workloads {unknown}; choose from {names} or a group "
                     f"({', '.join(GROUPS)})")
        selected = [w for w in selected if w.key in wanted]

    info = machine()
    print(f"shmwheel bench: {info['cores']} cores, {info['cpu']}, Python {info['python']}, "
          f"numba {info['numba']}; load {info['loadavg_start']:.2f}", file=sys.stderr)
    W.warm_up()
    started = time.perf_counter()
    total = reps * len(selected)
    step = 0
    for rep in range(reps):
        for w in selected:
            step += 1
            print(f"[{step}/{total}] rep {rep + 1}/{reps}: {w.title} "
                  f"(n={sizes[w.size]:,}) ...", file=sys.stderr, flush=True)
            t = time.perf_counter()
            w.reps.append(w.run(sizes[w.size]))
            w.seconds += time.perf_counter() - t
    info["loadavg_end"] = os.getloadavg()[0]
    info["seconds"] = round(time.perf_counter() - started, 1)

    print(f"\nmachine: {info['cores']} cores, {info['cpu']}; load average "
          f"{info['loadavg_start']:.2f} -> {info['loadavg_end']:.2f}; "
          f"{reps} repetition(s), medians; {info['seconds']} s")
    print(f"sizes: wheel core n={n:,}, in-process timers n={timer_n:,}, service n={svc_n:,}, "
          f"service lateness n={lateness_n:,}; ratio = shmwheel / baseline for rates, "
          f"baseline / shmwheel for bytes, us and ms\n")
    print(table(selected))
    verdicts = goal_verdicts(selected)
    for part in (notes(selected), goals_text(verdicts)):
        if part:
            print("\n" + part)
    if SW.leaked:
        print(f"\nWARNING: services left files in /dev/shm after stop(): {SW.leaked}")
    if args.json:
        doc = {"machine": info, "args": vars(args), "sizes": sizes,
               "workloads": {w.key: {"title": w.title, "unit": w.unit, "reps": w.reps,
                                     "median": w.median(), "rows": w.rows,
                                     "notes": w.notes, "seconds": round(w.seconds, 1)}
                             for w in selected},
               "goals": verdicts, "services_started": SW.services_started,
               "services_leaked": SW.leaked}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.json}", file=sys.stderr)
    return 1 if SW.leaked else 0


if __name__ == "__main__":
    sys.exit(main())
