"""How long a fresh process takes from ``shmwheel.Executor(2)`` to its first job's result
(and its shutdown), each run in a new interpreter (so nothing is imported or started yet).

    python bench/executor_start.py [--runs 20] [--compare OTHER_CHECKOUT]

Prints min / median / max in ms of: start (``import shmwheel``, its Executor imported, and
Executor(2) returned), Executor(2) (that call alone: the workers' start), first (the first
result, counted from the start's first moment), replaced (both workers SIGKILLed in the
middle of a job until a job's result comes from a successor: the median of 5 in each run), shutdown
(Executor.shutdown()).
With ``--compare DIR`` the runs alternate between this checkout and DIR (another checkout
of shmwheel with its C extension built, put first on PYTHONPATH), each reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, os, signal, time
t0 = time.perf_counter()
import shmwheel
from shmwheel.examples.jobs import hang, square
Executor = shmwheel.Executor
ti = time.perf_counter()
ex = Executor(2)
t1 = time.perf_counter()
assert ex.submit(square, 3).result(timeout=60) == 9
t2 = time.perf_counter()
replaced = []
workers, hung = ex._pool._mgr.workers, []
for _ in range(5):  # each worker killed in the middle of a job: an idle one killed just
    # after its start would count as a worker that cannot start; a job sent ahead behind
    # another (the pool sends ~2 ms of work ahead) is avoided: one hung job per worker
    while True:
        these = [ex.submit(hang, 60.0) for _ in workers]
        hung += these
        deadline = time.perf_counter() + 0.5
        while {w.running() for w in workers} != {j.id for j in these}:
            if time.perf_counter() > deadline:
                break
            time.sleep(0.001)
        else:
            break
        for j in these:
            j.stop()
        while not all(j.done() for j in these):
            time.sleep(0.001)
    old = {w.proc.pid for w in workers}
    tk = time.perf_counter()
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    while ex.submit(os.getpid).result(timeout=60) in old:
        pass
    replaced.append(time.perf_counter() - tk)
stray = [j.stop() for j in hung]  # a hung job requeued behind a killed one (rare)
t3 = time.perf_counter()
ex.shutdown()
t4 = time.perf_counter()
print(json.dumps({"start": t1 - t0, "Executor(2)": t1 - ti, "first": t2 - t0,
                  "replaced": sorted(replaced)[2], "shutdown": t4 - t3}))
"""


def run_once(pythonpath: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    p = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, cwd="/"
    )
    if p.returncode != 0:
        raise SystemExit(f"a run of {pythonpath or 'this checkout'} failed:\n{p.stderr}")
    out = p.stdout
    return {k: v * 1000 for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--compare", default=None, help="another checkout, run alternately")
    args = p.parse_args()
    builds = {"this checkout": None} | ({args.compare: args.compare} if args.compare else {})
    rows: dict[str, dict[str, list[float]]] = {b: {} for b in builds}
    loads = []
    for _ in range(args.runs):
        for build, path in builds.items():
            loads.append(os.getloadavg()[0])
            for k, v in run_once(path).items():
                rows[build].setdefault(k, []).append(v)
    print(f"runs {args.runs} each, load average {min(loads):.2f}-{max(loads):.2f}")
    for build, figures in rows.items():
        print(build)
        for k, v in figures.items():
            med = statistics.median(v)
            print(f"  {k:12s} min {min(v):7.1f}  median {med:7.1f}  max {max(v):7.1f} ms")


if __name__ == "__main__":
    main()
