"""The batch-scheduler example (workers/batch_scheduler.py): every job finishes exactly
once; a job worker SIGKILLed mid-job fails that attempt alone, its heartbeat timer fires
(silent), and the job is retried on the successor worker and finished once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workers import batch_scheduler as B

ROOT = Path(__file__).resolve().parent.parent


def test_a_worker_killed_mid_job_is_retried_and_the_job_finishes_once():
    s = B.run(jobs=16, workers=2, seed=3, kill_one=True)
    assert s["finished once"] == 16 and s["finished twice or more"] == 0 and s["gave up"] == 0
    assert s["killed"], "the test must kill a worker"
    history = s["killed job history"]
    assert history[0].startswith("attempt 1") and history[0].endswith("start"), history
    assert history[-1].endswith("end") and sum(h.endswith("end") for h in history) == 1
    assert s["heartbeats silent"] >= 1 and s["retries"] >= 1


def test_the_script_runs_on_its_own_with_a_summary():
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "workers" / "batch_scheduler.py"),
            "--jobs",
            "20",
            "--workers",
            "2",
            "--seed",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    summary = {line[:24].strip(): line[24:].strip() for line in r.stdout.splitlines()}
    assert summary["finished once"] == "20", r.stdout
