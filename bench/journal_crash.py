"""Whole-service crash loop: SIGKILL a journaled service together with its embedding process,
cycle after cycle, restart it on the same journal, and audit every timer at the end.

    python bench/journal_crash.py [--cycles 50] [--seed 1] [--startup-kill-fraction 0.1]
                                  [--out bench/results/journal-crash-50.txt] [--keep]

Each cycle a driver process starts TimerService(journal=DIR), schedules one-shot and
repeating timers and cancels some; 0.3-1.5 s after its service is up the whole process
group (driver, coordinator, reaper, executors) is SIGKILLed. A final clean start on the
same journal runs what is left, then the invariants are checked: nothing lost, a True
cancel never runs, never early, ids preserved, duplicates only inside the documented
crash window (a run whose outcome was not recorded), repeating timers resume and stop
when cancelled, nothing left in /dev/shm or running. The harness is
bench/journal_crash_harness.py (tests/test_journal_crash.py runs 3 cycles of it).
Prints the summary, writes it to --out, exits 1 if an invariant broke.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # the harness, and journal_crash_tasks for the executors
sys.path.insert(0, str(ROOT))

import journal_crash_harness as H  # noqa: E402 (from bench/, put on sys.path above)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--startup-kill-fraction",
        type=float,
        default=0.1,
        help="the fraction of cycles killed at a random moment of their start",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="where to write the summary (default bench/results/journal-crash-<cycles>.txt)",
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep the work directory (logs, journal); it is also kept when an invariant breaks",
    )
    ap.add_argument(
        "--retention",
        action="store_true",
        help="journal_keep_hours 0 and 64 KiB segments: the services delete the "
        "segments no timer needs while the cycles run (the audit then "
        "checks the timers, not that the journal is whole)",
    )
    args = ap.parse_args()
    if args.cycles < 1:
        ap.error("--cycles must be >= 1")
    cfg = H.Config(
        cycles=args.cycles,
        seed=args.seed,
        startup_kill_fraction=args.startup_kill_fraction,
        keep=True,
        progress=True,
        **({"keep_hours": 0.0, "segment_bytes": 1 << 16} if args.retention else {}),
    )
    res = H.run(cfg)
    if res.ok and not args.keep:
        import shutil

        shutil.rmtree(res.workdir, ignore_errors=True)
        cfg.keep = False
    text = H.summary(res)
    print(text)
    out = (
        Path(args.out)
        if args.out
        else ROOT
        / "bench"
        / "results"
        / f"journal-crash-{args.cycles}{'-retention' if args.retention else ''}.txt"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"$ python bench/journal_crash.py --cycles {args.cycles} --seed {args.seed} "
        f"--startup-kill-fraction {args.startup_kill_fraction}"
        f"{' --retention' if args.retention else ''}\n{text}\n"
    )
    print(f"\nwritten to {out}", file=sys.stderr)
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
