"""The audit at scale: a journal of about RECORDS records from a real service run, audited
by the PySpark pipeline on local[2] (the SparkSession's start not counted), beside a
single-process pyarrow/pandas pass over the same journal, for each --shuffle-partitions
value given, each audit in a fresh process. Goal (issue 11): 10 M records in <= 30 s.

    python bench/audit_scale.py --records 10000000 --partitions 4,8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from shmwheel.bench.journal_audit import pandas_pass
from shmwheel.pipeline import job
from shmwheel.pipeline.demo import sized_for, write_demo_journal
from shmwheel.pipeline.session import spark_session


def one(journal: str, out: str, parts: int, master: str) -> None:
    """One audit in this process: prints [session start s, summary] as JSON."""
    t = time.perf_counter()
    spark = spark_session(master, parts)
    start = time.perf_counter() - t
    try:
        s = job.run(spark, journal, out, progress=lambda x: print(x, file=sys.stderr))
    finally:
        spark.stop()
    print(json.dumps([start, s], default=str))


def main() -> int:
    if sys.argv[1:2] == ["--one"]:
        journal, out, parts, master = sys.argv[2:6]
        one(journal, out, int(parts), master)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", default="4", help="shuffle partitions to try, e.g. 4,8")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="shmwheel-audit-scale-")
    figures: dict = {"records_goal": args.records, "master": args.master, "runs": []}
    try:
        journal = os.path.join(work, "journal")
        t = time.perf_counter()
        n = write_demo_journal(journal, **sized_for(args.records), spread_ms=2000.0)
        figures["journal"] = {**n.as_dict(), "seconds": time.perf_counter() - t,
                              "bytes": sum(os.path.getsize(os.path.join(journal, f))
                                           for f in os.listdir(journal))}  # fmt: skip
        print(f"journal: {n.records:,} records in {figures['journal']['seconds']:.1f} s",
              file=sys.stderr)  # fmt: skip
        base = pandas_pass(journal)
        figures["pandas"] = base
        print(f"pandas pass: {base['seconds']:.1f} s", file=sys.stderr)
        for parts in [int(p) for p in args.partitions.split(",")]:
            # each audit in a process of its own: a SparkSession stopped and started again
            # in one process keeps its JVM, warm, and the later audits would not pay the
            # JIT's warm-up that a real audit pays
            out = os.path.join(work, f"out{parts}")
            proc = subprocess.run(
                [sys.executable, __file__, "--one", journal, out, str(parts), args.master],
                stdout=subprocess.PIPE, check=True, text=True,
            )  # fmt: skip
            start, s = json.loads(proc.stdout.strip().splitlines()[-1])
            run = {"shuffle_partitions": parts, "session_start_s": start,
                   "audit_s": s["seconds"], "clean": s["clean"], "records": s["records"],
                   "vs_pandas": s["seconds"] / base["seconds"]}  # fmt: skip
            figures["runs"].append(run)
            print(f"shuffle partitions {parts}: audit {s['seconds']:.1f} s for "
                  f"{s['records']:,} records (session start {start:.1f} s, not counted), "
                  f"{run['vs_pandas']:.1f}x the pandas pass ({base['seconds']:.1f} s); "
                  f"clean={s['clean']}")  # fmt: skip
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f, indent=2, default=str)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
