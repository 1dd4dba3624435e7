"""``python -m shmwheel.bench --journal-audit``: a real journal from a service run (two
epochs with a pause between them, about ten seconds of records, so every plot of the
report has data and shows the outage), audited by the PySpark pipeline, beside the same
audit in one process with pyarrow and numpy (``single_process``). The journal and the
report are kept; the last lines say where (bench/audit_scale.py runs both at 10 M).

``single_process`` is the like-for-like baseline: the same decoder, the same per-file
judgement and chain rules (``fleet``), the same per-second figures (``seconds``), the same
per-timer kernel (``pertimer``) and the same rule conditions (``audit.conditions`` as
pyarrow expressions), with no Spark and no files written: what one process costs for
what the Spark job computes. Its figures must equal the job's (``same_figures``).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from ..report import wrap

log = logging.getLogger("shmwheel.bench")


def single_process(journals: Sequence[str], grace_ms: int | None = None) -> dict[str, Any]:
    """The audit's figures of the journals (directories) computed in this process: records,
    rejects, gaps, timers by type, violations by rule, lateness; and its seconds."""
    import pyarrow as pa

    from ...journal import read_segment, segment_files
    from ...pipeline.read import events as pipeline_events
    from ...pipeline.read import fleet
    from ...pipeline.tables import audit as pipeline_audit
    from ...pipeline.tables import pertimer as pipeline_pertimer
    from ...pipeline.tables.figures import TimerFigures
    from ...pipeline.tables.seconds import COLUMNS as SECONDS_COLUMNS
    from ...pipeline.tables.seconds import Seconds

    grace = pipeline_audit.DEFAULT_GRACE_MS if grace_ms is None else grace_ms
    t0 = time.perf_counter()
    cols = [
        c
        for c in pipeline_events.NAMES
        if c in {*pipeline_pertimer.EVENT_COLUMNS, *SECONDS_COLUMNS, "service"}
    ]
    reports, secs, events = [], {}, {}
    for d in journals:
        for path in segment_files(d):
            seg = read_segment(path)
            reports.append(fleet.segment_report(seg))
            batch = pipeline_events.segment_batch(seg, cols, dictionary=True)
            svc = (seg.header or {}).get("service")
            secs.setdefault(svc, []).append(Seconds.of_events(batch))
            events.setdefault(svc, []).append(batch)
    t_read = time.perf_counter() - t0
    gaps, _ = fleet.completeness(fleet.services(reports))
    by_service = {svc: Seconds.merge(x) for svc, x in secs.items()}
    whole = Seconds.merge(by_service.values())
    figures, violations = [], {}
    for svc, batches in events.items():
        if svc is None:
            continue
        b = pipeline_pertimer.Bounds.of(by_service[svc], grace)
        table = pipeline_pertimer.per_timer_of(pa.Table.from_batches(batches).combine_chunks(), b)
        figures.append(TimerFigures.of_table(table, b))
        for rule, n in pipeline_audit.count_violations(table, b).items():
            violations[rule] = violations.get(rule, 0) + n
    kinds = whole.kinds()
    overall = whole.overall()
    return {
        "records": sum(n for k, n in kinds.items() if k != pipeline_events.REJECT),
        "rejects": whole.rejects + len(gaps),
        "timers": TimerFigures.merge(figures).tally,
        "violations_by_rule": violations,
        "lateness_ms": {k: v for k, v in overall.items() if k != "cdf"},
        "seconds": time.perf_counter() - t0,
        "read_seconds": t_read,
    }


def same_figures(spark_summary: dict[str, Any], single: dict[str, Any]) -> list[str]:
    """Where the Spark audit's summary and the single-process pass differ (none: [])."""
    return [
        f"{k}: {spark_summary[k]!r} != {single[k]!r}"
        for k in ("records", "rejects", "timers", "violations_by_rule", "lateness_ms")
        if spark_summary[k] != single[k]
    ]


def run(one_shots: int, out: str | None, master: str | None = None) -> int:
    """Write a demo journal (two epochs, about ten seconds of records), audit it with
    Spark, run the single-process pass; print both, and where the journal and the report
    are (kept: under `out`, or a new directory in the temporary directory)."""
    from ...pipeline.cli import text_summary
    from ...pipeline.demo import write_demo_journal
    from ...pipeline.run import job
    from ...pipeline.run.session import SparkUnavailable, spark_session

    work = out or tempfile.mkdtemp(prefix="shmwheel-journal-audit-")
    journal, audit = os.path.join(work, "journal"), os.path.join(work, "audit")
    if os.path.exists(journal):
        print(f"error: {journal} exists: give --audit-out a new directory", file=sys.stderr)
        return 2
    print(wrap(f"writing a journal: {one_shots:,} one-shot timers, repeating timers, "
               f"operations, in two epochs 2 s apart, in {journal}", more="  "),
          file=sys.stderr)  # fmt: skip
    t = time.perf_counter()
    counts = write_demo_journal(journal, one_shots=one_shots, operations=one_shots // 10,
                                spread_ms=4000.0, epochs=2, pause_s=2.0)  # fmt: skip
    print(f"  {counts.records:,} records in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    try:
        t = time.perf_counter()
        spark = spark_session(master)
    except SparkUnavailable as e:
        print(wrap(f"error: {e}", more="  "), file=sys.stderr)
        return 2
    start_s = time.perf_counter() - t
    try:
        s = job.run(
            spark, journal, audit, progress=lambda x: print(wrap(x, more="  "), file=sys.stderr)
        )
    finally:
        spark.stop()
    base = single_process([journal])
    print("\n".join(wrap(line, more="      ") for line in text_summary(s, audit).split("\n")))
    differ = same_figures(s, base)
    print(
        "\n"
        + wrap(
            f"audit on Spark ({master or 'local[*]'}): {s['seconds']:.1f} s for "
            f"{s['records']:,} records (SparkSession start {start_s:.1f} s, not counted); "
            f"the same audit in one process (pyarrow, numpy): {base['seconds']:.1f} s"
            + ("; the same figures" if not differ else f"; FIGURES DIFFER: {differ}")
        )
    )
    print(wrap(f"kept: the journal in {journal}, the report in "
               f"{os.path.join(audit, 'report', 'index.md')} (delete {work} when done)",
               more="  "))  # fmt: skip
    return 0 if s["clean"] and not differ else 1
