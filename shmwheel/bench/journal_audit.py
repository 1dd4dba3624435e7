"""``python -m shmwheel.bench --journal-audit``: a real journal from a service run, audited
by the PySpark pipeline, with the same checks' cost in a single-process pyarrow/pandas pass
over the same journal as the baseline (bench/audit_scale.py runs it at 10 M records).

The baseline reads through the same decoder (``events.segment_batch``) and checks the
one-shot rules the audit's per-timer table carries for nearly every record (one row per
timer by a pandas groupby: decisions, early fires, runs fired twice, fires without a
schedule) and the lateness percentiles. It is the cost to beat, not a second auditor.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from .report import wrap

log = logging.getLogger("shmwheel.bench")

COLUMNS = ("kind", "id", "t_us", "epoch", "run", "deadline_ms")


def pandas_pass(journal: str) -> dict[str, Any]:
    """The baseline: decode every segment in this process, check, and time it."""
    import numpy as np
    import pyarrow as pa

    from ..journal import read_segment, segment_files
    from ..pipeline import events as E

    t0 = time.perf_counter()
    batches = [E.segment_batch(read_segment(p), COLUMNS) for p in segment_files(journal)]
    df = pa.Table.from_batches(batches).to_pandas()
    t_read = time.perf_counter() - t0
    kind = df["kind"]
    fired = df[kind == "fired"]
    per = df.assign(
        sched=kind.isin(["scheduled", "watched"]),
        fire=kind == "fired",
        out=kind == "outcome",
        cancel=kind == "cancelled",
        late=np.where(kind == "fired", df["t_us"] - df["deadline_ms"] * 1000, np.nan),
    ).groupby("id")
    t = per.agg(
        sched=("sched", "sum"),
        fires=("fire", "sum"),
        outs=("out", "sum"),
        cancels=("cancel", "sum"),
        late_min=("late", "min"),
    )
    late_ms = (fired["t_us"] - fired["deadline_ms"] * 1000) / 1000.0
    q = np.percentile(late_ms, [50, 90, 99, 99.9]) if len(late_ms) else []
    found = {
        "two outcomes": int(((t.fires > 0) & (t.cancels > 0)).sum()),
        "early": int((t.late_min < 0).sum()),
        "ran twice": int((t.fires > 1).sum()),
        "fired without a schedule": int((t.sched == 0).sum()),
    }
    return {
        "records": len(df),
        "timers": len(t),
        "seconds": time.perf_counter() - t0,
        "read_seconds": t_read,
        "lateness_ms": [float(x) for x in q],
        "found": found,
    }


def run(one_shots: int, out: str | None, master: str | None = None) -> int:
    """Write a demo journal, audit it with Spark, run the pandas pass; print both. The
    journal (and the audit's output, unless `out` names a directory to keep) is deleted."""
    from ..pipeline import job
    from ..pipeline.cli import text_summary
    from ..pipeline.demo import write_demo_journal
    from ..pipeline.session import SparkUnavailable, spark_session

    work = tempfile.mkdtemp(prefix="shmwheel-audit-")
    journal = os.path.join(work, "journal")
    out = out or os.path.join(work, "audit")
    try:
        print(wrap(f"writing a journal: {one_shots:,} one-shot timers, repeating timers, "
                   f"operations, in {journal}", more="  "), file=sys.stderr)  # fmt: skip
        t = time.perf_counter()
        counts = write_demo_journal(journal, one_shots=one_shots, operations=one_shots // 10)
        print(f"  {counts.records:,} records in {time.perf_counter() - t:.1f} s",
              file=sys.stderr)  # fmt: skip
        try:
            t = time.perf_counter()
            spark = spark_session(master)
        except SparkUnavailable as e:
            print(wrap(f"error: {e}", more="  "), file=sys.stderr)
            return 2
        start_s = time.perf_counter() - t
        try:
            s = job.run(
                spark, journal, out, progress=lambda x: print(wrap(x, more="  "), file=sys.stderr)
            )
        finally:
            spark.stop()
        base = pandas_pass(journal)
        print("\n".join(wrap(line, more="      ") for line in text_summary(s, out).split("\n")))
        print(
            "\n"
            + wrap(
                f"audit on Spark ({master or 'local[*]'}): {s['seconds']:.1f} s for "
                f"{s['records']:,} records (SparkSession start {start_s:.1f} s, not counted); "
                f"single-process pyarrow/pandas pass: {base['seconds']:.1f} s "
                f"({s['seconds'] / base['seconds']:.1f}x its time)"
            )
        )
        return 0 if s["clean"] else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
