"""What a service's start costs at a capacity: ``ServiceMemory.create`` of its segment alone
(the reservation of every byte, the formatting) and ``TimerService.start()`` until every
process is ready, then ``stop()``; medians of REPS in one process, printed as one JSON line
(with the shmwheel it imported, so two builds can be told apart).

    python bench/start_cost.py [CAPACITY=1000000] [REPS=3]

docs/performance.md ("Segment reservation") alternates two builds with it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import shmwheel
from shmwheel import TimerService
from shmwheel.segment import layout as L
from shmwheel.segment import shm

TASKS = {"noop": "shmwheel.examples.tasks:noop"}


def main() -> None:
    capacity = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    name = f"startcost{os.getpid()}"
    cfg = TimerService(name, tasks=TASKS, capacity=capacity).config
    create, start, stop = [], [], []
    for _ in range(reps):
        t = time.perf_counter()
        mem = L.ServiceMemory.create(name, cfg, os.getpid(), 0)
        create.append(time.perf_counter() - t)
        mem.close()
        shm.unlink_service(name)
    for _ in range(reps):
        svc = TimerService(name, tasks=TASKS, capacity=capacity)
        t = time.perf_counter()
        svc.start()
        start.append(time.perf_counter() - t)
        t = time.perf_counter()
        svc.stop()
        stop.append(time.perf_counter() - t)
    ms = {
        k: round(statistics.median(v) * 1000, 1)
        for k, v in (("create_ms", create), ("start_ms", start), ("stop_ms", stop))
    }
    print(
        json.dumps(
            {
                "shmwheel": os.path.dirname(shmwheel.__file__),
                "capacity": capacity,
                "segment_bytes": L.segment_layout(cfg)["total"] * 8,
                **ms,
            }
        )
    )


if __name__ == "__main__":
    main()
