"""How long a journal writer's flush (the coordinator's write before it applies a batch)
waits, with the fsync policy ``interval`` (the default: a thread fdatasyncs every 100 ms).
One ``SegmentWriter`` as a service process has it, in this process, writing batches of
8192 CANCELLED records (28 bytes framed) back to back for MB megabytes into a temporary
directory; prints one JSON line: the wall time of the whole (mostly this script's Python
appends), the sum, median, p99 and max of one flush's wall time, and the shmwheel it
imported (two builds can be alternated with PYTHONPATH).

    python bench/journal_flush_wait.py [MB=100]

No service, no CPU figure: what a flush waits for (the disk, the sync thread's lock) is
wall time. docs/performance.md ("Journal, batch") alternates two builds with it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np

import shmwheel
from shmwheel.journal import format as F
from shmwheel.journal.write.writer import JournalOptions, SegmentWriter

BATCH = 8192  # the coordinator's (service/processes/coordinator.py)


def main() -> None:
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    body = F.body(F.CANCELLED, 2**40, 2**40)
    waits = []
    with tempfile.TemporaryDirectory(prefix="shmwheel-flush-wait-") as d:
        opts = JournalOptions(d, "interval", fsync_ms=100)
        w = SegmentWriter(opts, "coordinator", "svc", ["t"], 1, fault_words=np.zeros(3, np.int64))
        t0, written = time.perf_counter(), 0
        while written < mb << 20:
            for _ in range(BATCH):
                w.append(body)
            t = time.perf_counter()
            written += w.flush()
            waits.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        w.close()
    waits.sort()
    out = {"shmwheel": os.path.dirname(shmwheel.__file__), "mb": mb, "wall_s": wall}
    out |= {"flushes": len(waits), "flush_total_s": sum(waits)}
    out |= {"p50_ms": waits[len(waits) // 2] * 1e3, "p99_ms": waits[int(len(waits) * 0.99)] * 1e3}
    out |= {"max_ms": waits[-1] * 1e3, "loadavg": os.getloadavg()[0]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
