"""Where the audit's time goes on Spark: the pieces of its two heaviest stages timed one
by one on one journal (written from a real service run, like bench/audit_scale.py), each
in the same session, so the first of a kind pays Spark's warm-up (Python workers, code
generation, the JIT) and the second of the same kind does not.

    python bench/audit_parts.py --records 3000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

from pyspark.sql import functions as f

from shmwheel.pipeline.demo import sized_for, write_demo_journal
from shmwheel.pipeline.read import events as E
from shmwheel.pipeline.run import job
from shmwheel.pipeline.run.session import spark_session
from shmwheel.pipeline.tables import audit as A
from shmwheel.pipeline.tables import pertimer as P
from shmwheel.pipeline.tables import timers as T
from shmwheel.pipeline.tables.seconds import Seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="shmwheel-audit-parts-")
    try:
        journal, pq = os.path.join(work, "journal"), os.path.join(work, "events")
        n = write_demo_journal(journal, **sized_for(args.records), spread_ms=2000.0)
        print(f"journal: {n.records:,} records", flush=True)
        spark = spark_session(args.master, 4)

        def timed(label: str, fn: Callable[[], object]) -> None:
            t = time.perf_counter()
            fn()
            print(f"{label:58s} {time.perf_counter() - t:6.1f} s", flush=True)

        def read(columns: tuple[str, ...]) -> Callable[[], object]:
            df = job.read_journal(spark, journal, columns=columns)
            return lambda: df.write.format("noop").mode("overwrite").save()

        ints = tuple(c[0] for c in E.COLUMNS if c[2] != "string")
        try:
            timed("read, all 24 columns, into a no-op sink (first job)", read(E.NAMES))
            timed("the same again", read(E.NAMES))
            timed(f"read, the {len(ints)} numeric columns only", read(ints))
            whole = job.read_journal(spark, journal)
            timed("read, written by Spark as Parquet (before: 12.5 s of 21.9 s at 9.2 M)",
                  lambda: whole.write.mode("overwrite").parquet(pq))  # fmt: skip
            got: list[Seconds] = []
            timed("read, written by the tasks, bucketed: events/ (write_events)",
                  lambda: got.append(job.write_events(spark, journal, pq)[2]))  # fmt: skip
            timed("the same again", lambda: job.write_events(spark, journal, pq))
            secs = got[0]
            bounds = P.Bounds.of(secs, A.DEFAULT_GRACE_MS)
            events = spark.read.parquet(pq).filter(f.col("kind") != E.REJECT)
            timed("events/ groupBy(id).count() (a shuffle by id, for scale)",
                  lambda: events.groupBy("id").count().write.format("noop")
                  .mode("overwrite").save())  # fmt: skip
            tdir = os.path.join(work, "timers")
            timed("per-timer table from the buckets, written as timers/ (first)",
                  lambda: T.per_timer(spark, pq, bounds, tdir))  # fmt: skip
            timed("the same again", lambda: T.per_timer(spark, pq, bounds, tdir))
        finally:
            spark.stop()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
