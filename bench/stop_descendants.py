"""How long ``stop()`` takes when tasks left processes behind (issue 31).

    python bench/stop_descendants.py --reps 5 --json bench/results/stop-descendants.json

For each case, --reps times: start a journaled service with 2 executors, run one timer of
the case's task, wait until it ran, then time ``stop()``. Cases:

- ``plain``: the task returns;
- ``mp_child``: the task starts a multiprocessing child (fork, not a daemon) that sleeps
  30 s and returns (the child is killed after the measurement);
- ``fork_return``: the task forks and both copies return.

Also whether a start on the same journal right after the stop succeeds (an old build
raised JournalInUse while a task's child lived). Prints a table (median and max seconds);
--json writes the raw figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from shmwheel import ShmwheelError, TimerService

MARKS = "STOP_BENCH_MARKS"


def _note(kind: str, pid: int) -> None:
    with open(os.path.join(os.environ[MARKS], f"{kind}.{pid}"), "w") as f:
        f.write(kind)


def plain(payload: object) -> None:
    _note("ran", os.getpid())


def mp_child(payload: object) -> None:
    p = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    p.start()
    _note("child", p.pid)
    _note("ran", os.getpid())


def fork_return(payload: object) -> None:
    pid = os.fork()
    if pid == 0:
        _note("child", os.getpid())
        return
    _note("ran", os.getpid())


CASES = ("plain", "mp_child", "fork_return")


def one(case: str, directory: Path) -> tuple[float, bool]:
    marks = directory / "marks"
    marks.mkdir(exist_ok=True)
    os.environ[MARKS] = str(marks)
    tasks = {case: f"stop_descendants:{case}"}
    svc = TimerService(tasks=tasks, capacity=1024, executors=2, journal=directory / "j")
    svc.start()
    try:
        with svc.client() as c:
            c.schedule(case, None, delay_ms=1)
        give_up = time.monotonic() + 30
        while not list(marks.glob("ran.*")):
            if time.monotonic() > give_up:
                raise SystemExit(f"{case}: the task did not run")
            time.sleep(0.005)
        time.sleep(0.05)  # let a forked copy return into the executor's loop
        t0 = time.perf_counter()
        svc.stop()
        took = time.perf_counter() - t0
        try:
            TimerService(
                tasks=tasks, capacity=1024, executors=1, journal=directory / "j"
            ).start().stop()
            restarted = True
        except ShmwheelError:
            restarted = False
        return took, restarted
    finally:
        svc.stop()
        for p in marks.glob("child.*"):
            try:
                os.kill(int(p.name.split(".")[1]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in marks.iterdir():
            p.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results: dict[str, dict[str, list]] = {}
    for case in CASES:
        r: dict[str, list] = {"stop_s": [], "restart_ok": []}
        for _ in range(args.reps):
            with tempfile.TemporaryDirectory() as d:
                took, ok = one(case, Path(d))
            r["stop_s"].append(took)
            r["restart_ok"].append(ok)
        results[case] = r
        print(
            f"{case:12s} stop() median {statistics.median(r['stop_s']):6.3f} s, "
            f"max {max(r['stop_s']):6.3f} s; restart on the journal at once: "
            f"{sum(r['restart_ok'])}/{len(r['restart_ok'])}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
