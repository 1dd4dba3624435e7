"""``shmwheel status NAME [--json]``: one reading of a running service's figures."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .command import add_command
from .observe import (
    ProcessHealth,
    attach,
    compact_json,
    fmt_bytes,
    fmt_ms,
    fmt_opt,
    job_reader,
    jobs_lines,
    process_pids,
    sample_seconds,
    service_name,
    snapshot,
)

EPILOG = """\
examples:
  shmwheel status orders              counters, lateness, processes, jobs, journal
  shmwheel status orders --json       the same as one JSON object (for scripts)
  shmwheel status orders --json | jq .lateness_ms.p99

exit status (monitoring plugins' convention): the health the supervisor's watchdog
reports, 0 ok, 1 degraded, 2 failed; 1 also when the service is not there (no segment,
or its owner is gone).
Restarts are counted only inside the supervisor, so they show as '-' here.
"""

COUNTERS = (
    "pending",
    "in_flight",
    "scheduled",
    "fired",
    "cancelled",
    "completed",
    "task_errors",
    "crashed",
    "rearmed",
    "early",
    "retired",
    "ring_garbage",
    "ring_stale",
    "repairs",
    "clients",
)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``status`` subcommand to `sub`."""
    p = add_command(
        sub,
        "status",
        common,
        help="one-shot figures of a running service",
        description=(
            "Print the figures of a running service once: counters, "
            "lateness percentiles, processes (pid, alive, CPU, memory), and its "
            "job workers and journal when it has them."
        ),
        epilog=EPILOG,
    )
    p.add_argument("name", type=service_name, metavar="NAME", help="the service's name")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--sample",
        type=sample_seconds,
        default=0.25,
        metavar="SECONDS",
        help="interval over which CPU%% is measured, 0 or more (default 0.25)",
    )
    p.set_defaults(execute=execute, default_log_level="WARNING")


def read(name: str, sample_s: float) -> dict[str, Any]:
    """The service's snapshot, CPU% measured over `sample_s` seconds."""
    mem = attach(name)
    jobs = job_reader(mem)
    try:
        health = ProcessHealth()
        health.prime(process_pids(mem))
        time.sleep(sample_s)
        return snapshot(mem, health, jobs)
    finally:
        jobs.close()
        mem.close()


def render(st: dict[str, Any]) -> str:
    """The snapshot as aligned text."""
    cfg = st["config"]
    lines = [
        f"service      {st['service']}",
        f"state        running, supervisor pid {st['owner_pid']}",
        f"health       {st['health']['state']}"
        + (f" ({', '.join(st['health']['reasons'])})" if st["health"]["reasons"] else ""),
        f"config       capacity {cfg['capacity']:,}, {cfg['executors']} executors, "
        f"tick {cfg['tick_ms']} ms, tasks {', '.join(cfg['tasks'])}",
    ]
    for key in COUNTERS:
        lines.append(f"{key.replace('_', ' '):<12} {st[key]:,}")
    late = st["lateness_ms"]
    lines.append(
        "lateness     "
        + "  ".join(f"{k} {fmt_ms(v)}" for k, v in late.items())
        + f"  ({st['lateness_samples']:,} runs)"
    )
    lines += [
        "",
        f"{'process':<12} {'pid':>8} {'alive':>6} {'restarts':>9} {'cpu%':>6} {'rss':>10}",
    ]
    for role, p in st["processes"].items():
        lines.append(
            f"{role:<12} {p['pid']:>8} {'yes' if p['alive'] else 'NO':>6} "
            f"{fmt_opt(p['restarts']):>9} {fmt_opt(p['cpu_percent'], '.1f'):>6} "
            f"{fmt_bytes(p['rss_bytes']):>10}"
        )
    rings = st["rings"]["producer"]
    if rings:
        lines += [
            "",
            "client rings "
            + ", ".join(
                f"#{r['ring']} pid {r['pid']}: {r['pending']}/{r['capacity']}" for r in rings
            ),
        ]
    pool = st.get("jobs")
    if pool:
        lines += [
            "",
            *(f"{'jobs' if i == 0 else '':<12} {t}" for i, t in enumerate(jobs_lines(pool))),
        ]
    j = st.get("journal")
    if j:
        lines += [
            "",
            f"journal      {j['directory']}",
            f"             {fmt_bytes(j['disk_bytes'])} on disk in {j['segments']} "
            f"segment(s), {fmt_bytes(j['bytes_written'])} written this epoch, "
            f"{j['syncs']:,} syncs (fsync {j['fsync']}), epoch {j['epoch']}, "
            f"{j['recovered']:,} timers recovered at start",
        ]
        for role, f in j.get("faults", {}).items():
            lines.append(
                f"  FAULT      the {role} cannot write: {f['message']} ({f['error']}) since "
                f"{f['since']} ({f['seconds']:.0f} s), {fmt_bytes(f['held_bytes'])} held in "
                f"memory; new timers are refused"
            )
    return "\n".join(lines)


def execute(args: argparse.Namespace) -> int:
    """Run ``status``; exit 0 / 1 / 2 for health ok / degraded / failed; CommandError
    (exit 1) when the service is not there."""
    st = read(args.name, args.sample)
    if args.json:
        sys.stdout.write(compact_json(st) + "\n")
    else:
        print(render(st))
    sys.stdout.flush()
    return {"ok": 0, "degraded": 1}.get(st["health"]["state"], 2)
