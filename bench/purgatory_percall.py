"""The client-side cost of one Client.watch and one Client.check_and_complete: the native
path (shmwheel/native/watch.c) beside the Python path it hands unusual calls to
(shmwheel/service/caller/purgatory.py), in one process against a running service. Each key is
new, so each signal completes one operation; medians of 3 repetitions.

    python bench/purgatory_percall.py [--n 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from shmwheel import TimerService


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="calls of each per repetition")
    n = ap.parse_args().n
    tasks = {"noop": "shmwheel.examples.tasks:noop"}
    with (
        TimerService(tasks=tasks, capacity=10 * n, watch_capacity=4 * n) as svc,
        svc.client() as c,
    ):
        paths: dict[str, tuple[Callable[[str], object], Callable[[str], object]]] = {
            "native": (
                lambda k: c.watch([k], 60_000, on_complete="noop"),
                lambda k: c.check_and_complete(k),
            ),
            "python": (
                lambda k: c._watch_slow([k], 60_000, on_complete="noop"),
                lambda k: c._check_and_complete_slow(k, 1),
            ),
        }
        us: dict[str, list[tuple[float, float]]] = {p: [] for p in paths}
        for rep in range(3):
            for name, (watch, signal) in paths.items():
                keys = [f"{name}{rep}-{i}" for i in range(n)]
                t = time.perf_counter()
                for k in keys:
                    watch(k)
                tw = time.perf_counter() - t
                t = time.perf_counter()
                for k in keys:
                    signal(k)
                ts = time.perf_counter() - t
                us[name].append((tw / n * 1e6, ts / n * 1e6))
                time.sleep(0.5)  # let the service run the tasks out
    for name, v in us.items():
        w = statistics.median(x[0] for x in v)
        s = statistics.median(x[1] for x in v)
        print(
            f"{name:6s}: watch {w:5.2f} us, check_and_complete {s:5.2f} us (medians of 3 x {n:,})"
        )


if __name__ == "__main__":
    main()
