"""The journal's two entry points into Spark, over the one decoder.

- ``shmwheel-journal``, a Python Data Source (Spark 4's ``pyspark.sql.datasource``):
  ``spark.read.format("shmwheel-journal").load(DIR)`` on a directory every executor can
  read by path (a local disk, NFS). Partitions follow segments: each segment of at least
  ``partitionBytes`` (default 64 MiB) is a partition of its own, smaller ones are grouped.
  ``read()`` yields Arrow record batches. The API (4.3) has no column-pruning hook; a
  schema given with ``.schema(...)`` (a subset of the columns, in any order) is the
  projection: only those columns are built.
- ``binaryfile_events(spark, DIR)`` for storage only Hadoop's filesystems reach (HDFS,
  S3-style URIs): Spark's ``binaryFile`` source hands each segment's bytes to
  ``mapInArrow``, which decodes them with the same ``segment_batch``.

Both give the table of ``events.COLUMNS``, rejects included as rows of kind "reject".

Both can instead write that table to Parquet from the decoding tasks (options
``writeTo``, ``buckets`` and ``columns``; the ``write_to`` argument): each segment's rows
go to ``<segment name>.parquet`` under the directory, written with pyarrow and bucketed
by id (``buckets.py``), and the DataFrame is then one row per segment (``WRITTEN``: its
path, records and rejects, and its per-second figures, ``seconds.Seconds.to_bytes``).
The audit decodes the journal this way: moving 10 M rows from Python into the JVM only
for Spark to write them cost twice the decoding, the buckets spare the per-timer table a
shuffle, and the per-second figures a second pass (docs/performance.md).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from . import buckets
from . import events as E
from .seconds import COLUMNS as SECONDS_COLUMNS
from .seconds import Seconds

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ..journal.reader import Segment

NAME = "shmwheel-journal"
DEFAULT_PARTITION_BYTES = 64 << 20
#: the table of a reader that writes the events (option writeTo): a row per segment
WRITTEN = "file string, service string, records bigint, rejects bigint, seconds binary"


class _Files(InputPartition):
    """One partition: segment files read in order by one task."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(paths)
        self.paths = paths


