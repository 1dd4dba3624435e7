"""The audit at scale, end to end: the ``shmwheel-audit`` command on local[2], timed from
its start to its exit (the Python start, the SparkSession's start, the audit, the stop),
on a journal of about RECORDS records from a real service run, and on the same number of
records split over four services (four journals, audited together); beside each, the
same audit in this process with pyarrow and numpy (``shmwheel.bench.journal.audit.single_process``),
whose figures must equal the command's. Goal (issue 24): each <= 30 s.

    python bench/audit_scale.py --records 10000000 --journals /tmp/audit-journals \\
        --runs 2 --json bench/results/audit-scale.json

The journals are written once under --journals and reused (writing 10 M records takes
minutes); ``uptime`` is recorded before every run (other programs load the machine).

The command keeps the JVM's class archive (shmwheel/pipeline/run/jvm_archive.py) in
--archive (default: DIR/jvm-archive under --journals; ``off`` runs without). When it is
not there yet, a first run writes it; that run's figure is reported apart ("first run"),
as a new machine's first audit would see it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from shmwheel.bench.journal.audit import same_figures, single_process
from shmwheel.pipeline.demo import sized_for, write_demo_journal


def journals(root: str, records: int, services: int) -> list[str]:
    """The journal directories of a case (written if missing): one service's journal of
    `records`, or `services` journals of records / services each."""
    case = os.path.join(root, f"{records}-{services}")
    dirs = [os.path.join(case, f"s{k}") for k in range(services)]
    for k, d in enumerate(dirs):
        if os.path.isdir(d) and os.listdir(d):
            continue
        t = time.perf_counter()
        n = write_demo_journal(d, **sized_for(records // services), spread_ms=2000.0,
                               seed=k + 1)  # fmt: skip
        print(f"journal {d}: {n.records:,} records in {time.perf_counter() - t:.0f} s",
              file=sys.stderr)  # fmt: skip
    return dirs


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return f.read().strip()


def audit(dirs: list[str], master: str, archive: str) -> dict:
    """One run of the command in a process of its own: its wall time and its summary."""
    out = tempfile.mkdtemp(prefix="shmwheel-audit-scale-")
    try:
        cmd = [os.path.join(os.path.dirname(sys.executable), "shmwheel-audit"), *dirs, out,
               "--master", master, "--json"]  # fmt: skip
        env = dict(os.environ, SHMWHEEL_JVM_ARCHIVE=archive)
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        wall = time.perf_counter() - t
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr[-2000:]}")
        summary = json.loads(proc.stdout)
        stages = [ln for ln in proc.stderr.splitlines() if ln.startswith("shmwheel.pipeline:")]
        return {"wall_s": wall, "summary": summary, "stages": stages}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--services", type=int, default=4, help="the second case's services")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--journals", required=True, metavar="DIR", help="where the journals are")
    ap.add_argument("--runs", type=int, default=1, help="runs of each case, alternating")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--archive", metavar="DIR", help="the JVM class archive's directory, or "
                    "off (default: jvm-archive under --journals)")  # fmt: skip
    args = ap.parse_args()
    archive = args.archive or os.path.join(args.journals, "jvm-archive")
    cases = {"one journal": journals(args.journals, args.records, 1),
             f"{args.services} services": journals(args.journals, args.records,
                                                   args.services)}  # fmt: skip
    figures: dict = {"records_goal": args.records, "master": args.master, "goal_s": 30,
                     "archive": archive, "runs": []}  # fmt: skip
    if archive != "off" and not glob.glob(os.path.join(archive, "spark-*.jsa")):
        load = uptime()
        first = audit(cases["one journal"], args.master, archive)
        figures["first_run"] = {"loadavg_before": load, "end_to_end_s": round(first["wall_s"], 1),
                                "stages": first["stages"]}  # fmt: skip
        print(f"first run (one journal, load {load.split()[0]}; writes the JVM class archive): "
              f"end to end {first['wall_s']:.1f} s", flush=True)  # fmt: skip
    for run in range(args.runs):
        for name, dirs in cases.items():
            load = uptime()
            got = audit(dirs, args.master, archive)
            s = got["summary"]
            base = single_process(dirs)
            differ = same_figures(s, base)
            row = {"case": name, "run": run + 1, "loadavg_before": load,
                   "end_to_end_s": round(got["wall_s"], 1), "audit_s": round(s["seconds"], 1),
                   "records": s["records"], "services": len(s["services"]), "clean": s["clean"],
                   "single_process_s": round(base["seconds"], 1),
                   "single_process_read_s": round(base["read_seconds"], 1),
                   "same_figures": not differ, "differences": differ,
                   "stages": got["stages"]}  # fmt: skip
            figures["runs"].append(row)
            print(f"{name} (run {run + 1}, load {load.split()[0]}): {s['records']:,} records, "
                  f"end to end {got['wall_s']:.1f} s (audit {s['seconds']:.1f} s), "
                  f"{'clean' if s['clean'] else 'NOT clean'}; one process "
                  f"{base['seconds']:.1f} s; "
                  + ("the same figures" if not differ else f"DIFFERENT: {differ}"),
                  flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2, default=str)
    return 0 if all(r["same_figures"] for r in figures["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
