"""A journaled service SIGKILLed with jobs done, running, pending and backing off, then
started again on its journal (``sigkill_and_recover``): run by tests/test_job_journal.py,
and by tests/test_job_audit.py, which audits the journal it leaves with Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import wait_for

import shmwheel
from shmwheel.service.jobs import ledger

TESTS = Path(__file__).resolve().parent
TASKS = {"mark": "job_fns:mark"}
DELAY_MS = 5000  # the delayed job's delay and the flaky one's back-off: past the crash

CHILD = textwrap.dedent("""
    import sys, time
    import shmwheel
    journal, marks, DELAY_MS = sys.argv[1], sys.argv[2], int(sys.argv[3])
    svc = shmwheel.TimerService(tasks={"mark": "job_fns:mark"}, capacity=1000, executors=1,
                                job_workers=4, journal=journal, job_grace=0.5).start()
    c = svc.client()
    once = shmwheel.Retry(1)
    twice = shmwheel.Retry(2, backoff=0.01, on=(Exception,))
    def job(tag, **kw):
        retry = kw.pop("retry", once)
        delay = kw.pop("delay_ms", 0)
        return c.submit("mark", {"path": marks, "tag": tag, **kw}, delay_ms=delay, retry=retry)
    done = [job(f"done{i}") for i in range(3)]
    for j in done:
        j.result(30)
    running = [job(f"run{i}", sleep_first=30, retry=twice) for i in range(2)]
    lost = job("lost", sleep_first=30)   # its policy allows no second attempt
    submitted = time.monotonic_ns()  # before the delayed job: its delay counts from here on
    later = job("later", delay_ms=DELAY_MS)
    backoff = shmwheel.Retry(3, backoff=DELAY_MS / 1000, jitter=0.0, on=(Exception,))
    flaky = job("flaky", fail_first=True, retry=backoff)
    print(svc.name, submitted, flush=True)
    time.sleep(120)
""")


def ended(journal: Path) -> list[str]:
    """How each attempt on file ended, in order (the ledger's ENDED records)."""
    return [
        rec[3]
        for path in ledger.ledger_files(ledger.directory_of(str(journal)))
        for rec in ledger.read(path)
        if rec[0] == ledger.ENDED
    ]


def marks_of(path: Path) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        tag, attempt, t_ns = line.split()
        out.setdefault(tag, []).append((int(attempt), int(t_ns)))
    return out


def sigkill_and_recover(tmp_path: Path) -> Path:
    """A service SIGKILLed with jobs done, running, pending and backing off, then started
    again on its journal until every job ends; what ran is checked. Returns the journal
    (test_job_audit.py audits it with Spark)."""
    journal, marks = tmp_path / "journal", tmp_path / "marks"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(journal), str(marks), str(DELAY_MS)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        _name, submitted_ns = p.stdout.readline().split()  # type: ignore[union-attr]
        # the crash, once the running jobs and the flaky one's first attempt have started
        wait_for(
            lambda: {"run0", "run1", "lost", "flaky"} <= set(marks_of(marks)),
            30,
            "the jobs to start",
        )
        # and the flaky one's failed first attempt is on file: it backs off at the crash
        wait_for(lambda: "raised" in ended(journal), 30, "the flaky attempt's outcome")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    before = marks_of(marks)
    assert "later" not in before and all(len(before[t]) == 1 for t in before)
    with shmwheel.TimerService(
        tasks=TASKS, capacity=1000, executors=1, job_workers=2, journal=journal
    ) as svc:
        assert svc.recovery["jobs"] == {"jobs": 5, "crashed": 3}  # run0, run1, lost
        wait_for(lambda: not ledger.pending(str(journal))[0], 30, "every job to end")
    after = marks_of(marks)
    # what had ended never ran again; a crashed attempt ran once more where allowed
    for i in range(3):
        assert len(after[f"done{i}"]) == 1
    for t in ("run0", "run1"):
        assert [a for a, _ in after[t]] == [1, 2]
    assert [a for a, _ in after["lost"]] == [1]  # its policy: one attempt, now failed
    # the delayed job ran once, never before its delay; the flaky one's retry never
    # before its back-off after its first attempt ended
    assert len(after["later"]) == 1
    assert after["later"][0][1] >= int(submitted_ns) + DELAY_MS * 1_000_000
    (first, t1), (second, t2) = after["flaky"]
    assert (first, second) == (1, 2) and t2 - t1 >= DELAY_MS * 1_000_000
    return journal