class JournalDataSource(DataSource):
    """``spark.read.format("shmwheel-journal").load(DIR)`` (several directories: no
    path, and option ``paths``, a JSON list of them); options ``partitionBytes``,
    and ``writeTo`` (a directory) with ``columns`` (comma-separated; default all) to
    write the events instead of returning them."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return WRITTEN if self.options.get("writeTo") else E.DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        raw_paths = self.options.get("paths")
        path: str | list[str] | None = (
            json.loads(raw_paths) if raw_paths else self.options.get("path")
        )
        if not path:
            raise ValueError(f'{NAME}: give the journal directory: .load("/path/to/journal")')
        raw = self.options.get("partitionBytes", str(DEFAULT_PARTITION_BYTES))
        try:
            target = int(raw)
            if target < 1:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"{NAME}: partitionBytes must be a positive int, got {raw!r}"
            ) from None
        write_to = self.options.get("writeTo")
        if not write_to:
            return _JournalReader(path, E.check_columns(schema.fieldNames()), target, None)
        if schema.fieldNames() != _WRITTEN_NAMES:
            raise ValueError(
                f"{NAME}: with writeTo the table is one row per segment ({WRITTEN}); "
                "choose the columns written with the option columns, not .schema()"
            )
        raw_cols = self.options.get("columns")
        cols = [c.strip() for c in raw_cols.split(",")] if raw_cols else list(E.NAMES)
        if "id" not in cols:
            raise ValueError(f"{NAME}: with writeTo the columns must include id (the bucket key)")
        raw = self.options.get("buckets", "1")
        try:
            n = int(raw)
            if n < 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"{NAME}: buckets must be a positive int, got {raw!r}") from None
        return _JournalReader(path, E.check_columns(cols), target, (write_to, n))


_WRITTEN_NAMES = [c.split()[0] for c in WRITTEN.split(",")]
_Target = tuple[str, int]  # where a writing reader writes: (directory, buckets)


class _JournalReader(DataSourceReader):
    def __init__(
        self, path: str | list[str], columns: list[str], target_bytes: int, write_to: _Target | None
    ) -> None:
        self.path, self.columns, self.target = path, columns, target_bytes
        self.write_to = write_to

    def partitions(self) -> Sequence[InputPartition]:
        return [_Files(p) for p in E.plan_partitions(E.segment_paths(self.path), self.target)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from ..journal.reader import read_segment

        for path in partition.value:
            yield from _emit(read_segment(path), self.columns, self.write_to)


def _emit(seg: Segment, columns: list[str], write_to: _Target | None) -> Iterator[pa.RecordBatch]:
    """A decoded segment as the reader's batches: its events (in slices), or, writing to
    `write_to` (directory, buckets), its events written there bucketed by id
    (``buckets.py``) and one row of ``WRITTEN`` out."""
    import pyarrow as pa

    if write_to is None:
        yield from _chunks(E.segment_batch(seg, columns))
        return
    directory, n = write_to
    # segment_batch puts the rejects after the records: they are the tail
    perm, sizes = buckets.order(E.record_ids(seg), n, tail=len(seg.rejects))
    ordered = dataclasses.replace(seg, rows=seg.rows[perm])  # one gather of whole rows
    batch = E.segment_batch(ordered, columns, dictionary=True)
    table = pa.Table.from_batches([batch])
    buckets.write(table, directory, f"{posixpath.basename(seg.path)}.parquet", n, sizes)
    more = [c for c in SECONDS_COLUMNS if c not in columns]
    if more:  # counted, not written
        extra = E.segment_batch(ordered, more, dictionary=True)
        for c in more:
            table = table.append_column(c, extra.column(c))
    yield pa.RecordBatch.from_pydict(
        {"file": [seg.path], "service": [(seg.header or {}).get("service")],
         "records": [len(seg.rows)], "rejects": [len(seg.rejects)],
         "seconds": [Seconds.of_events(table).to_bytes()]},
        schema=pa.schema([("file", pa.string()), ("service", pa.string()),
                          ("records", pa.int64()),
                          ("rejects", pa.int64()), ("seconds", pa.binary())]),
    )  # fmt: skip


def _chunks(batch: pa.RecordBatch, rows: int = 1 << 18) -> Iterator[pa.RecordBatch]:
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)
    if batch.num_rows == 0:
        yield batch


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("shmwheel-journal")`` available in this session."""
    spark.dataSource.register(JournalDataSource)


def binaryfile_events(
    spark: SparkSession,
    directory: str | Sequence[str],
    columns: Sequence[str] = E.NAMES,
    write_to: _Target | None = None,
) -> DataFrame:
    """The same table through Spark's binaryFile source and mapInArrow (for storage the
    driver cannot list with os.listdir: HDFS, S3-style URIs). One file is one row of the
    binaryFile table, so a partition holds whole segments. With `write_to` (directory,
    buckets), the events (`columns`, id among them) are written there bucketed instead,
    and the table is ``WRITTEN``. `directory` may be a list of directories (or URIs, or
    Hadoop globs): all their segments are read."""
    cols = E.check_columns(columns)
    files = (
        spark.read.format("binaryFile")
        .option("pathGlobFilter", "*.shwj")
        .load(directory if isinstance(directory, str) else list(directory))
        .select("path", "content")
    )
    schema = ", ".join(f"{c[0]} {c[2]}" for c in E.COLUMNS if c[0] in cols)
    if write_to is not None:
        schema = WRITTEN
    return files.mapInArrow(lambda batches: _decode_files(batches, cols, write_to), schema)


def _decode_files(
    batches: Iterator[Any], columns: list[str], write_to: _Target | None
) -> Iterator[pa.RecordBatch]:
    from ..journal.reader import parse_segment

    for b in batches:
        paths = b.column(0).to_pylist()
        contents = b.column(1)
        for i, path in enumerate(paths):
            data = contents[i].as_py()
            local = path[len("file:") :] if path.startswith("file:") else path
            yield from _emit(parse_segment(local, data), columns, write_to)
