"""The journal's two entry points into Spark, over the one decoder.

- ``shmwheel-journal``, a Python Data Source (Spark 4's ``pyspark.sql.datasource``):
  ``spark.read.format("shmwheel-journal").load(PATH)``. PATH is a journal directory, a
  shell-style glob of them, or a ``file://`` URI; several with the option ``paths`` (a JSON
  list); every executor must read them by the same path (a local disk, a shared mount).
  One partition per segment (the option ``partitionBytes`` groups small ones instead).
  ``read()`` yields Arrow record batches. Spark's filters on any column are evaluated by
  the source (``pushFilters``, ``filters.py``): the rows are filtered before the columns
  are built, and the segments whose headers prove that no row can match are not read at
  all (fewer partitions: ``plan`` says which). Columns: the API (PySpark 4.3) has no
  column-pruning hook (its scan builder takes filters only), so the read schema is the
  projection: ``.schema("id bigint, kind string")`` or the option ``columns``
  (``"id,kind"``) builds only those columns; a ``select`` of a full-schema read builds
  all of them and Spark drops the rest. A read writes nothing.
- ``binaryfile_events(spark, PATHS)`` for storage only Hadoop's filesystems reach (HDFS,
  S3-style URIs, and ``file://``): Spark's ``binaryFile`` source hands each segment's bytes
  to ``mapInArrow``, which decodes them with the same ``segment_batch``.

Both give the table of ``events.COLUMNS``, rejects included as rows of kind "reject".
The audit's decoding job (``decode.py``) opens segments the same two ways.

Registration: ``shmwheel.pipeline.run.session.spark_session`` registers the source
(``register``); so does Spark's own lookup of top-level ``pyspark_*`` modules
(``pyspark_shmwheel``, shipped with the package) in any SparkSession whose driver Python
has shmwheel installed. Filter pushdown needs ``spark.sql.python.filterPushdown.enabled``
(Spark's default is false, and ``spark_session`` leaves it: Spark 4.3 reuses a
pushed-down read for the next unfiltered query of the same DataFrame, docs/pipeline.md);
without it the source reads whole segments and Spark filters the rows.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from . import events
from . import filters as filter_rules

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ...journal.reader import Segment

log = logging.getLogger("shmwheel.pipeline")

NAME = "shmwheel-journal"
#: the conf Spark needs to push filters into a Python data source
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: bytes of a segment read for its header before the whole first MiB is tried
_HEADER_PROBE = 1 << 16


class _Files(InputPartition):
    """One partition: segment files read in order by one task."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(paths)
        self.paths = paths


@dataclass
class Plan:
    """What a read of the data source will open: the segments kept, of how many, and how
    many each column's filter ruled out (a segment counts under the first)."""

    segments: list[str]
    total: int
    skipped: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        why = ", ".join(f"{n} by {c}" for c, n in sorted(self.skipped.items()))
        return f"{len(self.segments)} of {self.total} segments read" + (
            f" ({why} skipped)" if why else ""
        )


def local_dirs(paths: Sequence[str]) -> list[str]:
    """The journal directories `paths` name (paths, globs, ``file://`` URIs); a clear
    ValueError for a URI of another filesystem, FileNotFoundError for a path with no
    segments (``fleet.journal_dirs``)."""
    from .fleet import is_uri, journal_dirs

    others = [p for p in paths if is_uri(p)]
    if others:
        raise ValueError(
            f"{NAME} reads local or mounted paths and file:// URIs, not {others[0]!r}: "
            "for HDFS or S3-style URIs use binaryfile_events() (--reader binaryfile)"
        )
    return journal_dirs(paths)


def plan(paths: str | Sequence[str], preds: Sequence[filter_rules.Pred] = ()) -> Plan:
    """The segments of the journals at `paths` a read with the predicates `preds` opens
    (``filters.SegmentFacts``: a segment is skipped when its header, or its successor's,
    proves no row can match). Headers are read only when a predicate can use them."""
    files = events.segment_paths(local_dirs([paths] if isinstance(paths, str) else list(paths)))
    useful = [
        p for p in preds if set(filter_rules.columns_of([p])) & {*_PER_FILE, *filter_rules.TIMES}
    ]
    if not useful:
        return Plan(files, len(files))
    from ...journal.reader import read_header, read_segment

    headers = {}
    for p in files:
        headers[p] = read_segment(p, _HEADER_PROBE).header or read_header(p)
    after: dict[str, list[str]] = {}
    for p, h in headers.items():
        if h is not None and h.get("prev"):
            after.setdefault(os.path.join(os.path.dirname(p), str(h["prev"])), []).append(p)
    out = Plan([], len(files))
    for p in files:
        succ = after.get(p, [])
        facts = filter_rules.SegmentFacts.of(
            p, headers[p], headers[succ[0]] if len(succ) == 1 else None
        )
        why = facts.excludes(useful)
        if why is None:
            out.segments.append(p)
        else:
            out.skipped[why] = out.skipped.get(why, 0) + 1
    return out


_PER_FILE = ("file", "epoch", "role", "writer_pid", "service", "boot_id")


