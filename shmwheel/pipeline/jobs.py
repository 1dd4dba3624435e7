"""The jobs' rules in the PySpark audit: every service's jobs' ledger (``DIR/jobs/`` of
each journal directory audited; service/jobs/ledger/) decoded by Spark tasks with the
ledger's own decoder (``ledger.rows``), its rows shuffled by job, and each job judged by
the one definition of the rules, ``service/jobs/ledger/audit.check`` (its module doc lists
them; ``shmwheel journal check`` runs the same function in one process; docs/journal.md,
"The jobs' rules", says them for users):

- ``attempt outcomes``: each attempt has exactly one outcome;
- ``job outcomes``: each job at most one;
- ``back-off early``: no attempt begins before its back-off ends (nor attempt 1 before
  the job's delay);
- ``beyond the policy``: no attempt past the policy's ``attempts``;
- ``stopped late``: a timed-out attempt ended within its limit, the pool's grace and
  ``ledger.LATE_S`` of its start;
- ``never submitted``: no job's records without its SUBMITTED.

What is judged is what the ledger retains (ledger/compact.py: a settled job's records are
dropped whole once its file is compacted). A job is keyed by (ledger, id); a violation is
reported under its SUBMITTED's service, its rule prefixed ``jobs:`` beside the timers'
rules. Each job's rows reach ``audit.check`` in the order the Python audit reads them (the
files in order, each file's records in order), so both give the same verdicts. Ledgers
are read from local journal directories only (a URI's is not read).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import functions as f

from ..service.jobs import ledger as LG
from ..service.jobs.ledger import audit as JA
from .audit import VIOLATIONS_SCHEMA
from .fleet import is_uri

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

PREFIX = "jobs: "
NAMES = [c for c, _ in LG.COLUMNS]
#: ``ledger.COLUMNS``, then where a row was read: its file's number and its place in it
SCHEMA = pa.schema(
    [(c, getattr(pa, t)()) for c, t in LG.COLUMNS] + [("file_no", pa.int64()), ("pos", pa.int64())]
)
KEY = ["ledger", "job"]
_SPARK_TYPE = {"string": "string", "int64": "bigint", "double": "double"}


def ddl(schema: pa.Schema) -> str:
    """`schema` as Spark's DDL (what ``mapInArrow`` takes)."""
    return ", ".join(f"`{x.name}` {_SPARK_TYPE[str(x.type)]}" for x in schema)


def ledgers(dirs: Sequence[str], service_of: dict[str, str]) -> list[tuple[str, str]]:
    """(file, service for a format 1 file) of every retained ledger file of the local
    journal directories `dirs`, in the order the Python audit reads them; `service_of`
    maps a directory (its real path) to its segments' service."""
    out = []
    for d in dirs:
        if is_uri(d):
            continue
        d = d.removeprefix("file://")
        svc = service_of.get(os.path.realpath(d), "")
        out += [(p, svc) for p in LG.retained_paths(LG.directory_of(d))]
    return out


def _decode(files: list[tuple[str, str]], batches: Iterator[Any]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function over file numbers: each file's rows (``ledger.rows``)."""
    for b in batches:
        for i in b.column(0).to_pylist():
            path, svc = files[i]
            rows = [(*r, i, pos) for pos, r in enumerate(LG.rows(path, LG.read(path), svc))]
            cols: list[Any] = list(zip(*rows, strict=True)) if rows else [[]] * len(SCHEMA)
            yield pa.RecordBatch.from_arrays(
                [pa.array(list(c), t) for c, t in zip(cols, SCHEMA.types, strict=True)],
                schema=SCHEMA,
            )


def read_rows(spark: SparkSession, files: list[tuple[str, str]]) -> DataFrame:
    """The ledger files' rows (``SCHEMA``), decoded by Spark tasks."""
    n = max(1, len(files))
    decode = functools.partial(_decode, files)
    return spark.range(0, len(files), 1, n).mapInArrow(decode, ddl(SCHEMA))


def _judge(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function on rows partitioned by job (every row of a job in one
    partition): ``audit.check`` on them, in read order; one row per violation
    (``VIOLATIONS_SCHEMA``)."""
    rows: list[tuple[Any, ...]] = []
    for b in batches:
        rows += zip(*(b.column(n).to_pylist() for n in SCHEMA.names), strict=True)
    rows.sort(key=lambda r: (r[-2], r[-1]))
    found = JA.check(r[: len(NAMES)] for r in rows)
    yield pa.RecordBatch.from_pydict(
        {
            "service": [svc for svc, _, _, _ in found],
            "rule": [PREFIX + rule for _, rule, _, _ in found],
            "id": [job for _, _, job, _ in found],
            "type": ["job"] * len(found),
            "detail": [detail for _, _, _, detail in found],
        },
        schema=VIOLATIONS_SCHEMA,
    )


def violations(r: DataFrame) -> DataFrame:
    """Every violation of the jobs' rules in the rows `r` (``SCHEMA``): service, rule, id,
    type, detail (``VIOLATIONS_SCHEMA``; type "job", id the job's)."""
    return r.repartition(*KEY).mapInArrow(_judge, ddl(VIOLATIONS_SCHEMA))


def tally(r: DataFrame) -> dict[str, int]:
    """How much the rules judged: records, jobs, attempts."""
    row = r.agg(
        f.count(f.lit(1)).alias("records"),
        f.countDistinct(*KEY).alias("jobs"),
        f.countDistinct(
            f.when(f.col("kind") == "started", f.concat_ws(":", *KEY, "attempt"))
        ).alias("attempts"),
    ).collect()[0]
    return {k: int(v) for k, v in row.asDict().items()}


def audit(
    spark: SparkSession, dirs: Sequence[str], service_of: dict[str, str]
) -> tuple[DataFrame | None, dict[str, Any]]:
    """The jobs' audit of the ledgers of `dirs`: (the violations, or None without a ledger;
    the summary's "jobs": the tally, each rule's count, 0 included, and "by_service": each
    service's counts by rule)."""
    files = ledgers(dirs, service_of)
    counts = dict.fromkeys((PREFIX + r for r in JA.RULES), 0)
    if not files:
        return None, {"ledgers": 0, "files": 0, "records": 0, "jobs": 0, "attempts": 0,
                      "violations_by_rule": counts}  # fmt: skip
    r = read_rows(spark, files).cache()
    try:
        found = violations(r).cache()
        by_service: dict[str, dict[str, int]] = {}
        for row in found.groupBy("service", "rule").count().collect():
            counts[row["rule"]] += int(row["count"])
            by_service.setdefault(row["service"], {})[row["rule"]] = int(row["count"])
        read = {"ledgers": len({os.path.dirname(p) for p, _ in files}), "files": len(files)}
        summary = {**read, **tally(r), "violations_by_rule": counts, "by_service": by_service}
        return found, summary
    finally:
        r.unpersist()
