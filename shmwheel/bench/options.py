"""The command line of ``python -m shmwheel.bench``: its flags and their help."""

from __future__ import annotations

import argparse

from .journal import workloads as journal_workloads
from .table.registry import GROUPS


def parser(names: list[str], description: str | None) -> argparse.ArgumentParser:
    """The bench's argument parser; `names` are the workload keys --workloads accepts,
    `description` the text --help shows above the flags (the bench's docstring)."""
    ap = argparse.ArgumentParser(prog="python -m shmwheel.bench", description=description)
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
    add_sizes(ap)
    groups = ", ".join(f"{k} ({v})" for k, v in GROUPS.items())
    ap.add_argument(
        "--workloads", help=f"comma-separated subset of: {','.join(names)}; or a group: {groups}"
    )
    ap.add_argument(
        "--no-redis",
        action="store_true",
        help="leave out the Redis sorted-set peer even if redis-server is installed",
    )
    add_outputs(ap)
    return ap


def add_sizes(ap: argparse.ArgumentParser) -> None:
    """The flags that size the workloads (each has a default, smaller with --quick)."""
    ap.add_argument("--n", type=int, help="timers per wheel-core workload (default 500,000)")
    ap.add_argument(
        "--timer-n", type=int, help="tasks per in-process timer workload (default 100,000)"
    )
    ap.add_argument(
        "--svc-n",
        type=int,
        help="timers per service workload W1, W2, W5, W6, W9, W11, W12, W13 (default 100,000; "
        "schedule_many schedules 5x this)",
    )
    ap.add_argument(
        "--recovery-n",
        type=int,
        help=f"pending timers W9 recovers (default {journal_workloads.RECOVERY_N:,})",
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


def add_outputs(ap: argparse.ArgumentParser) -> None:
    """The flags that say what a run writes and how it exits, and the journal audit's."""
    ap.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 3 if a goal is missed (by default a miss is reported in "
        "the goals and the last line, and the run exits 0)",
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
