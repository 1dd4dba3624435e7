"""python -m shmwheel.bench: shmwheel against its peers, measured in one run.

Each workload is run for shmwheel and its baselines in the same repetition; repetitions
are interleaved across workloads and the table shows medians, so drift on a shared
machine hits every system alike. Ratios above 1 favour shmwheel.
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

from . import workloads as W


@dataclass
class Workload:
    key: str
    title: str
    run: Callable[[int], W.Figures]
    size: str  # which size it takes: "core", "timer" or "kernel"
    rows: list[tuple[str, str]]  # (shmwheel figure, baseline figure) pairs to compare
    unit: str = "ops/s"
    reps: list[W.Figures] = field(default_factory=list)

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
    ]


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


LOWER_IS_BETTER = ("B", "us")


def fmt(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value:,.0f} B"
    if unit == "us":
        return f"{value:,.0f} us"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {suffix}/s"
    return f"{value:.0f} /s"


def table(selected: list[Workload]) -> str:
    lines = [f"{'workload':<30} {'shmwheel':<42} {'baseline':<38} {'ratio':>7}"]
    lines.append("-" * len(lines[0]))
    for w in selected:
        med = w.median()
        for i, (mine, theirs) in enumerate(w.rows):
            a, b = med[mine], med[theirs]
            ratio = b / a if w.unit in LOWER_IS_BETTER else a / b
            lines.append(f"{w.title if i == 0 else '':<30} "
                         f"{mine + ' ' + fmt(a, w.unit):<42} "
                         f"{theirs + ' ' + fmt(b, w.unit):<38} {ratio:>6.2g}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    names = [w.key for w in workloads()]
    ap = argparse.ArgumentParser(prog="python -m shmwheel.bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 repetition (CI smoke)")
    ap.add_argument("--n", type=int, help="timers per wheel-core workload (default 1,000,000)")
    ap.add_argument("--timer-n", type=int,
                    help="tasks per in-process timer workload (default 200,000)")
    ap.add_argument("--reps", type=int, help="repetitions, medians reported (default 3)")
    ap.add_argument("--workloads", help=f"comma-separated subset of: {','.join(names)}")
    ap.add_argument("--json", metavar="PATH", help="write every raw figure to PATH")
    args = ap.parse_args(argv)

    n = args.n or (100_000 if args.quick else 1_000_000)
    timer_n = args.timer_n or (20_000 if args.quick else 200_000)
    reps = args.reps or (1 if args.quick else 3)
    sizes = {"core": n, "timer": timer_n, "kernel": 5_000 if args.quick else 20_000}
    if n < 1000 or timer_n < 100 or reps < 1:
        ap.error("--n must be >= 1000, --timer-n >= 100 and --reps >= 1")
    selected = workloads()
    if args.workloads:
        wanted = [x.strip() for x in args.workloads.split(",") if x.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            ap.error(f"unknown workloads {unknown}; choose from {names}")
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
            w.reps.append(w.run(sizes[w.size]))
    info["loadavg_end"] = os.getloadavg()[0]
    info["seconds"] = round(time.perf_counter() - started, 1)

    print(f"\nmachine: {info['cores']} cores, {info['cpu']}; load average "
          f"{info['loadavg_start']:.2f} -> {info['loadavg_end']:.2f}; "
          f"{reps} repetition(s), medians; {info['seconds']} s")
    print(f"sizes: wheel core n={n:,}, in-process timers n={timer_n:,}; "
          f"ratio = shmwheel / baseline for rates, baseline / shmwheel for bytes and us\n")
    print(table(selected))
    if args.json:
        doc = {"machine": info, "args": vars(args), "sizes": sizes,
               "workloads": {w.key: {"title": w.title, "unit": w.unit, "reps": w.reps,
                                     "median": w.median(), "rows": w.rows}
                             for w in selected}}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
