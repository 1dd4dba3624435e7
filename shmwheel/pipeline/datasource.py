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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from . import events as E

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

NAME = "shmwheel-journal"
DEFAULT_PARTITION_BYTES = 64 << 20


class _Files(InputPartition):
    """One partition: segment files read in order by one task."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(paths)
        self.paths = paths


class JournalDataSource(DataSource):
    """``spark.read.format("shmwheel-journal").load(DIR)``; option ``partitionBytes``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return E.DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        path = self.options.get("path")
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
        return _JournalReader(path, E.check_columns(schema.fieldNames()), target)


class _JournalReader(DataSourceReader):
    def __init__(self, path: str, columns: list[str], target_bytes: int) -> None:
        self.path, self.columns, self.target = path, columns, target_bytes

    def partitions(self) -> Sequence[InputPartition]:
        return [_Files(p) for p in E.plan_partitions(E.segment_paths(self.path), self.target)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from ..journal.reader import read_segment

        for path in partition.value:
            yield from _chunks(E.segment_batch(read_segment(path), self.columns))


def _chunks(batch: pa.RecordBatch, rows: int = 1 << 18) -> Iterator[pa.RecordBatch]:
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)
    if batch.num_rows == 0:
        yield batch


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("shmwheel-journal")`` available in this session."""
    spark.dataSource.register(JournalDataSource)


def binaryfile_events(
    spark: SparkSession, directory: str, columns: Sequence[str] = E.NAMES
) -> DataFrame:
    """The same table through Spark's binaryFile source and mapInArrow (for storage the
    driver cannot list with os.listdir: HDFS, S3-style URIs). One file is one row of the
    binaryFile table, so a partition holds whole segments."""
    cols = E.check_columns(columns)
    files = (
        spark.read.format("binaryFile")
        .option("pathGlobFilter", "*.shwj")
        .load(directory)
        .select("path", "content")
    )
    schema = ", ".join(f"{c[0]} {c[2]}" for c in E.COLUMNS if c[0] in cols)
    return files.mapInArrow(lambda batches: _decode_files(batches, cols), schema)


def _decode_files(batches: Iterator[Any], columns: list[str]) -> Iterator[pa.RecordBatch]:
    from ..journal.reader import parse_segment

    for b in batches:
        paths = b.column(0).to_pylist()
        contents = b.column(1)
        for i, path in enumerate(paths):
            data = contents[i].as_py()
            local = path[len("file:") :] if path.startswith("file:") else path
            yield from _chunks(E.segment_batch(parse_segment(local, data), columns))