class JournalDataSource(DataSource):
    """``spark.read.format("shmwheel-journal").load(PATH)`` (several: no PATH, and the
    option ``paths``, a JSON list); options ``columns`` (comma-separated: the read
    schema, as ``.schema()``) and ``partitionBytes`` (group segments into partitions of
    about that many bytes; default: one partition per segment)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        cols = self._columns()
        return ", ".join(f"{c[0]} {c[2]}" for c in events.COLUMNS if c[0] in cols)

    def _columns(self) -> list[str]:
        raw = self.options.get("columns")
        if not raw:
            return list(events.NAMES)
        return events.check_columns([c.strip() for c in raw.split(",") if c.strip()])

    def reader(self, schema: StructType) -> DataSourceReader:
        for gone in ("writeTo", "buckets"):
            if self.options.get(gone) is not None:
                raise ValueError(
                    f"{NAME}: the option {gone} is gone: a read writes nothing. The audit's "
                    "decoding job writes events/ (shmwheel.pipeline.read.decode.write_events)"
                )
        raw_paths = self.options.get("paths")
        paths: list[str] = json.loads(raw_paths) if raw_paths else []
        if self.options.get("path"):
            paths.insert(0, self.options["path"])
        if not paths or not all(isinstance(p, str) for p in paths):
            raise ValueError(
                f'{NAME}: give the journal directory: .load("/path/to/journal"), or the '
                "option paths, a JSON list of them"
            )
        group = self.options.get("partitionBytes")
        target = None
        if group is not None:
            try:
                target = int(group)
                if target < 1:
                    raise ValueError
            except ValueError:
                raise ValueError(
                    f"{NAME}: partitionBytes must be a positive int, got {group!r}"
                ) from None
        columns = events.check_columns(schema.fieldNames())
        cls = _PushingReader if _planning_with_pushdown() else _JournalReader
        return cls(paths, columns, target)


def _planning_with_pushdown() -> bool:
    """Whether Spark asks for this reader to push filters into it. Spark refuses a
    reader that overrides ``pushFilters`` when the pushdown conf is off (the default), so
    the reader has the method only when Spark's pushdown worker
    (``pyspark/sql/worker/data_source_pushdown_filters.py``) is the one asking."""
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return False
        if os.path.basename(frame.f_code.co_filename) == "data_source_pushdown_filters.py":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _JournalReader(DataSourceReader):
    def __init__(self, paths: list[str], columns: list[str], target_bytes: int | None) -> None:
        self.paths, self.columns, self.target = paths, columns, target_bytes
        self.preds: list[filter_rules.Pred] = []

    def partitions(self) -> Sequence[InputPartition]:
        kept = plan(self.paths, self.preds)
        log.info("%s: %s; filters %s", NAME, kept, filter_rules.describe(self.preds))
        if not kept.segments:  # Spark needs a partition: one that reads nothing
            return [_Files([])]
        if self.target is None:
            return [_Files([p]) for p in kept.segments]
        return [_Files(g) for g in events.plan_partitions(kept.segments, self.target)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from ...journal.reader import read_segment

        if not partition.value:
            yield events.segment_batch(_no_segment(), self.columns)
        for path in partition.value:
            seg = read_segment(path)
            if self.preds:
                seg = filtered(seg, self.preds)
            yield from _chunks(events.segment_batch(seg, self.columns))


class _PushingReader(_JournalReader):
    def pushFilters(self, filters: list[Any]) -> list[Any]:
        """Take every filter on a column of the table (``filters.accept``); the rest are
        Spark's."""
        taken, left = filter_rules.accept(filters)
        self.preds = taken
        return left


def filtered(seg: Segment, preds: Sequence[filter_rules.Pred]) -> Segment:
    """`seg` with only the records and rejects for which every predicate is true."""
    import dataclasses

    import numpy as np

    keep = filter_rules.mask(events.segment_batch(seg, filter_rules.columns_of(preds)), preds)
    n = len(seg.rows)
    rejects = [r for r, k in zip(seg.rejects, keep[n:].tolist(), strict=True) if k]
    rows = seg.rows if keep[:n].all() else seg.rows[np.flatnonzero(keep[:n])]
    return dataclasses.replace(seg, rows=rows, rejects=rejects)


def _no_segment() -> Segment:
    from ...journal.reader import Segment

    return Segment("")


def _chunks(batch: pa.RecordBatch, rows: int = 1 << 18) -> Iterator[pa.RecordBatch]:
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)
    if batch.num_rows == 0:
        yield batch


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("shmwheel-journal")`` available in this session (a
    session whose driver Python imports ``pyspark_shmwheel`` has it already)."""
    spark.dataSource.register(JournalDataSource)


def binaryfile_events(
    spark: SparkSession, paths: str | Sequence[str], columns: Sequence[str] = events.NAMES
) -> DataFrame:
    """The same table through Spark's binaryFile source and mapInArrow (for storage the
    driver cannot list with os.listdir: HDFS, S3-style URIs; ``file://`` too). `paths`:
    a directory, URI or Hadoop glob, or a list of them: all their ``*.shwj`` files are
    read, one file per row of the binaryFile table, so a partition holds whole segments."""
    cols = events.check_columns(columns)
    schema = ", ".join(f"{c[0]} {c[2]}" for c in events.COLUMNS if c[0] in cols)
    return segment_files(spark, paths).mapInArrow(
        lambda batches: (
            b for seg in decode_contents(batches) for b in _chunks(events.segment_batch(seg, cols))
        ),
        schema,
    )


def segment_files(spark: SparkSession, paths: str | Sequence[str]) -> DataFrame:
    """The ``*.shwj`` files under `paths` as Spark's binaryFile table (path, content)."""
    return (
        spark.read.format("binaryFile")
        .option("pathGlobFilter", "*.shwj")
        .load(paths if isinstance(paths, str) else list(paths))
        .select("path", "content")
    )


def decode_contents(batches: Iterator[Any]) -> Iterator[Segment]:
    """The segments of binaryFile batches (path, content), decoded one by one."""
    from ...journal.reader import parse_segment

    for b in batches:
        paths = b.column(0).to_pylist()
        contents = b.column(1)
        for i, path in enumerate(paths):
            data = contents[i].as_py()
            local = path[len("file:") :] if path.startswith("file:") else path
            yield parse_segment(local, data)
