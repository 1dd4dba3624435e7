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

import json
import logging
import os
import sys
import time

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
from .table.registry import GROUPS, workloads
from .table.service import DEFAULT_LEVELS, FULL_LEVEL, REDIS_KEYS


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


def main(argv: list[str] | None = None) -> int:
    names = [w.key for w in workloads()]
    ap = parser(names, __doc__)
    args = ap.parse_args(argv)

    if args.journal_audit:
        from .journal import audit as journal_audit

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
        producers = producer_counts(args.producers)
    except ValueError as e:
        ap.error(f"--producers: {e}")
    levels = [10_000, 100_000] if args.quick else list(DEFAULT_LEVELS)
    if args.full:
        levels.append(FULL_LEVEL)
    n = args.n or (100_000 if args.quick else 500_000)
    timer_n = args.timer_n or (20_000 if args.quick else 100_000)
    svc_n = args.svc_n or (20_000 if args.quick else 100_000)
    lateness_n = args.lateness_n or (20_000 if args.quick else 200_000)
    recovery_n = args.recovery_n or (100_000 if args.quick else journal_workloads.RECOVERY_N)
    reps = args.reps or (1 if args.quick else 2)
    sizes = {
        "core": n,
        "timer": timer_n,
        "service": svc_n,
        "lateness": lateness_n,
        "capacity": common.MEMORY_CAPACITY,
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
        common.REDIS_CALL_N, common.REDIS_BATCH_N = 2_000, 20_000
    if args.no_redis:
        use_redis, why = False, "Redis sorted-set baseline skipped: --no-redis"
    elif wanted_keys & REDIS_KEYS:
        use_redis, why = redis_probe()
    else:
        use_redis, why = False, "Redis sorted-set baseline: not used by the selected workloads"
    common.use_redis = use_redis
    selected = [
        w for w in workloads(producers, levels, use_redis, recovery_n) if w.key in wanted_keys
    ]

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

    print(wrap(f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, "
               f"{info['native']}", more="  "))  # fmt: skip
    print(
        wrap(
            f"load average {info['loadavg_start']:.2f} -> {info['loadavg_end']:.2f} (max "
            f"{info['loadavg_max']:.2f}) during the run of {info['seconds']} s; {reps} "
            f"repetition(s), interleaved, medians",
            more="  ",
        )
    )
    print(
        wrap(
            f"sizes: service n={svc_n:,} (W1 batch 5n), W4 lateness n={lateness_n:,}, W5 "
            f"producers {','.join(map(str, producers))}, W7 pending "
            f"{', '.join(level_label(x) for x in levels)}, W9 recovery n={recovery_n:,}; "
            f"wheel core n={n:,}, in-process timers n={timer_n:,}",
            more="  ",
        )
    )
    print(wrap(note[len("note: ") :], more="  "))
    print("\n" + wrap(HOW_TO_READ) + "\n")
    print(table(selected))
    verdicts = goal_verdicts(selected)
    busy = ""
    if info["loadavg_max"] > info["cores"]:
        busy = (
            f"the load average reached {info['loadavg_max']:.1f} on {info['cores']} cores: "
            "other processes shared the CPUs, so a rate or latency goal missed here may be "
            "theirs; re-run on a quiet machine before reading a miss as shmwheel's"
        )
    goals = goals_text(verdicts, quick=args.quick, busy=busy)
    if goals:
        print("\n" + goals)
    if common.leaked:
        print("\n" + wrap(f"WARNING: services left files in /dev/shm: {common.leaked}"))
    last, status = summary(verdicts, args.strict, common.leaked)
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
                    "heading": heading(w),
                    "about": w.about,
                    "explain": w.explain,
                    "further": further(w),
                    "comparisons": comparisons(w),
                }
                for w in selected
            },
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
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.json}", file=sys.stderr)
    if args.plot:
        from .plots import write_plots

        for path in write_plots(
            args.plot, selected, common.lateness_samples, common.lateness_hists
        ):
            print(f"wrote {path}", file=sys.stderr)
    print("\n" + last)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # while printing or writing results: nothing is running
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
