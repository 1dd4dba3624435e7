"""The audit's decoding job: every segment decoded once, by a Spark task that writes its
events to ``events/`` itself and returns one row of figures.

Theory of operation. Moving 10 M rows from Python into the JVM only for Spark to write
them cost twice the decoding (docs/performance.md), so the tasks that decode the journal
write it: each segment's rows go to ``<segment name>.parquet`` under the directory,
written with pyarrow (``parts.py``) and bucketed by id (``buckets.py``), and the job's
table is one row per segment (``WRITTEN``: its path, service, records and rejects, and
its per-second figures, ``seconds.Seconds.to_bytes``), collected by the driver. This is
a job that writes, started by the audit (``write_events``); the data source
(``datasource.py``) only reads.

The tasks get the segments one of two ways (``READERS``):

- ``datasource``: the segments are listed on the driver (``datasource.local_dirs``) and
  each task opens its own by path, as the ``shmwheel-journal`` source's tasks do: every
  executor must read the journal by the same path. Segments are grouped into tasks of
  about ``TASK_BYTES``.
- ``binaryfile``: Spark's binaryFile source reads each file (any Hadoop filesystem: HDFS,
  S3-style URIs, ``file://``) and hands its bytes to the task.
"""

from __future__ import annotations

import functools
import pickle
import posixpath
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from ..tables.seconds import COLUMNS as SECONDS_COLUMNS
from ..tables.seconds import Seconds
from . import buckets, events
from .datasource import decode_contents, local_dirs, segment_files
from .fleet import segment_report

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from ...journal.reader import Segment

READERS = ("datasource", "binaryfile")
#: the table of the decoding job: a row per segment
WRITTEN = (
    "file string, service string, records bigint, rejects bigint, seconds binary, report binary"
)
#: the bytes of segments one task of the ``datasource`` way decodes, at most (one
#: segment at least)
TASK_BYTES = 64 << 20
_WRITTEN_SCHEMA = pa.schema(
    [("file", pa.string()), ("service", pa.string()), ("records", pa.int64()),
     ("rejects", pa.int64()), ("seconds", pa.binary()), ("report", pa.binary())]
)  # fmt: skip


def write_events(
    spark: SparkSession,
    paths: str | Sequence[str],
    directory: str,
    buckets_n: int,
    reader: str = "datasource",
    columns: Sequence[str] = events.NAMES,
) -> DataFrame:
    """The decoding job (lazy: it runs when the DataFrame is collected): the segments of
    the journals at `paths`, read the `reader` way, their `columns` (``id`` among them)
    written under `directory` (created if missing; a segment's file replaced whole) in
    `buckets_n` buckets by id; a row of ``WRITTEN`` per segment."""
    cols = events.check_columns(columns)
    if "id" not in cols:
        raise ValueError("the events written must include id (the bucket key)")
    if buckets_n < 1:
        raise ValueError(f"buckets must be a positive int, got {buckets_n!r}")
    target = (directory, buckets_n)
    listed = [paths] if isinstance(paths, str) else list(paths)
    if reader == "datasource":
        files = events.segment_paths(local_dirs(listed))
        groups = events.plan_partitions(files, TASK_BYTES)
        task = functools.partial(_path_task, groups=groups, columns=cols, target=target)
        return spark.range(0, len(groups), 1, len(groups)).mapInArrow(task, WRITTEN)
    if reader == "binaryfile":
        return segment_files(spark, listed).mapInArrow(
            lambda batches: (
                b for seg in decode_contents(batches) for b in written(seg, cols, target)
            ),
            WRITTEN,
        )
    raise ValueError(f"unknown reader {reader!r}: use one of {', '.join(READERS)}")


def _path_task(
    batches: Iterator[pa.RecordBatch],
    groups: list[list[str]],
    columns: list[str],
    target: tuple[str, int],
) -> Iterator[pa.RecordBatch]:
    from ...journal.reader import read_segment

    for batch in batches:
        for k in batch.column(0).to_pylist():
            for path in groups[k]:
                yield from written(read_segment(path), columns, target)


def written(seg: Segment, columns: list[str], target: tuple[str, int]) -> Iterator[pa.RecordBatch]:
    """Write a decoded segment's events to `target` (directory, buckets), bucketed by id
    (``buckets.py``); its one row of ``WRITTEN``."""
    directory, n = target
    report = pickle.dumps(segment_report(seg))
    # segment_batch puts the rejects after the records: they are the tail
    perm, sizes = buckets.order(events.record_ids(seg), n, tail=len(seg.rejects))
    # the columns are built in bucket order (each one gathered once, no copy of the rows)
    batch = events.segment_batch(seg, columns, dictionary=True, order=perm)
    table = pa.Table.from_batches([batch])
    buckets.write(table, directory, f"{posixpath.basename(seg.path)}.parquet", n, sizes)
    more = [c for c in SECONDS_COLUMNS if c not in columns]
    if more:  # counted, not written
        extra = events.segment_batch(seg, more, dictionary=True, order=perm)
        for c in more:
            table = table.append_column(c, extra.column(c))
    yield pa.RecordBatch.from_pydict(
        {"file": [seg.path], "service": [(seg.header or {}).get("service")],
         "records": [len(seg.rows)], "rejects": [len(seg.rejects)],
         "seconds": [Seconds.of_events(table).to_bytes()], "report": [report]},
        schema=_WRITTEN_SCHEMA,
    )  # fmt: skip
