"""Trace the lateness of every timer of one service run, to find where a tail comes from.

    python bench/lateness_trace.py [--n 200000] [--spread-ms 2000]

Schedules n no-op timers uniformly over the spread (first deadline 300 ms out) on a
one-executor service whose task records (deadline, reaper fire time, start time) in the
executor; afterwards it prints the percentiles, how many were fired late by the reaper
(as opposed to started late by the executor), and the milliseconds whose worst timer ran
more than 1 ms late, with the gaps between those bursts. ~5 s; cleans up after itself.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import shmwheel

_rows: list[tuple[int, int, int]] = []


def record(payload: object) -> None:
    ctx = shmwheel.context()
    _rows.append((ctx.deadline_ms, time.monotonic_ns(), ctx.fired_ms))


def dump(path: str) -> None:
    np.save(path, np.array(_rows, dtype=np.int64).reshape(-1, 3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--spread-ms", type=float, default=2000.0)
    args = ap.parse_args()
    out = os.path.join(tempfile.mkdtemp(prefix="shmwheel-trace-"), "rows.npy")
    with (
        shmwheel.TimerService(
            tasks={"record": record, "dump": dump}, executors=1, capacity=max(1000, 2 * args.n)
        ) as svc,
        svc.client() as c,
    ):
        d = np.random.default_rng(1).uniform(300, 300 + args.spread_ms, args.n)
        c.schedule_many("record", d)
        end = time.monotonic() + args.spread_ms / 1000 + 30
        while svc.stats()["completed"] < args.n and time.monotonic() < end:
            time.sleep(0.05)
        c.schedule("dump", out, delay_ms=1)
        while svc.stats()["completed"] < args.n + 1 and time.monotonic() < end:
            time.sleep(0.05)
    a = np.load(out)
    os.unlink(out)
    os.rmdir(os.path.dirname(out))
    late = a[:, 1] / 1e6 - a[:, 0]
    fired_late = a[:, 2] - a[:, 0]
    print(
        f"{len(a)} runs; lateness ms p50 {np.percentile(late, 50):.3f} "
        f"p99 {np.percentile(late, 99):.3f} p99.9 {np.percentile(late, 99.9):.3f} "
        f"max {late.max():.3f}; early {(late < 0).sum()}"
    )
    print(f"fired by the reaper 1+ ms after the deadline: {(fired_late >= 1).sum()}")
    worst: dict[int, float] = {}
    for m, v in zip(a[:, 0].tolist(), late.tolist(), strict=True):
        worst[m] = max(worst.get(m, 0.0), v)
    t0 = int(a[:, 0].min())
    bursts: list[list[int]] = []
    for m in sorted(k for k, v in worst.items() if v > 1.0):
        if bursts and m - bursts[-1][-1] <= 2:
            bursts[-1].append(m)
        else:
            bursts.append([m])
    print(
        f"ms with a timer > 1 ms late: {sum(map(len, bursts))}, in {len(bursts)} bursts "
        f"starting at (ms after the first deadline): {[b[0] - t0 for b in bursts]}"
    )
    if len(bursts) > 1:
        print(f"gaps between bursts (ms): {np.diff([b[0] for b in bursts]).tolist()}")


if __name__ == "__main__":
    sys.exit(main())
