"""Where Spark or pyarrow already does what one of the audit's hand-written parts does, the
two timed side by side on the same journal, in one session (a warm-up job first, so no
side pays Spark's first-job cost alone):

1. per-second figures and lateness percentiles: the decoding tasks' histograms merged in
   the driver (seconds.py, histogram.py) / Spark's groupBy(second) with percentile_approx
   / pyarrow's group_by with hash_tdigest (one process, not mergeable across tasks);
2. what the per-timer table adds up to: the per-bucket figures merged in the driver
   (figures.py) / Spark's aggregations of timers/ by producer and by task;
3. every record of an id in one place: events/ bucketed by the decoding tasks and read
   per bucket (buckets.py) / Spark's repartition by id (a shuffle) of the same events;
4. writing events/: the decoding tasks write their segments with pyarrow, each file under
   a hidden name moved onto its own (parts.py) / the data source's rows written by Spark
   (its commit protocol), which moves every row through the JVM.

and, in this process on the journal's largest segment, what the decoding task's own parts
cost beside pyarrow's: its per-second figures (``Seconds.of_events``) / pyarrow's
group_by(second) count by kind and hash_tdigest; the bucketing (``buckets.order``, the
gather, one row group per bucket) / the same table written unordered in one row group.

    python bench/audit_library.py --journal DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import functions as f

from shmwheel.pipeline.run import job
from shmwheel.pipeline.run.session import spark_session
from shmwheel.pipeline.tables import audit as A
from shmwheel.pipeline.tables import pertimer as P
from shmwheel.pipeline.tables import timers as T
from shmwheel.pipeline.tables.figures import TimerFigures
from shmwheel.pipeline.tables.seconds import QUANTILES


def timed(out: dict[str, float], label: str, fn: Callable[[], Any]) -> Any:
    t = time.perf_counter()
    got = fn()
    out[label] = round(time.perf_counter() - t, 2)
    print(f"{label:78s} {out[label]:7.2f} s", flush=True)
    return got


def one_segment(journal: str, work: str, t: dict[str, float]) -> None:
    """The decoding task's parts on the largest segment, in this process, twice each (the
    second time counts)."""
    import dataclasses

    from shmwheel.journal import read_segment, segment_files
    from shmwheel.pipeline.read import buckets
    from shmwheel.pipeline.read import events as E
    from shmwheel.pipeline.tables.seconds import Seconds

    path = max(segment_files(journal), key=os.path.getsize)
    seg = read_segment(path)
    cols = list(A.COLUMNS)
    table = pa.Table.from_batches([E.segment_batch(seg, cols, dictionary=True)])
    n = 14

    def arrow_seconds() -> Any:
        kind = table.column("kind").cast(pa.string())
        second = pc.divide(table.column("wall_us"), 1_000_000)
        keyed = pa.table({"s": second, "k": kind})
        counts = keyed.group_by(["s", "k"]).aggregate([("k", "count")])
        fired = pc.equal(kind, "fired")
        late = pc.subtract(table.column("t_us"), pc.multiply(table.column("deadline_ms"), 1000))
        lat = pa.table({"s": second, "late": late}).filter(fired)
        q = lat.group_by("s").aggregate([("late", "tdigest", pc.TDigestOptions(q=list(QUANTILES))),
                                         ("late", "max")])  # fmt: skip
        return counts, q

    def bucketed() -> None:
        perm, sizes = buckets.order(E.record_ids(seg), n, tail=len(seg.rejects))
        ordered = dataclasses.replace(seg, rows=seg.rows[perm])
        tab = pa.Table.from_batches([E.segment_batch(ordered, cols, dictionary=True)])
        buckets.write(tab, work, "bucketed.parquet", n, sizes)

    def plain() -> None:
        tab = pa.Table.from_batches([E.segment_batch(seg, cols, dictionary=True)])
        pq.write_table(tab, os.path.join(work, "plain.parquet"))

    rows = f"{len(seg.rows):,} records"
    steps: list[tuple[str, Callable[[], Any]]] = [
        (f"0a one segment ({rows}): Seconds.of_events", lambda: Seconds.of_events(table)),
        ("0b the same with pyarrow: group_by count by kind, hash_tdigest", arrow_seconds),
        ("0c the segment's table built, bucketed (14), written", bucketed),
        ("0d the same built unordered, written in one row group", plain),
    ]
    for label, fn in steps:
        fn()
        timed(t, label, fn)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--journal", required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    with open("/proc/loadavg") as fh:
        figures: dict[str, Any] = {"journal": args.journal, "loadavg_before": fh.read().strip()}
    t: dict[str, float] = {}
    work = tempfile.mkdtemp(prefix="shmwheel-audit-library-")
    one_segment(args.journal, work, t)
    spark = spark_session(args.master)
    try:
        ev = os.path.join(work, "events")
        spark.range(0, 4, 1, 2).mapInArrow(lambda it: it, "id bigint").collect()  # warm-up
        # 4. events/ written by the tasks (the audit's way) / by Spark from the source
        rows, n = timed(t, "4a events/ written by the decoding tasks (pyarrow, moved into place)",
                        lambda: job.decode_journal(spark, args.journal, ev))  # fmt: skip
        source = job.read_journal(spark, args.journal)
        spark_dir = os.path.join(work, "spark")
        timed(t, "4b the same columns read through the data source, written by Spark",
              lambda: source.write.mode("overwrite").parquet(spark_dir))  # fmt: skip
        secs_of = job.seconds_by_service(rows)
        secs = next(v for k, v in secs_of.items() if k is not None)
        # 1. per-second figures and percentiles
        timed(t, "1a per-second tables from the tasks' histograms, merged in the driver",
              lambda: (job.Seconds.merge(secs_of.values()).lateness(),
                       secs.throughput(), secs.overall()))  # fmt: skip
        events = spark.read.parquet(ev).filter(f.col("kind") != "reject")
        sec = f.floor(f.col("wall_us") / 1_000_000).alias("second")
        late = (f.col("t_us") - f.col("deadline_ms") * 1000).alias("late")
        fired = events.filter(f.col("kind") == "fired").select(sec, late)
        timed(t, "1b Spark: groupBy(second) percentile_approx of lateness, count by kind",
              lambda: (fired.groupBy("second").agg(f.percentile_approx("late", list(QUANTILES)),
                                                   f.max("late")).collect(),
                       events.groupBy(sec, "kind").count().collect()))  # fmt: skip
        arrow = pq.read_table(ev, columns=["kind", "t_us", "deadline_ms", "wall_us"])

        def tdigest() -> Any:
            fires = arrow.filter(pc.equal(arrow.column("kind").cast(pa.string()), "fired"))
            tab = pa.table({
                "second": pc.divide(fires.column("wall_us"), 1_000_000),
                "late": pc.subtract(fires.column("t_us"),
                                    pc.multiply(fires.column("deadline_ms"), 1000)),
            })  # fmt: skip
            opts = pc.TDigestOptions(q=list(QUANTILES))
            return tab.group_by("second").aggregate([("late", "tdigest", opts), ("late", "max")])

        timed(t, "1c pyarrow (one process, events/ in memory): group_by(second) hash_tdigest",
              tdigest)  # fmt: skip
        # 2. the per-timer table's figures
        bounds = {s: P.Bounds.of(x, A.DEFAULT_GRACE_MS) for s, x in secs_of.items() if s}
        tdir = os.path.join(work, "timers")
        _, figs_of, _ = timed(t, "   (the per-timer table itself, for scale)",
                                lambda: T.per_timer(spark, ev, bounds, tdir))  # fmt: skip
        timed(t, "2a per-producer, per-task, operations from the per-bucket figures",
              lambda: (lambda fg: (fg.per_producer(), fg.per_task(), fg.operations_summary()))(
                  TimerFigures.merge(figs_of.values())))  # fmt: skip
        tt = spark.read.parquet(tdir)
        timed(t, "2b Spark: the same three aggregations of timers/",
              lambda: (tt.groupBy("producer").agg(f.count("*"), f.sum("runs_fired"),
                                                  f.sum("late_sum_us"), f.max("late_max_us"))
                       .collect(),
                       tt.groupBy("run_task").agg(f.sum("outcomes"), f.sum("error"),
                                                  f.sum("crashed"), f.max("duration_max_us"))
                       .collect(),
                       tt.filter(f.col("type") == "operation").groupBy("end").count()
                       .collect()))  # fmt: skip
        # 3. every record of an id together
        timed(t, "3b Spark: events/ repartitioned by (service, id), a shuffle, to a no-op sink",
              lambda: events.repartition(n, "service", "id").write.format("noop")
              .mode("overwrite").save())  # fmt: skip
        t["3a (the bucketing is part of 4a and of the per-timer table: no separate stage)"] = 0.0
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    figures["seconds"] = t
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
