"""The audit job's stages: decode the journal once, check it, write the tables and report.

    read     the journal's segments, opened by path or handed over by binaryFile
             (``decode.py``), written as events/ (Parquet) by the decoding tasks
             themselves, which also reduce their segments to per-second figures
             (``seconds.py``: the throughput, the lateness, the journal's extent and
             task names) and judge each file by the journal's rules
             (``fleet.segment_report``); on the driver, each service's chains
             (``fleet.completeness``); rejects/
    timers   the per-timer table (timers.py: a task per bucket of events/, numpy)
             written as timers/, what it adds up to (``figures.py``) and how many
             timers break each rule (``audit.count_violations``)
    rules    violations/: Spark's filter of timers/, with each violation's detail, when
             the tasks counted any; else written empty
    jobs     the jobs' rules on every service's jobs' ledger (``jobs.py``): their
             violations added to violations/, their counts beside the timers' rules
    figures  lateness/, throughput/, per_producer/, per_task/, the operations, from
             what the tasks added up
    report   report/summary.json, the plots, report/index.md

Each stage reports one progress line (``progress``); ``run`` returns the summary dict.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import functions as f

from . import audit as A
from . import decode, fleet, parts
from . import events as E
from . import jobs as JB
from . import pertimer as P
from . import timers as T
from .datasource import NAME, binaryfile_events
from .figures import TimerFigures
from .seconds import Seconds

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

READERS = decode.READERS
TABLES = (
    "events", "timers", "violations", "lateness", "throughput", "per_producer", "per_task",
    "rejects",
)  # fmt: skip
SAMPLE = 20  # violations and rejects shown in the summary


def read_journal(
    spark: SparkSession,
    journal: str | Sequence[str],
    reader: str = "datasource",
    columns: tuple[str, ...] = A.COLUMNS,
) -> DataFrame:
    """The journal's events (rejects included), `columns` only, through the entry point
    `reader`: the ``shmwheel-journal`` data source, or binaryFile + mapInArrow."""
    dirs = [journal] if isinstance(journal, str) else list(journal)
    if reader == "datasource":
        cols = E.check_columns(columns)
        source = spark.read.format(NAME).option("columns", ",".join(cols))
        if len(dirs) > 1:  # the data source takes one path, or a JSON list of them
            return source.option("paths", json.dumps(dirs)).load()
        return source.load(dirs[0])
    if reader == "binaryfile":
        return binaryfile_events(spark, journal, columns)
    raise ValueError(f"unknown reader {reader!r}: use one of {', '.join(READERS)}")


def write_events(
    spark: SparkSession, journal: str | Sequence[str], directory: str, reader: str = "datasource"
) -> tuple[int, int, Seconds]:
    """The journal's events (the audit's columns, rejects included) decoded once by the
    tasks of ``decode.write_events`` and written under `directory` (emptied first), one
    file per segment, bucketed by id for the per-timer table (as many buckets as
    ``timers.buckets_for`` the journal's size). (segments, buckets, and the per-second
    figures of every segment, merged)."""
    segments, n, by_service = write_service_events(spark, journal, directory, reader)
    return segments, n, Seconds.merge(by_service.values())


def write_service_events(
    spark: SparkSession, journal: str | Sequence[str], directory: str, reader: str = "datasource"
) -> tuple[int, int, dict[str | None, Seconds]]:
    """``write_events``, with the per-second figures of each service apart (the header's
    name; None: segments without a header)."""
    rows, n = decode_journal(spark, journal, directory, reader)
    return len(rows), n, seconds_by_service(rows)


def decode_journal(
    spark: SparkSession, journal: str | Sequence[str], directory: str, reader: str = "datasource"
) -> tuple[list[Any], int]:
    """Run the decoding job (``decode.write_events``) into `directory` (emptied first):
    its rows (a row per segment, ``decode.WRITTEN``) and the number of buckets."""
    n = T.buckets_for(spark, journal_bytes(spark, journal))
    df = decode.write_events(spark, journal, parts.location(directory), n, reader, A.COLUMNS)
    parts.prepare(directory)  # only once the journal is known to be there
    return df.collect(), n


def seconds_by_service(rows: Sequence[Any]) -> dict[str | None, Seconds]:
    """The per-second figures of the decoding job's rows, added up by service."""
    grouped: dict[str | None, list[Seconds]] = {}
    for r in rows:
        grouped.setdefault(r["service"], []).append(Seconds.from_bytes(r["seconds"]))
    return {svc: Seconds.merge(secs) for svc, secs in grouped.items()}


