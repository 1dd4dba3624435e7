"""One start-up measurement in a fresh process, for whichever shmwheel the path finds
(issue 33's before/after: run it alternately against two builds). Prints one JSON line:
``start`` (ms, TimerService(...).start() at the default capacity, a stdlib no-op task),
``threads`` (per service process, from /proc/PID/task), ``replace`` (ms, median of 5:
every executor SIGKILLed with a no-op timer due now, until it has run), ``stop`` (ms),
``ppe`` (ms, concurrent.futures.ProcessPoolExecutor(2) started and one task per worker).

    python bench/startup_once.py                         # this checkout
    PYTHONPATH=/path/to/other/checkout python bench/startup_once.py
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor

from shmwheel import TimerService
from shmwheel.bench.service.footprint import LIGHT_TASKS, replacement_ms


def _noop(i: int) -> int:
    return i


def main() -> None:
    out: dict[str, object] = {}
    t0 = time.perf_counter()
    svc = TimerService(tasks=LIGHT_TASKS)
    svc.start()
    out["start"] = (time.perf_counter() - t0) * 1000
    try:
        out["threads"] = {r: len(os.listdir(f"/proc/{p.pid}/task")) for r, p in svc.procs.items()}
        out["replace"] = replacement_ms(svc)  # W8's own measurement
    finally:
        t = time.perf_counter()
        svc.stop()
        out["stop"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(_noop, range(2)))
    out["ppe"] = (time.perf_counter() - t) * 1000
    print(json.dumps(out))


if __name__ == "__main__":
    main()
