"""The per-timer table: one row per timer (or operation) with its schedule, its decisions
and the tallies of its runs, from which every rule of the audit is a filter.

Theory of operation. A timer's records (its schedule, cancel, fires and outcomes) are
spread over the coordinator's and the reaper's segments, so building the table needs
every record of an id in one task. Spark's partial aggregation cannot help (an id's
records are never in one input partition), and a shuffle of every record was the audit's
main cost: 36 s of a 78 s audit of 9.2 M records with Spark's hash aggregation, still
13 s with numpy doing the arithmetic behind a shuffle of packed ints
(docs/performance.md). So there is no shuffle: the decoding tasks write events/ bucketed
by id (``buckets.py``), and one task per bucket reads its row group of every events file
with pyarrow, and numpy does the per-id arithmetic (``pertimer.py`` says how: one sort
and a few dozen ``ufunc.at`` calls).

The task writes its rows to ``timers/`` itself, with pyarrow, and returns what they add
up to (``figures.TimerFigures``: the tally, per producer, per task, the operations);
Spark reads the table back from there for the rules: handing 3 M rows of 37 columns back
to the JVM and caching them cost as much again as computing them (docs/performance.md);
Parquet read back is columnar and cheap, and the table is an output users can query.

A bucket is held whole in one Python worker while numpy works on it, so the number of
buckets grows with the journal (``buckets_for``): about ``ROWS_PER_TASK`` records each.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyarrow import fs as pafs

from ..read import buckets, parts
from . import asnumpy, audit, pertimer
from .figures import TimerFigures

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

#: records per bucket, at most (about 110 bytes each in numpy)
ROWS_PER_TASK = 2_000_000
#: the journal's bytes per record, at least: an 8-byte frame and a 4-byte body (a cancel
#: of a small id at a small time; real records average about 28)
MIN_RECORD_BYTES = 12


def buckets_for(spark: SparkSession, journal_bytes: int) -> int:
    """The number of buckets of events/ (and tasks of the per-timer table): the shuffle
    partitions if they were set (``--shuffle-partitions``, ``spark-submit --conf``, the
    embedded session's default), else the cores; or more so that none holds over
    ROWS_PER_TASK records (a record is at least ``MIN_RECORD_BYTES`` of the journal),
    rounded up to a multiple of the cores. Spark's own default of 200 is not taken: 200
    tasks for a small journal cost a cluster run 11.6 s of a 22.5 s audit of 15 k
    records (bench/results/pipeline-standalone.txt)."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    conf = spark.sparkContext.getConf().get("spark.sql.shuffle.partitions")
    least = max(1, int(conf)) if conf else cores
    n = max(least, math.ceil(journal_bytes / MIN_RECORD_BYTES / ROWS_PER_TASK))
    return n if n <= least else math.ceil(n / cores) * cores


def per_timer(
    spark: SparkSession,
    events_dir: str,
    bounds: pertimer.Bounds | dict[str, pertimer.Bounds],
    directory: str,
) -> tuple[str, dict[str, TimerFigures], dict[str, dict[str, int]]]:
    """The per-timer table (``SERVICE`` then ``pertimer.OUTPUT``) of the bucketed events
    under `events_dir`, written as Parquet under `directory` (emptied first; its
    location is returned: Spark reads it only when a rule is broken, ``job.run``); its
    figures per service (``figures.TimerFigures``); and per service, the timers
    breaking each rule (``audit.count_violations``: the rules' conditions evaluated by
    the tasks with pyarrow, so a clean journal needs no Spark job for its rules). A timer
    is a (service, id): each service's records are judged apart, against its own
    `bounds` (its journal's end and last epoch; one ``Bounds``: the same for every
    service). One task per bucket
    reads it, computes its rows with numpy, writes them itself with pyarrow
    (``parts.py``) as ``part-NNNNN.parquet`` and adds them up.
    Both directories are local or shared paths, or URIs pyarrow opens (hdfs://, s3://)."""
    files = event_files(events_dir)
    n = buckets.count(files[0]) if files else 1
    directory = parts.prepare(directory)
    task = functools.partial(_bucket_task, files=files, n=n, bounds=bounds, directory=directory)
    rows = spark.range(0, n, 1, n).mapInArrow(task, _TASK_OUT).collect()
    by_service: dict[str, list[TimerFigures]] = {}
    broken: dict[str, dict[str, int]] = {}
    for r in rows:
        by_service.setdefault(r["service"], []).append(TimerFigures.from_json(r["figures"]))
        mine = broken.setdefault(r["service"], {})
        for rule, k in json.loads(r["violations"]).items():
            mine[rule] = mine.get(rule, 0) + k
    figures = {svc: TimerFigures.merge(fs) for svc, fs in sorted(by_service.items())}
    return directory, figures, broken


def event_files(events_dir: str) -> list[str]:
    """The Parquet files of events/, by name."""
    events_dir = parts.location(events_dir)
    fs, path = parts.filesystem(events_dir)
    infos = fs.get_file_info(pafs.FileSelector(path))
    names = sorted(i.base_name for i in infos if i.base_name.endswith(".parquet"))
    return [f"{events_dir}/{name}" for name in names]


def _bucket_task(
    batches: Iterator[pa.RecordBatch], files: list[str], n: int,
    bounds: pertimer.Bounds | dict[str, pertimer.Bounds], directory: str,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``mapInArrow``'s function over the bucket numbers: each bucket's per-timer rows
    (each service's apart) to their own file; one row out per bucket and service."""
    for batch in batches:
        for k in batch.column(0).to_pylist():
            events = buckets.read(files, k, n, (*pertimer.EVENT_COLUMNS, SERVICE))
            tables = []
            for svc, mine in _by_service(events, bounds):
                b = bounds[svc] if isinstance(bounds, dict) else bounds
                table = pertimer.per_timer_of(mine.drop_columns([SERVICE]), b)
                name = pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(table.num_rows, np.int32)), pa.array([svc], pa.string())
                )
                table = table.add_column(0, SERVICE, name.cast(pa.string()))
                tables.append(table)
                yield pa.RecordBatch.from_pydict(
                    {"bucket": [k], "service": [svc], "timers": [table.num_rows],
                     "figures": [TimerFigures.of_table(table, b).to_json()],
                     "violations": [json.dumps(audit.count_violations(table, b))]},
                    schema=_TASK_SCHEMA,
                )  # fmt: skip
            empty = pertimer.empty()
            empty = empty.add_column(0, SERVICE, pa.array([], pa.string()))
            out = pa.concat_tables(tables) if tables else empty
            parts.write(out, directory, f"part-{k:05d}.parquet")


def _by_service(
    events: pa.Table, bounds: pertimer.Bounds | dict[str, pertimer.Bounds]
) -> Iterator[tuple[str, pa.Table]]:
    """Each service's rows of a bucket (the services of `bounds` if it names them, else
    every one present; rows of no service left out), by name: slices of one copy ordered
    by service, or the bucket itself when it holds one service's rows only."""
    service = events.column(SERVICE)
    names = sorted(bounds) if isinstance(bounds, dict) else sorted(asnumpy.strings(service))
    code = asnumpy.index_in(service, names)
    if len(names) == 1 and (code == 0).all():
        yield names[0], events
        return
    # a stable sort of small keys (rows of no service, -1, first): numpy's radix sort
    key = (code + 1).astype(np.uint16) if len(names) < 1 << 16 else code
    order = np.argsort(key, kind="stable")
    ordered = events.take(pa.array(order))
    at = np.searchsorted(code[order], np.arange(len(names) + 1))
    for i, svc in enumerate(names):
        yield svc, ordered.slice(int(at[i]), int(at[i + 1] - at[i]))


SERVICE = "service"
_TASK_OUT = "bucket bigint, service string, timers bigint, figures string, violations string"
_TASK_SCHEMA = pa.schema(
    [("bucket", pa.int64()), ("service", pa.string()), ("timers", pa.int64()),
     ("figures", pa.string()), ("violations", pa.string())]
)  # fmt: skip
