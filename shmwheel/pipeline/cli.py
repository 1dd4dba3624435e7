"""``python -m shmwheel.pipeline audit JOURNAL... OUT`` (also ``shmwheel-audit JOURNAL...
OUT``): the command line of the audit job; ``python -m shmwheel.pipeline ship ZIP`` packs
shmwheel for a cluster's executors (``ship.py``).

Exit status: 0 the journals are clean; 1 a violation or a reject was found (a gap in a
service's segment chain among them); 2 bad input: bad arguments, no such journal
directory, a directory without segments, or no Spark to run on (the message says which);
3 the job itself failed (the cause on the last line of stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from typing import Any

from .audit import DEFAULT_GRACE_MS
from .background import in_thread

# the script spark-submit runs: this package's __main__.py (it imports this module)
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")

EXIT_CLEAN, EXIT_FOUND, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m shmwheel.pipeline",
        description="Audit a shmwheel journal on Spark: exactly one outcome per timer, none "
        "early, lateness, throughput, per-producer and per-task figures (docs/pipeline.md).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser(
        "audit", help="audit JOURNAL... (one service's or several), writing under OUT"
    )
    a.add_argument(
        "paths",
        nargs="+",
        metavar="JOURNAL... OUT",
        help="the journal directories (local paths, globs, or URIs with --reader "
        "binaryfile), then the output directory (Parquet tables, report/)",
    )
    a.add_argument(
        "--master",
        help="Spark master URL (default: local[*]; under spark-submit, its --master decides)",
    )
    a.add_argument(
        "--shuffle-partitions",
        type=_positive,
        metavar="N",
        help="spark.sql.shuffle.partitions (default embedded: 2 per core)",
    )
    a.add_argument(
        "--reader",
        choices=("datasource", "binaryfile"),
        default="datasource",
        help="the shmwheel-journal data source (default) or binaryFile + "
        "mapInArrow (for HDFS, S3-style URIs)",
    )
    a.add_argument(
        "--grace-ms",
        type=_positive,
        default=DEFAULT_GRACE_MS,
        help="a timer due this long before the journal's end must have an "
        f"outcome; later ones are pending (default {DEFAULT_GRACE_MS})",
    )
    a.add_argument("--json", action="store_true", help="print the summary as JSON")
    a.add_argument("--verbose", action="store_true", help="Spark's own logs (default: errors)")
    z = sub.add_parser(
        "ship",
        help="pack shmwheel and what it needs into ZIP for a cluster's executors "
        "(spark-submit --archives ZIP#shmwheel-ship; docs/pipeline.md)",
    )
    z.add_argument("zip", metavar="ZIP", help="the zip file to write")
    z.add_argument(
        "--no-deps",
        action="store_true",
        help="shmwheel only (the executors' Python has numpy, msgpack, posix-ipc, psutil "
        "and rich already)",
    )
    return p


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _progress(line: str) -> None:
    print(f"shmwheel.pipeline: {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command == "ship":
        return _ship(args.zip, not args.no_deps)
    if len(args.paths) < 2:
        p.error("audit needs at least one JOURNAL and OUT")
    *journals, args.out = args.paths
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    from .fleet import journal_dirs

    try:  # before Spark starts: a missing or empty journal costs no session
        dirs = journal_dirs(journals)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if os.path.isfile(args.out):
        print(f"error: OUT {args.out!r} is a file, not a directory", file=sys.stderr)
        return EXIT_USAGE
    from .session import SparkUnavailable, active_session, finish_archive, spark_session

    t0 = time.perf_counter()
    embedder = active_session()  # a session already running (a notebook, a test) stays up
    if embedder is None:
        in_thread("shmwheel-preload", _preload)
    try:
        spark = spark_session(
            args.master,
            args.shuffle_partitions,
            verbose=args.verbose,
            data_source=False,
            write_archive=embedder is None,
            whole_stage_codegen=False,
        )
    except SparkUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - a session that cannot start: the job failed
        return _failed("could not start Spark", e)
    _progress(
        f"[session] Spark {spark.version}, master {spark.sparkContext.master} "
        f"({time.perf_counter() - t0:.1f} s; {_archive_note()})"
    )
    try:
        return _audit(spark, dirs, args)
    finally:  # the verdict is out: stop Spark, then keep the class archive its JVM writes
        if embedder is None:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - the job's failure is the one to report
                pass
            finish_archive(_progress)


def _audit(spark: Any, dirs: list[str], args: argparse.Namespace) -> int:
    """The job and its verdict (stdout) in a running session: the exit status."""
    from . import job

    try:
        summary = job.run(spark, dirs, args.out, args.reader, args.grace_ms, _progress)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - any other failure is the job's, not a finding
        return _failed("the audit job failed", e)
    if args.json:
        print(json.dumps(summary, indent=2, default=str), flush=True)
    else:
        print(text_summary(summary, args.out), flush=True)
    return EXIT_CLEAN if summary["clean"] else EXIT_FOUND


def _archive_note() -> str:
    from .session import archive_plan

    return f"JVM class archive: {archive_plan().note}"


def _preload() -> None:
    """Import what the driver needs after the jobs (pandas for the small tables,
    matplotlib for the report's plots: 1.3 s) while the JVM starts, which keeps one core
    of two busy and the driver idle."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot
        import pandas  # noqa: F401
    except Exception:  # noqa: BLE001 - the report imports them again and says what failed
        pass


def _ship(out: str, deps: bool) -> int:
    """``ship ZIP``: pack, then print the spark-submit options that use it."""
    from .ship import NAME, pack, spark_submit_args

    if os.path.isdir(out):
        print(f"error: {out!r} is a directory; give the zip file to write", file=sys.stderr)
        return EXIT_USAGE
    packed = pack(out, deps)
    here = os.path.dirname(os.path.abspath(out))
    print(f"packed {', '.join(packed)} into {out} (unpacked as {here}/{NAME}); from {here}, "
          "submit with", file=sys.stderr)  # fmt: skip
    args = " ".join(spark_submit_args(os.path.abspath(out)))
    print(f"spark-submit --master URL {args} {ENTRY} audit JOURNAL... OUT")
    return EXIT_CLEAN


def _failed(what: str, e: BaseException) -> int:
    """Exit 3: the traceback, then the cause on the last line of stderr."""
    traceback.print_exception(e, file=sys.stderr)
    cause = " ".join(str(e).split()) or type(e).__name__
    print(f"error: {what}: {type(e).__name__}: {cause[:2000]}", file=sys.stderr, flush=True)
    return EXIT_FAILED


def script() -> int:
    """The ``shmwheel-audit`` console script: ``shmwheel-audit JOURNAL... OUT [options]``
    is ``python -m shmwheel.pipeline audit JOURNAL... OUT [options]``."""
    return main(["audit", *sys.argv[1:]])


def text_summary(s: dict, out: str) -> str:
    """The summary a person reads at the end of a run."""
    lat = s["lateness_ms"]
    lines = [
        f"journal {s['journal']}: {s['records']:,} records in {s['epochs']} epochs, "
        f"{s['rejects']:,} rejects",
    ]
    services = s.get("services", [])
    if len(services) > 1:
        for v in services:
            n = sum(t["n"] for t in v["timers"].values())
            lines.append(
                f"  service {v['service']} (host {', '.join(h[:8] for h in v['hosts'])}): "
                f"{v['records']:,} records, {v['epochs']} epochs, {n:,} timers and "
                f"operations, {v['violations']:,} violations, {v['rejects'] + len(v['gaps']):,} "
                "rejects"
            )
    for typ, t in sorted(s["timers"].items()):
        lines.append(
            f"  {typ:<11} {t['n']:>10,}  ran {t['ran']:,}  cancelled {t['cancelled']:,}  "
            f"completed {t['completed']:,}  expired {t['expired']:,}  pending {t['pending']:,}"
            f"  runs {t['runs']:,}  repeats in the crash window {t['repeats_in_window']:,}"
        )
    from .report import jobs_line, verdict

    if jobs_line(s):
        counts = ", ".join(f"{r.removeprefix('jobs: ')} {n:,}"
                           for r, n in s["jobs"]["violations_by_rule"].items())  # fmt: skip
        lines.append(f"  jobs: {jobs_line(s)}; violations: {counts}")
    if lat["fires"]:
        lines.append(
            f"  lateness ms: p50 {lat['p50_ms']:.3f}  p99 {lat['p99_ms']:.3f}  "
            f"p99.9 {lat['p999_ms']:.3f}  max {lat['max_ms']:.3f}  ({lat['fires']:,} fires)"
        )
    for rule, n in sorted(s["violations_by_rule"].items()):
        lines.append(f"  VIOLATION {rule}: {n:,}")
    for v in s["violation_sample"][:5]:
        lines.append(f"    {v['rule']}: {v['detail']}")
    for r in s["reject_sample"][:5]:
        lines.append(f"  REJECT {r}")
    head, covers = verdict(s)
    for t in s.get("task_failures") or []:
        rate = (t["error_rate"] or 0) + (t["crash_rate"] or 0)
        lines.append(
            f"  TASK FAILURES {t['task']}: {100 * rate:.1f} % of {t['runs']:,} runs "
            f"({t['error']:,} raised, {t['crashed']:,} crashed)"
        )
    lines.append(f"{'clean' if s['clean'] else 'NOT clean'}: {head}: {'; '.join(covers)}")
    lines.append(f"tables and report under {out} (report/index.md)")
    return "\n".join(lines)
