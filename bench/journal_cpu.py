"""What the journal costs the coordinator per timer, in CPU: W9's batch (``schedule_many``
of 5n timers in batches of up to 100k, delays 30-60 s) on a fresh service with the journal
off, then on one journaling into a temporary directory (the default options), in one
process. For each: the producer's wall rate (W9's figure), and CPU nanoseconds per timer
of the client (this process), of the coordinator's drain thread and of all the
coordinator's threads (its fsync thread too), from the first ``schedule_many`` until the
coordinator has linked every timer (``/proc/PID/task/TID/schedstat``, nanoseconds).
Prints one JSON line, with the shmwheel it imported (two builds can be alternated).

    python bench/journal_cpu.py [N=100000]

The CPU figures move far less with the machine's load than the rates do: on a shared VM
W9's ratio of two rates swings by 3x between runs; docs/performance.md ("Journal, batch")
alternates two builds with this.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import shmwheel
from shmwheel.bench.journal import workloads as journal_workloads
from shmwheel.bench.service import common as service_common
from shmwheel.bench.service import ops as service_ops
from shmwheel.segment import layout


def cpu_s(pid: int) -> tuple[float, float]:
    """(the main thread's, all threads') CPU seconds of process `pid`."""

    def ns(tid: str) -> int:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])

    return ns(str(pid)) / 1e9, sum(map(ns, os.listdir(f"/proc/{pid}/task"))) / 1e9


def one(n: int, journal: str | None) -> dict[str, float]:
    _, chunks = service_ops.batch_delays(n)
    total = sum(map(len, chunks))
    options = {} if journal is None else {"journal": journal}
    capacity = service_common._capacity_for(total)
    with service_common._service(capacity, **options) as svc, svc.client() as c:
        service_common.warm(c)
        journal_workloads.wait_linked(svc, 0, 30.0)
        pid = int(svc.mem.header[layout.W_PID_COORDINATOR])
        c0, p0, t0 = cpu_s(pid), time.process_time(), time.perf_counter()
        for d in chunks:
            c.schedule_many("noop", d)
        t1, p1 = time.perf_counter(), time.process_time()
        if journal_workloads.wait_linked(svc, total, 60.0) < total:
            raise RuntimeError("the coordinator did not link every timer in 60 s")
        c1 = cpu_s(pid)
    return {
        "rate": total / (t1 - t0),
        "client_ns": (p1 - p0) / total * 1e9,
        "drain_ns": (c1[0] - c0[0]) / total * 1e9,
        "coordinator_ns": (c1[1] - c0[1]) / total * 1e9,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    off = one(n, None)
    with tempfile.TemporaryDirectory(prefix=journal_workloads.DIR_PREFIX) as d:
        on = one(n, d)
    out = {"shmwheel": os.path.dirname(shmwheel.__file__), "timers": 5 * n, "off": off}
    out |= {"on": on, "ratio": on["rate"] / off["rate"], "loadavg": os.getloadavg()[0]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