def journal_bytes(spark: SparkSession, journal: str | Sequence[str]) -> int:
    """The size of the journal's segments (listed by Hadoop's filesystems for a URI)."""
    dirs = [journal] if isinstance(journal, str) else list(journal)
    if not any("://" in d for d in dirs):
        return sum(os.path.getsize(p) for p in E.segment_paths(dirs))
    files = spark.read.format("binaryFile").option("pathGlobFilter", "*.shwj").load(dirs)
    return int(files.agg(f.sum("length")).collect()[0][0] or 0)


def run(
    spark: SparkSession,
    journal: str | Sequence[str],
    out: str,
    reader: str = "datasource",
    grace_ms: int = A.DEFAULT_GRACE_MS,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Audit `journal` (one directory, or several: ``fleet.py``) into `out` (see the
    module docstring); the summary."""
    t0 = time.perf_counter()
    clock = [t0]

    def stage(name: str, what: str) -> None:
        now = time.perf_counter()
        progress(f"[{name}] {what} ({now - clock[0]:.1f} s)")
        clock[0] = now

    mode = "overwrite"
    dirs = fleet.journal_dirs([journal] if isinstance(journal, str) else journal)
    # one decoding pass: the journal's table goes to events/ as it is read (reject rows
    # included, kind "reject"), and each segment's per-second figures and the journal's
    # judgement of the file come back with the tasks' rows; everything after reads the
    # columns it needs from Parquet
    events_dir = os.path.join(out, "events")
    source: str | list[str] = dirs[0] if len(dirs) == 1 else dirs
    rows, n_buckets = decode_journal(spark, source, events_dir, reader)
    segments = len(rows)
    secs_of = seconds_by_service(rows)
    secs = Seconds.merge(secs_of.values())
    # whose segments, and whether each service's chains are whole: the journal's own
    # rules on the files' reports (fleet.py)
    groups = fleet.services([pickle.loads(r["report"]) for r in rows])
    gaps, gap_warnings = fleet.completeness(groups)
    kinds = secs.kinds()
    records = sum(n for k, n in kinds.items() if k != E.REJECT)
    # each service is judged against its own journal's end and last epoch (its clocks
    # are its host's)
    bounds = {svc: P.Bounds.of(x, grace_ms) for svc, x in secs_of.items() if svc is not None}
    rejects_dir = os.path.join(out, "rejects")
    rej_columns = ["service", "file", "offset", "epoch", "reason"]
    rejects: DataFrame | None = None
    if secs.rejects:
        table = spark.read.parquet(events_dir)
        rejects = table.filter(f.col("kind") == E.REJECT).select(*rej_columns)
        rejects.write.mode(mode).parquet(rejects_dir)
    else:  # the decoding tasks counted none: Spark reads nothing back, runs no job
        empty = E.ARROW_SCHEMA.empty_table().select(rej_columns)
        parts.write(empty, parts.prepare(rejects_dir), "part-00000.parquet")
    if gaps:  # the chains' rejects, beside the decoder's
        gap_rows = pa.table(
            {
                "service": pa.array([g.service for g in gaps], pa.string()),
                "file": pa.array([g.file for g in gaps], pa.string()),
                "offset": pa.array([-1] * len(gaps), pa.int64()),
                "epoch": pa.nulls(len(gaps), pa.int32()),
                "reason": pa.array([g.what for g in gaps], pa.string()),
            }
        )
        parts.write(gap_rows, rejects_dir, "gaps.parquet")
    stage("read", f"{segments} segment(s) decoded into events/ ({n_buckets} buckets by id): "
                  f"{records:,} records, {secs.rejects:,} rejects; {len(groups)} "
                  f"service(s), {len(gaps)} gap(s) in their chains")  # fmt: skip

    # the plots need only what the read stage added up: drawn while Spark works on
    tables = {"lateness": secs.lateness(), "throughput": secs.throughput()}  # Arrow
    small: dict[str, Any] = {name: t.to_pandas() for name, t in tables.items()}  # pandas
    overall = secs.overall()
    drawing = _start_plots(out, groups, secs_of, small, overall)

    timers_dir, figs_of, counted = T.per_timer(
        spark, events_dir, bounds, os.path.join(out, "timers")
    )
    figs = TimerFigures.merge(figs_of.values())
    tally = figs.tally
    stage("timers", f"{sum(t['n'] for t in tally.values()):,} timers and operations: timers/")

    # the per-timer tasks evaluated the rules already (audit.count_violations): Spark
    # writes violations/ with each one's detail only when there is one to write
    by_service_rule = sorted((svc, rule, n) for svc, c in counted.items() for rule, n in c.items())
    viol_dir = os.path.join(out, "violations")
    sample: list[dict[str, Any]] = []
    if by_service_rule:
        timers = spark.read.parquet(timers_dir)
        A.fleet_violations(timers, bounds).write.mode(mode).parquet(viol_dir)
        viol = spark.read.parquet(viol_dir)
        sample = [r.asDict() for r in viol.orderBy("rule", "service", "id").limit(SAMPLE).collect()]
    else:
        parts.write(
            A.VIOLATIONS_SCHEMA.empty_table(), parts.prepare(viol_dir), "part-00000.parquet"
        )
    # the jobs' rules, on every service's jobs' ledger (jobs.py), beside the timers'
    service_of = {os.path.realpath(d): svc for svc, g in groups.items() for d in g.directories}
    job_found, jobs_summary = JB.audit(spark, dirs, service_of)
    for svc, counts in sorted(jobs_summary.pop("by_service", {}).items()):
        by_service_rule += sorted((svc, rule, n) for rule, n in counts.items())
    if job_found is not None and sum(jobs_summary["violations_by_rule"].values()):
        job_found.write.mode("append").parquet(viol_dir)
        sample += [
            r.asDict() for r in job_found.orderBy("rule", "service", "id").limit(SAMPLE).collect()
        ]
    stage("jobs", f"{jobs_summary['jobs']:,} jobs, {jobs_summary['attempts']:,} attempts in "
                  f"{jobs_summary['files']} ledger file(s)")  # fmt: skip
    by_rule: dict[str, int] = {}
    for _, rule, n in by_service_rule:
        by_rule[rule] = by_rule.get(rule, 0) + n
    stage("rules", f"{sum(by_rule.values()):,} violations")

    # the small tables (a row per second, producer or task) are written from the driver
    # and used for the report
    tables.update(per_producer=figs.per_producer(), per_task=figs.per_task())
    for name, table in tables.items():
        parts.write(table, parts.prepare(os.path.join(out, name)), "part-00000.parquet")
        small.setdefault(name, table.to_pandas())
    ops = figs.operations_summary()
    stage("figures", "lateness, throughput, per producer, per task, operations")

    rej_list = (
        [
            f"{r['file']} at byte {r['offset']}: {r['reason']}"
            for r in rejects.orderBy("file", "offset").limit(SAMPLE).collect()
        ]
        if rejects is not None
        else []
    )
    rej_list = [f"missing: {g}" for g in gaps[:SAMPLE]] + rej_list[: max(0, SAMPLE - len(gaps))]
    services = _services(groups, secs_of, figs_of, gaps, by_service_rule)
    summary = {
        "journal": " ".join(dirs),
        "journals": dirs,
        "reader": reader,
        "records": records,
        "records_by_kind": {k: n for k, n in kinds.items() if k != E.REJECT and n},
        "rejects": secs.rejects + len(gaps),
        "reject_sample": rej_list,
        "gaps": [str(g) for g in gaps],
        "gap_warnings": [str(g) for g in gap_warnings],
        "services": services,
        "epochs": secs.final_epoch,
        "span_s": (secs.end_us - secs.start_us) / 1e6,
        "grace_ms": grace_ms,
        "timers": tally,
        "violations": sum(by_rule.values()),
        "violations_by_rule": by_rule,
        "violation_sample": sample[:SAMPLE],
        "jobs": jobs_summary,
        "lateness_ms": {k: v for k, v in overall.items() if k != "cdf"},
        "operations": ops,
        "per_task": _records(small["per_task"]),
        "task_failures": failing_tasks(figs),
        "clean": not by_rule and not secs.rejects and not gaps,
    }
    from .report import write_report

    write_report(out, summary, small, overall["cdf"], drawing)
    summary["seconds"] = time.perf_counter() - t0
    stage("report", f"report/ written; {summary['seconds']:.1f} s in all")
    return summary


def _start_plots(
    out: str,
    groups: dict[str, fleet.Service],
    secs_of: dict[str | None, Seconds],
    small: dict[str, Any],
    overall: dict[str, Any],
) -> Future[list[str]]:
    """The report's plots, drawn in a thread from the read stage's figures
    (``report.start_plots``): the journal's per-second tables, each service's when there
    are several, and each service's epoch starts."""
    from .report import start_plots

    figures = dict(small)
    if len(secs_of) > 1:  # each service's own per-second figures
        figures["services"] = {
            str(svc): (x.throughput().to_pandas(), x.lateness().to_pandas())
            for svc, x in sorted(secs_of.items(), key=lambda kv: str(kv[0]))
        }
    known = {
        "lateness_ms": {k: v for k, v in overall.items() if k != "cdf"},
        "services": [
            {
                "service": svc,
                "epoch_starts_us": {str(e): t for e, t in sorted(g.epoch_starts.items())},
            }
            for svc, g in sorted(groups.items())
        ],
    }
    return start_plots(out, known, figures, overall["cdf"])


def _epoch_starts(g: fleet.Service) -> dict[str, int]:
    return {str(e): t for e, t in sorted(g.epoch_starts.items())}


def _services(
    groups: dict[str, fleet.Service],
    secs_of: dict[str | None, Seconds],
    figs_of: dict[str, TimerFigures],
    gaps: list[fleet.Gap],
    by_service_rule: list[tuple[str, str, int]],
) -> list[dict[str, Any]]:
    """The summary's row of each service (the report's Services table)."""
    out = []
    named = {s for s in secs_of if s is not None} | {s for s, _, _ in by_service_rule}
    for svc in sorted(set(groups) | named):  # a jobs' ledger's run may name no segment's
        x = secs_of.get(svc)
        g = groups.get(svc)
        lat = x.overall() if x else {}
        out.append(
            {
                "service": svc,
                "hosts": (g.boot_ids if g else []) or [fleet.UNKNOWN],
                "directories": g.directories if g else [],
                "segments": len(g.segments) if g else 0,
                "epochs": x.final_epoch if x else 0,
                "epoch_starts_us": _epoch_starts(g) if g else {},
                "records": sum(n for k, n in x.kinds().items() if k != E.REJECT) if x else 0,
                "rejects": x.rejects if x else 0,
                "gaps": [g.what for g in gaps if g.service == svc],
                "timers": figs_of[svc].tally if svc in figs_of else {},
                "lateness_ms": {k: v for k, v in lat.items() if k != "cdf"},
                "task_failures": failing_tasks(figs_of[svc]) if svc in figs_of else [],
                "violations": sum(n for s_, _, n in by_service_rule if s_ == svc),
                "violations_by_rule": {r: n for s_, r, n in by_service_rule if s_ == svc},
            }
        )
    return out


def failing_tasks(figs: TimerFigures) -> list[dict[str, Any]]:
    """The tasks some of whose runs raised or crashed: name, runs, error, crashed and the
    two rates, worst error rate first. A failing task is no violation of the service's
    promises (the timer ran, once); the report names it beside the verdict."""
    rows = [r for r in _records(figs.per_task().to_pandas()) if r["error"] or r["crashed"]]
    keys = ("task", "runs", "error", "crashed", "error_rate", "crash_rate")

    def worst(r: dict[str, Any]) -> tuple[float, str]:
        return (-(r["error_rate"] or 0) - (r["crash_rate"] or 0), r["task"])

    return sorted(({k: r[k] for k in keys} for r in rows), key=worst)


def _records(df: Any) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict("records")]


def _plain(v: Any) -> Any:
    """A value json can write (numpy scalars, NaN as None)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v
