"""The per-timer table: one row per timer (or operation) with its schedule, its decisions
and the tallies of its runs, from which every rule of the audit is a filter.

Theory of operation. A timer's records (its schedule, cancel, fires and outcomes) are
spread over the coordinator's and the reaper's segments, so building the table needs one
shuffle by id; Spark's partial aggregation cannot help (an id's records are never in one
input partition), so the shuffle carries every record and is the audit's main cost. It
carries ints only: ``coded`` turns kinds, outcomes and task names into small ints before
it (strings cost about twice as much to move between the JVM and Python), and packs the
fields no record has together into three columns (``pertimer.PACKED``). Each shuffle
partition then goes to ``pertimer.per_timer_of`` as Arrow batches, and numpy does the
per-id arithmetic (``pertimer.py`` says how): one sort and a few dozen ``reduceat``
calls, against Spark's hash aggregation of thirty expressions, which took 36 s of a 78 s
audit of 9.2 M records (docs/performance.md).

The task writes its rows to ``timers/`` itself, with pyarrow, and Spark reads the table
back from there: handing 3 M rows of 37 columns back to the JVM and caching them cost as
much again as the kernel and the shuffle together (docs/performance.md); Parquet read
back is columnar and cheap, and the table is an output users can query.

A partition is held whole in one Python worker while numpy works on it, so the number of
partitions grows with the journal (``partitions``): about ``ROWS_PER_TASK`` records each.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyspark.sql import Column
from pyspark.sql import functions as f

from . import pertimer as P

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

#: records per partition of the per-timer shuffle, at most (about 110 bytes each in numpy)
ROWS_PER_TASK = 2_000_000


@dataclass
class Scope:
    """The journal's extent and names, known before the rules (they compare against its
    end; the per-timer shuffle carries task names as 1-based indexes into ``tasks``)."""

    end_us: int
    start_us: int
    final_epoch: int
    grace_us: int
    tasks: list[str]

    def task_index(self, col: str) -> Column:
        return f.array_position(f.array(*[f.lit(t) for t in self.tasks or [""]]), f.col(col))

    def overdue(self, deadline_ms: Column) -> Column:
        """The deadline is more than the grace before the journal's end."""
        return deadline_ms * 1000 < self.end_us - self.grace_us

    def bounds(self) -> P.Bounds:
        return P.Bounds(self.end_us, self.final_epoch, self.grace_us, tuple(self.tasks))


def coded(events: DataFrame, sc: Scope) -> DataFrame:
    """The columns the shuffle carries (``pertimer.SHARED`` and ``PACKED``): kinds,
    outcomes and task names as ints, the fields of different kinds packed together."""
    kc = f.lit(None).cast("int")
    for name, code in P.KIND.items():
        kc = f.when(f.col("kind") == name, code).otherwise(kc)
    field = {
        "oc": f.lit(None).cast("int"),
        "task_i": sc.task_index("task"),
        "on_complete_i": sc.task_index("on_complete"),
        "on_expire_i": sc.task_index("on_expire"),
    }
    for name, code in P.OUTCOME.items():
        field["oc"] = f.when(f.col("outcome") == name, code).otherwise(field["oc"])
    packed = []
    for col, by_kind in P.PACKED.items():
        typ = "int" if col == "c" else "bigint"
        v = f.lit(None).cast(typ)
        for kind, name in by_kind.items():
            src = field[name] if name in field else f.col(name)
            v = f.when(f.col("kind") == kind, src.cast(typ)).otherwise(v)
        packed.append(v.alias(col))
    return events.select(*[kc.alias(c) if c == "kc" else c for c in P.SHARED], *packed)


def partitions(spark: SparkSession, records: int) -> int:
    """The per-timer shuffle's partitions: the session's shuffle partitions, or more so
    that none holds over ROWS_PER_TASK records, rounded up to a multiple of the cores."""
    conf = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
    cores = max(1, spark.sparkContext.defaultParallelism)
    n = max(conf, math.ceil(records / ROWS_PER_TASK))
    return n if n <= conf else math.ceil(n / cores) * cores


def per_timer(events: DataFrame, sc: Scope, n_partitions: int, directory: str) -> DataFrame:
    """The per-timer table (``pertimer.OUTPUT``) written as Parquet under `directory`
    (emptied first), read back. The records are shuffled by id into
    `n_partitions`; each partition's task computes its rows with numpy and writes them
    itself with pyarrow, as ``part-NNNNN.parquet`` by partition, so a retried task
    replaces its own file. `directory` is a local or shared path, or a URI pyarrow opens
    (hdfs://, s3://)."""
    if "://" not in directory:
        directory = os.path.abspath(directory)  # the driver's, not each executor's cwd
    fs, path = _filesystem(directory)
    fs.create_dir(path, recursive=True)
    fs.delete_dir_contents(path)
    kernel = functools.partial(_write_partition, bounds=sc.bounds(), directory=directory)
    rows = coded(events, sc).repartition(n_partitions, "id")
    rows.mapInArrow(kernel, "partition int, timers bigint").collect()  # the writing job
    return events.sparkSession.read.parquet(directory)


def _filesystem(directory: str) -> tuple[pafs.FileSystem, str]:
    if "://" in directory:
        return pafs.FileSystem.from_uri(directory)
    return pafs.LocalFileSystem(), directory


def _write_partition(
    batches: Iterator[pa.RecordBatch], bounds: P.Bounds, directory: str
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: a partition's per-timer rows to their own file (written
    under a name of this attempt, then moved onto the partition's); one row out."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
    table = P.per_timer_of(batches, bounds)
    fs, path = _filesystem(directory)
    final = f"{path}/part-{part:05d}.parquet"
    tmp = f"{path}/.part-{part:05d}-{attempt}.parquet.tmp"
    pq.write_table(table, tmp, filesystem=fs)
    fs.move(tmp, final)
    yield pa.RecordBatch.from_pydict(
        {"partition": [part], "timers": [table.num_rows]},
        schema=pa.schema([("partition", pa.int32()), ("timers", pa.int64())]),
    )
