"""python -m shmwheel.bench: shmwheel against its peers, measured in one run.

Each workload is run for shmwheel and its baselines in the same repetition; repetitions
are interleaved across workloads and the tables show medians, so drift on a shared
machine hits every system alike. Each table says what it measures and whether higher or
lower is better, and each peer's line says how shmwheel compares ("2.41x faster",
"1.20x higher"). The svc_* workloads start a multiprocess TimerService each (stopped
before the next) and are checked against their goals; W9's journals live in temporary
directories, removed before the next workload.

Exit status: 0 when the run completed, whether or not every goal was met (the last line
says how many were missed and which: a miss is a measured finding of a machine that may
be shared and noisy, not a failed run); 3 with --strict when a goal was missed; 1 when a
service left files in /dev/shm; 2 for a bad command line; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from .baselines import RedisDelayQueue, redis_status
from .journal import workloads as journal_workloads
from .options import parser
from .report import (
    HOW_TO_READ,
    comparisons,
    further,
    goal_verdicts,
    goals_text,
    heading,
    machine,
    summary,
    table,
    wrap,
)
from .service import common as common
from .service.ops import level_label
from .service.producers import producer_counts
from .table.registry import DEFAULT_LEVELS, FULL_LEVEL, GROUPS, REDIS_KEYS, workloads
from .workload import Workload


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
        f"and stopped by the bench (per-call ops on <= {common.REDIS_CALL_N:,} timers, "
        f"pipelined on <= {common.REDIS_BATCH_N:,})"
    )


class _Wrapped(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return wrap(super().format(record), more="  ")


def _log_to_stderr() -> None:
    """The library's warnings in this process (a stale segment swept, a journal salvaged)
    on stderr, wrapped to the report's width like every other line the bench prints."""
    log = logging.getLogger("shmwheel")
    if any(isinstance(h.formatter, _Wrapped) for h in log.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Wrapped("%(name)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    log.addHandler(handler)


@dataclass
class Plan:
    """What a run measures: the sizes each workload takes, the repetitions, W5's producer
    counts, W7's levels and W9's recovery size."""

    sizes: dict[str, int]
    reps: int
    producers: list[int]
    levels: list[int]


def plan(args: argparse.Namespace, ap: argparse.ArgumentParser) -> Plan:
    """The sizes of the command line, or the defaults (smaller with --quick)."""
    quick = args.quick
    try:
        producers = producer_counts(args.producers)
    except ValueError as e:
        ap.error(f"--producers: {e}")
    levels = [10_000, 100_000] if quick else list(DEFAULT_LEVELS)
    if args.full:
        levels.append(FULL_LEVEL)
    sizes = {
        "core": args.n or (100_000 if quick else 500_000),
        "timer": args.timer_n or (20_000 if quick else 100_000),
        "service": args.svc_n or (20_000 if quick else 100_000),
        "lateness": args.lateness_n or (20_000 if quick else 200_000),
        "capacity": common.MEMORY_CAPACITY,
        "recovery": args.recovery_n or (100_000 if quick else journal_workloads.RECOVERY_N),
        "ops": args.ops_n or (5_000 if quick else 20_000),
    }
    reps = args.reps or (1 if quick else 2)
    big = ("core", "service", "lateness", "recovery")
    if min(sizes[k] for k in big) < 1000 or sizes["timer"] < 100 or reps < 1:
        ap.error(
            "--n, --svc-n, --lateness-n and --recovery-n must be >= 1000, --timer-n "
            ">= 100 and --reps >= 1"
        )
    return Plan(sizes, reps, producers, levels)


def wanted(args: argparse.Namespace, ap: argparse.ArgumentParser, names: list[str]) -> set[str]:
    """The workloads --workloads names (its groups expanded); every one without it."""
    if not args.workloads:
        return set(names)
    keys: set[str] = set()
    for x in (x.strip() for x in args.workloads.split(",")):
        if x == "service":
            keys |= {k for k in names if k.startswith("svc_")}
        elif x == "inprocess":
            keys |= {k for k in names if not k.startswith("svc_")}
        elif x:
            keys.add(x)
    if unknown := sorted(keys - set(names)):
        ap.error(
            f"unknown workloads {unknown}; choose from {names} or a group ({', '.join(GROUPS)})"
        )
    return keys


def redis_choice(args: argparse.Namespace, keys: set[str]) -> tuple[bool, str]:
    """Whether the Redis peer runs, and the note that says why (not)."""
    if args.quick:  # per-call Redis rates are round-trip bound: a few thousand suffice
        common.REDIS_CALL_N, common.REDIS_BATCH_N = 2_000, 20_000
    if args.no_redis:
        return False, "Redis sorted-set baseline skipped: --no-redis"
    if keys & REDIS_KEYS:
        return redis_probe()
    return False, "Redis sorted-set baseline: not used by the selected workloads"


def measure(selected: list[Workload], the_plan: Plan, info: dict[str, Any]) -> bool:
    """Every repetition of every selected workload, interleaved; the load averages and the
    time taken into `info`. False when interrupted (the workloads' services stopped)."""
    loads = [info["loadavg_start"]]
    started = time.perf_counter()
    reps, sizes = the_plan.reps, the_plan.sizes
    total, step = reps * len(selected), 0
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
        return False
    info["loadavg_end"] = os.getloadavg()[0]
    info["loadavg_max"] = max(loads)
    info["seconds"] = round(time.perf_counter() - started, 1)
    return True


def print_header(info: dict[str, Any], the_plan: Plan, note: str) -> None:
    """The lines above the tables: the machine, its load, the sizes, the Redis note."""
    sizes = the_plan.sizes
    print(wrap(f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, "
               f"{info['native']}", more="  "))  # fmt: skip
    print(
        wrap(
            f"load average {info['loadavg_start']:.2f} -> {info['loadavg_end']:.2f} (max "
            f"{info['loadavg_max']:.2f}) during the run of {info['seconds']} s; "
            f"{the_plan.reps} repetition(s), interleaved, medians",
            more="  ",
        )
    )
    print(
        wrap(
            f"sizes: service n={sizes['service']:,} (W1 batch 5n), W4 lateness "
            f"n={sizes['lateness']:,}, W5 producers {','.join(map(str, the_plan.producers))}, "
            f"W7 pending {', '.join(level_label(x) for x in the_plan.levels)}, W9 recovery "
            f"n={sizes['recovery']:,}; wheel core n={sizes['core']:,}, in-process timers "
            f"n={sizes['timer']:,}",
            more="  ",
        )
    )
    print(wrap(note[len("note: ") :], more="  "))
    print("\n" + wrap(HOW_TO_READ) + "\n")


def busy_note(info: dict[str, Any]) -> str:
    """What a load average above the core count means for a missed goal ("" if none)."""
    if info["loadavg_max"] <= info["cores"]:
        return ""
    return (
        f"the load average reached {info['loadavg_max']:.1f} on {info['cores']} cores: "
        "other processes shared the CPUs, so a rate or latency goal missed here may be "
        "theirs; re-run on a quiet machine before reading a miss as shmwheel's"
    )


def workload_doc(w: Workload) -> dict[str, Any]:
    """One workload's entry in the --json document."""
    return {
        "w": w.wid,
        "title": w.title,
        "unit": w.unit,
        "reps": w.reps,
        "median": w.median(),
        "rows": w.rows,
        "notes": w.notes,
        "seconds": round(w.seconds, 1),
        "heading": heading(w),
        "about": w.about,
        "explain": w.explain,
        "further": further(w),
        "comparisons": comparisons(w),
    }


def json_doc(
    args: argparse.Namespace,
    info: dict[str, Any],
    the_plan: Plan,
    selected: list[Workload],
    verdicts: list[dict[str, Any]],
    end: tuple[str, int],
    redis: tuple[bool, str],
) -> dict[str, Any]:
    """The --json document: the machine, the plan, every workload and goal, the summary."""
    (last, status), (use_redis, note) = end, redis
    return {
        "machine": info,
        "args": vars(args),
        "sizes": the_plan.sizes,
        "producers": the_plan.producers,
        "scale_levels": the_plan.levels,
        "workloads": {w.key: workload_doc(w) for w in selected},
        "goals": verdicts,
        "summary": {
            "goals": len(verdicts),
            "met": sum(1 for g in verdicts if g["met"]),
            "missed": [g["goal"] for g in verdicts if g["met"] is False],
            "strict": args.strict,
            "exit_status": status,
            "text": last,
        },
        "services_started": common.services_started,
        "services_leaked": common.leaked,
        "baselines_skipped": [] if use_redis else [note],
        "redis": {
            "ran": use_redis,
            "note": note[len("note: ") :],
            "call_n_max": common.REDIS_CALL_N,
            "batch_n_max": common.REDIS_BATCH_N,
        },
        "lateness_histograms": {
            "shmwheel service": common.lateness_hists,
            "buckets": "bucket 0 below 1 us, bucket i >= 1 for "
            "[2^((i-1)/8), 2^(i/8)) us; one list per repetition",
        },
    }


def check_plot(args: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    """--plot needs matplotlib: said before anything runs."""
    if not args.plot:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        ap.error(
            "--plot needs matplotlib, which is not installed: "
            "pip install 'shmwheel[bench]' (or pip install matplotlib)"
        )


def main(argv: list[str] | None = None) -> int:
    names = [w.key for w in workloads()]
    ap = parser(names, __doc__)
    args = ap.parse_args(argv)
    if args.journal_audit:
        from .journal import audit as journal_audit

        return journal_audit.run(args.audit_timers, args.audit_out)
    check_plot(args, ap)
    the_plan = plan(args, ap)
    keys = wanted(args, ap, names)
    use_redis, why = redis_choice(args, keys)
    common.use_redis = use_redis
    every = workloads(the_plan.producers, the_plan.levels, use_redis, the_plan.sizes["recovery"])
    selected = [w for w in every if w.key in keys]

    _log_to_stderr()
    info = machine()
    print(
        wrap(
            f"shmwheel bench (load {info['loadavg_start']:.2f}): {info['cores']} cores, "
            f"{info['cpu']}, Python {info['python']}, {info['native']}"
        ),
        file=sys.stderr,
    )
    note = f"note: {why}"
    print(wrap(note, more="  "), file=sys.stderr)
    if not measure(selected, the_plan, info):
        return 130
    print_header(info, the_plan, note)
    print(table(selected))
    verdicts = goal_verdicts(selected)
    if goals := goals_text(verdicts, quick=args.quick, busy=busy_note(info)):
        print("\n" + goals)
    if common.leaked:
        print("\n" + wrap(f"WARNING: services left files in /dev/shm: {common.leaked}"))
    last, status = summary(verdicts, args.strict, common.leaked)
    if args.json:
        doc = json_doc(args, info, the_plan, selected, verdicts, (last, status), (use_redis, note))
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.json}", file=sys.stderr)
    if args.plot:
        from .plots import write_plots

        hists = common.lateness_hists
        for path in write_plots(args.plot, selected, common.lateness_samples, hists):
            print(f"wrote {path}", file=sys.stderr)
    print("\n" + last)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # while printing or writing results: nothing is running
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
