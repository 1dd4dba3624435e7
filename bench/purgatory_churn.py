"""Purgatory churn: a million watch/complete cycles, to show the watch lists stay bounded.

    python bench/purgatory_churn.py [--cycles 1000000] [--keys 3] [--watch-capacity 4096]

Each cycle watches one operation on --keys keys (one of its own, the others shared by many
operations: the shape behind KAFKA-19763 / KAFKA-19389, where completed operations pile up
in the watch lists of keys nobody signals again), then completes it through its own key.
Every 100,000 cycles it prints the entries in the watch lists, the entries purged so far,
the service's resident memory and the rate. The table is a fixed region of the segment,
so the point is that it never fills: finished operations' entries are purged (on a
signal's walk, by the reaper's step, or by a watch that finds the table short), and
`Full` never happens although cycles x keys is far beyond --watch-capacity. The service is
stopped at the end (nothing left behind), also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time

from soak import rss_mb  # bench/soak.py, beside this script

import shmwheel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=3, help="keys per operation (>= 1)")
    ap.add_argument("--watch-capacity", type=int, default=4096)
    ap.add_argument("--shared", type=int, default=16, help="how many shared keys exist")
    a = ap.parse_args(argv)
    tasks = {"noop": "shmwheel.examples.tasks:noop"}
    out = sys.stdout
    with (
        shmwheel.TimerService(
            tasks=tasks, capacity=100_000, executors=1, watch_capacity=a.watch_capacity
        ) as svc,
        svc.client() as c,
    ):
        out.write(
            f"{a.cycles:,} cycles, {a.keys} keys each, watch_capacity {a.watch_capacity:,}\n"
            f"{'cycles':>10} {'entries':>8} {'peak':>6} {'purged':>11} {'rss MB':>7} "
            f"{'cycles/s':>9}\n"
        )
        peak, t0, last_t, last_i = 0, time.perf_counter(), time.perf_counter(), 0
        for i in range(a.cycles):
            keys = [f"own{i}"] + [f"shared{(i + k) % a.shared}" for k in range(a.keys - 1)]
            c.watch(keys, 60_000)
            if c.check_and_complete(f"own{i}") != 1:
                raise SystemExit(f"cycle {i}: the operation did not complete")
            if i % 1000 == 0:
                peak = max(peak, int(c._mem.watch[shmwheel.segment.contract.WT_USED]))
            if (i + 1) % 100_000 == 0 or i + 1 == a.cycles:
                ops = svc.stats()["operations"]
                now = time.perf_counter()
                out.write(
                    f"{i + 1:>10,} {ops['watch_entries']:>8,} {peak:>6,} {ops['purged']:>11,} "
                    f"{rss_mb(svc):>7.0f} {(i + 1 - last_i) / (now - last_t):>9,.0f}\n"
                )
                out.flush()
                last_t, last_i = now, i + 1
        ops = svc.stats()["operations"]
        out.write(
            f"done in {time.perf_counter() - t0:.1f} s: completed {ops['completed']:,}, "
            f"purged {ops['purged']:,}, peak entries {peak:,} of {a.watch_capacity:,}; "
            f"Full never raised\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
