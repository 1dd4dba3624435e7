"""The jobs' rules (their one definition: service/jobs/ledger/audit.py) in the PySpark audit
(shmwheel/pipeline/tables/jobs.py) and in ``shmwheel journal check``: a real service's jobs
(succeeded, retried, timed out, crashed, stopped, cancelled) audit clean; each rule
catches a ledger doctored to break it, by name, in both audits; both give the same
verdicts on the same ledgers; a whole-service SIGKILL with jobs pending, running and
backing off, recovered, audits clean; a ledger rotated and compacted while jobs keep
running stays under its bound and audits clean.

Every test that starts Spark (the ``spark`` fixture) is marked ``system`` by conftest.py;
the others run without a JVM."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import job_fns
import pytest
from helpers import wait_for

import shmwheel
from shmwheel import JobTimeout, Retry, TaskError
from shmwheel.pipeline import cli
from shmwheel.pipeline.tables import jobs as JB
from shmwheel.service.jobs import ledger
from shmwheel.service.jobs.ledger import audit, compact

# every Spark test runs in one xdist worker, which starts one JVM for them all
pytestmark = pytest.mark.xdist_group("spark")

L = ledger
RULES = [JB.PREFIX + r for r in audit.RULES]
NAMES = [c for c, _ in L.COLUMNS]


def hows(journal: Path) -> list[str]:
    """How each attempt on file ended (the ENDED rows' ``how``), in order."""
    rows = (dict(zip(NAMES, r, strict=True)) for r in L.ledger_rows(str(journal)))
    return [r["how"] for r in rows if r["kind"] == "ended"]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real service's journal: timers, and jobs that succeed, are retried, time out (a
    soft stop and a hard kill), crash their worker, are stopped and are cancelled."""
    root = tmp_path_factory.mktemp("jobs")
    journal = root / "journal"
    with shmwheel.TimerService(
        tasks={"noop": "job_fns:task_double"}, capacity=1000, executors=1, job_workers=2,
        journal=journal, job_grace=0.3,
    ) as svc:  # fmt: skip
        c = svc.client()
        # timers too (all scheduled before the first fires: each one's outcome is asked
        # before its slot can be reserved again)
        timers = [c.schedule("noop", {"x": i}, delay_ms=200) for i in range(20)]
        for h in timers:
            h.result(30)
        ex = svc.executor()
        ok = [ex.submit(job_fns.add, i, 1) for i in range(30)]
        flaky = ex.submit(job_fns.attempt_log, str(root / "flaky"), 2,
                          retry=Retry(3, backoff=0.05, jitter=0.5))  # fmt: skip
        slow = ex.submit(job_fns.sleep, 30, time_limit=0.2)
        stubborn = ex.submit(job_fns.swallow, 30, time_limit=0.2)
        crash = ex.submit(job_fns.exit_now, 3)
        started = root / "started"
        stopped = ex.submit(job_fns.wait_for_file, str(root / "never"), 30, str(started))
        assert [j.result(30) for j in ok] == [i + 1 for i in range(30)]
        assert flaky.result(30) == 3 and flaky.attempts == 3
        for j in (slow, stubborn):
            with pytest.raises(JobTimeout):
                j.result(30)
        with pytest.raises(TaskError):
            crash.result(30)
        wait_for(started.exists, 30, "the job to be stopped to run")
        stopped.stop()
        wait_for(stopped.cancelled, 30, "the stop")
        later = c.submit("noop", {"x": 1}, delay_ms=60_000)
        assert later.cancel()
        wait_for(lambda: not ledger.pending(str(journal))[0], 30, "every job to settle")
        wait_for(lambda: "stopped" in hows(journal), 30, "the stopped attempt's outcome")
    return journal


def _spark_violations(spark, journal: Path) -> list[tuple[str, int]]:
    found, summary = JB.audit(spark, [str(journal)], {})
    got = sorted((r["rule"], r["id"]) for r in found.collect()) if found is not None else []
    counts = {r: n for r, n in summary["violations_by_rule"].items() if n}
    assert sum(counts.values()) == len(got)
    return got


def _python_violations(journal: Path) -> list[tuple[str, int]]:
    return sorted(
        (JB.PREFIX + rule, j) for _, rule, j, _ in audit.check(L.ledger_rows(str(journal)))
    )


def test_a_real_services_jobs_audit_clean(spark, real, tmp_path, capsys):
    assert audit.audit(str(real)) == []
    out = tmp_path / "out"
    assert cli.main(["audit", str(real), str(out)]) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    s = json.loads((out / "report" / "summary.json").read_text())
    assert s["clean"] and s["violations"] == 0
    j = s["jobs"]
    # 30 ok + flaky + slow + stubborn + crash + stopped + the cancelled one
    assert j["jobs"] == 36 and j["attempts"] == 30 + 3 + 4
    assert j["violations_by_rule"] == dict.fromkeys(RULES, 0)
    assert "## Jobs" in (out / "report" / "index.md").read_text()
    assert "jobs: 36 jobs" in printed
    assert {"ok", "raised", "timeout", "failed", "stopped"} <= set(hows(real))


# -- doctored ledgers: one planted violation each ----------------------------------------
JOB = 10_001  # the planted job's id, above the real ones


def _plant(lg: ledger.Ledger, rule: str) -> None:
    """Records of one job breaking `rule` (and no other)."""
    t = L.now_us()
    policy = [1.0, 2.0, 60.0, 0.1]  # a 1 s back-off, at least 0.9 s
    if rule != "never submitted":
        lg.record(L.SUBMITTED, JOB, t, "planted", b"", b"", 0.5, None, 2, 0, 0.5, policy)
    lg.record(L.STARTED, JOB, 1, t + 10)
    if rule == "stopped late":  # limit 0.5 + grace 0.5 + 1 s: ended 3 s after it began
        lg.record(L.ENDED, JOB, 1, "timeout", t + 3_000_010, -1, t + 10)
        lg.record(L.DONE, JOB, "error", t + 3_000_020)
        return
    due = (t + 1_000_000) // 1000 + 1
    lg.record(L.ENDED, JOB, 1, "raised", t + 20, due, t + 10)
    if rule == "back-off early":  # 0.5 s after attempt 1 ended
        lg.record(L.STARTED, JOB, 2, t + 500_000)
    else:
        lg.record(L.STARTED, JOB, 2, due * 1000 + 5)
    if rule == "beyond the policy":  # attempt 2 retried (a 2 s back-off) past the policy's 2
        end2 = due * 1000 + 60
        due2 = (end2 + 2_000_000) // 1000 + 1
        lg.record(L.ENDED, JOB, 2, "raised", end2, due2, due * 1000 + 5)
        lg.record(L.STARTED, JOB, 3, due2 * 1000 + 5)
        lg.record(L.ENDED, JOB, 3, "ok", due2 * 1000 + 50, -1, due2 * 1000 + 5)
        lg.record(L.DONE, JOB, "ok", due2 * 1000 + 90)
        return
    lg.record(L.ENDED, JOB, 2, "ok", due * 1000 + 50, -1, due * 1000 + 5)
    if rule == "attempt outcomes":
        lg.record(L.ENDED, JOB, 2, "ok", due * 1000 + 60, -1, due * 1000 + 5)
    lg.record(L.DONE, JOB, "ok", due * 1000 + 90)
    if rule == "job outcomes":
        lg.record(L.DONE, JOB, "ok", due * 1000 + 95)


def doctored(real: Path, where: Path, rule: str | None) -> Path:
    """A copy of the real journal with a run of one more epoch whose ledger breaks `rule`
    (None: a planted job that breaks nothing)."""
    d = where / "journal"
    shutil.copytree(real, d)
    lg = L.Ledger(str(d), 99, "planted-service", max_bytes=0)
    _plant(lg, rule or "")
    lg.close()
    return d


@pytest.mark.parametrize("rule", [None, *audit.RULES])
def test_the_python_audit_catches_each_planted_violation_by_name(tmp_path, rule):
    lg = L.Ledger(str(tmp_path), 99, "planted-service", max_bytes=0)
    _plant(lg, rule or "")
    lg.close()
    found = audit.check(L.ledger_rows(str(tmp_path)))
    assert [(svc, r, j) for svc, r, j, _ in found] == (
        [] if rule is None else [("planted-service", rule, JOB)]
    )
    assert audit.audit(str(tmp_path)) == [f"job {JOB}: {r}: {d}" for _, r, _, d in found]


@pytest.mark.parametrize("rule", [None, *audit.RULES])
def test_each_rule_catches_its_planted_violation_and_python_agrees(spark, real, tmp_path, rule):
    d = doctored(real, tmp_path, rule)
    got = _spark_violations(spark, d)
    assert got == ([] if rule is None else [(JB.PREFIX + rule, JOB)])
    assert _python_violations(d) == got


def test_a_fleets_ledgers_are_judged_each_apart(spark, real, tmp_path):
    """Two services' ledgers with the same job ids: a job is keyed by its ledger, so the
    planted violation is the only one, under its own service."""
    d = doctored(real, tmp_path, "stopped late")
    found, summary = JB.audit(spark, [str(real), str(d)], {})
    assert found is not None
    assert [(v["service"], v["rule"], v["id"]) for v in found.collect()] == [
        ("planted-service", JB.PREFIX + "stopped late", JOB)
    ]
    assert summary["ledgers"] == 2 and summary["jobs"] == 2 * 36 + 1
    assert summary["by_service"] == {"planted-service": {JB.PREFIX + "stopped late": 1}}


def test_the_report_counts_a_planted_violation_beside_the_timer_rules(
    spark, real, tmp_path, capsys
):
    d = doctored(real, tmp_path, "back-off early")
    out = tmp_path / "out"
    assert cli.main(["audit", str(d), str(out)]) == 1
    printed = capsys.readouterr().out
    assert "VIOLATION jobs: back-off early: 1" in printed, printed
    s = json.loads((out / "report" / "summary.json").read_text())
    assert not s["clean"] and s["violations_by_rule"] == {"jobs: back-off early": 1}
    assert s["jobs"]["violations_by_rule"]["jobs: back-off early"] == 1
    assert [v["id"] for v in s["violation_sample"]] == [JOB]
    assert {v["service"] for v in s["services"] if v["violations"]} == {"planted-service"}
    viol = spark.read.parquet(str(out / "violations")).collect()
    assert [(v["rule"], v["id"], v["type"]) for v in viol] == [("jobs: back-off early", JOB, "job")]


def test_a_format_1_ledger_is_read_and_audited_alike(spark, real, tmp_path):
    """A ledger written before format 2 (no HEADER, no policy, no began_us; one file a
    run named ledger-EPOCH.shwj): pending() and both audits read it."""
    d = tmp_path / "journal"
    shutil.copytree(real, d)
    old = L.Ledger(str(d), 98, max_bytes=0)
    old.buf.clear()  # no HEADER
    t = L.now_us()
    old.record(L.SUBMITTED, 7_001, t, "old", b"", b"", None, None, 2, 0, 1.0)
    old.record(L.STARTED, 7_001, 1, t + 10)
    old.record(L.ENDED, 7_001, 1, "raised", t + 20, (t + 5_000_000) // 1000)
    old.record(L.STARTED, 7_001, 2, t + 1_000_000)  # before its recorded back-off end
    old.record(L.SUBMITTED, 7_002, t, "old", b"", b"", None, None, 1, 0, 1.0)
    old.close()
    os.rename(old.path, os.path.join(old.directory, "ledger-000098.shwj"))
    pending, top = L.pending(str(d))
    assert [(p.id, p.attempts, p.crashed) for p in pending] == [(7_001, 2, True), (7_002, 0, False)]
    assert top == 7_002
    got = _spark_violations(spark, d)
    assert got == [(JB.PREFIX + "back-off early", 7_001)]
    assert _python_violations(d) == got


def test_a_whole_service_sigkill_recovered_audits_clean(spark, tmp_path, capsys):
    from journaled_jobs import sigkill_and_recover

    journal = sigkill_and_recover(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["audit", str(journal), str(out)]) == 0, capsys.readouterr()
    s = json.loads((out / "report" / "summary.json").read_text())
    assert s["clean"] and s["jobs"]["jobs"] == 8
    assert s["jobs"]["violations_by_rule"] == dict.fromkeys(RULES, 0)
    assert hows(journal).count("crashed") == 3  # run0, run1, lost: running at the crash
    assert _python_violations(journal) == _spark_violations(spark, journal) == []


# -- retention: a ledger rotated and compacted while jobs keep running -------------------
BOUND = 16 << 10  # journal_jobs_bytes: a file is rotated past 16 KiB
WAVES, WAVE = 24, 40


def ledger_bytes(journal: Path) -> int:
    """The bytes of every file in the jobs' ledger directory (a compaction's temporary
    file included)."""
    d = Path(L.directory_of(str(journal)))
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], set[int]]:
    """A service whose ledger rotates past BOUND: waves of jobs, with jobs backing off,
    delayed and timing out across rotations (their records carried by each compaction).
    Returns the journal, the ledger's size after each wave (measured while jobs run) and
    the first wave's job ids."""
    root = tmp_path_factory.mktemp("compacted")
    journal = root / "journal"
    sizes = []
    with shmwheel.TimerService(
        tasks={"noop": "job_fns:task_double"}, capacity=1000, executors=1, job_workers=2,
        journal=journal, journal_jobs_bytes=BOUND, job_grace=0.3,
    ) as svc:  # fmt: skip
        c, ex = svc.client(), svc.executor()
        across, first = [], set()
        for w in range(WAVES):
            if w % 6 == 0:  # jobs whose records span several files
                across.append(ex.submit(job_fns.attempt_log, str(root / f"flaky{w}"), 2,
                                        retry=Retry(3, backoff=0.2, jitter=0.2)))  # fmt: skip
                across.append(c.submit("noop", {"x": w}, delay_ms=400))
                across.append(ex.submit(job_fns.sleep, 30, time_limit=0.3))
            wave = [ex.submit(job_fns.add, i, w) for i in range(WAVE)]
            assert [j.result(30) for j in wave] == [i + w for i in range(WAVE)]
            sizes.append(ledger_bytes(journal))
            first = first or {j.id for j in wave}
        for j in across:
            j.exception(30)
        wait_for(lambda: not ledger.pending(str(journal))[0], 30, "every job to settle")
    return journal, sizes, first


def test_compaction_keeps_the_ledger_bounded_and_its_audit_clean(compacted):
    journal, sizes, first = compacted
    paths = L.ledger_files(L.directory_of(str(journal)))
    parts = [L.order(p)[1] for p in paths]
    # rotated many times: every file of the first rotations is gone
    assert max(parts) >= 10 and len(paths) <= 2, paths
    rows = [dict(zip(NAMES, r, strict=True)) for r in L.ledger_rows(str(journal))]
    assert len(first) == WAVE and not first & {r["job"] for r in rows}, "settled: dropped"
    # the current file (up to BOUND and one write past it) and the compacted one (the jobs
    # not settled at the rotation): never twice the bound
    assert max(sizes) < 2 * BOUND, sizes
    assert audit.audit(str(journal)) == []


def test_a_compacted_ledger_audits_clean_in_spark_as_in_python(spark, compacted):
    journal, _, _ = compacted
    found, summary = JB.audit(spark, [str(journal)], {})
    assert found is not None and found.count() == 0
    assert summary["violations_by_rule"] == dict.fromkeys(RULES, 0)
    assert summary["files"] == len(L.retained_paths(L.directory_of(str(journal))))
    assert _python_violations(journal) == []


def _settled_jobs(lg: ledger.Ledger, ids: range) -> None:
    for j in ids:
        t = L.now_us()
        lg.record(L.SUBMITTED, j, t, "f", b"", b"", None, None, 1, 0, 1.0, None)
        lg.record(L.STARTED, j, 1, t + 1)
        lg.record(L.ENDED, j, 1, "ok", t + 2, -1, t + 1)
        lg.record(L.DONE, j, "ok", t + 3)
        lg.flush()


@pytest.mark.parametrize("step", compact.STEPS)
def test_a_compaction_failing_after_each_step_loses_nothing(tmp_path, step):
    """A compaction that fails after each of its steps (as a crash there would) keeps
    every unsettled job whole: pending() and the audit stay exact; the next compaction
    clears what the failed one left."""

    def fail(name: str) -> None:
        if name == step:
            raise OSError(f"planted: a failure after {name}")

    lg = L.Ledger(str(tmp_path), 1, "svc", max_bytes=2000,
                  compactor=lambda lg, part: compact.compact(lg, part, fail))  # fmt: skip
    t = L.now_us()
    policy = [0.5, 2.0, 60.0, 0.1]
    lg.record(L.SUBMITTED, 1, t, "backing", b"", b"", None, None, 3, 0, 1.0, policy)
    lg.record(L.STARTED, 1, 1, t + 1)
    lg.record(L.ENDED, 1, 1, "raised", t + 2, (t + 10_000_000) // 1000, t + 1)
    lg.record(L.SUBMITTED, 2, t, "running", b"", b"", 5.0, None, 1, 0, 1.0, None)
    lg.record(L.STARTED, 2, 1, t + 3)
    _settled_jobs(lg, range(3, 80))  # past 2,000 bytes: rotated, the compaction fails
    expect = [(1, 1, False), (2, 1, True)]

    def judged() -> list[tuple[int, int, bool]]:
        pending, top = L.pending(str(tmp_path))
        assert top == lg.top and audit.audit(str(tmp_path)) == []
        return [(p.id, p.attempts, p.crashed) for p in pending]

    assert lg.part >= 4 and judged() == expect
    lg.compactor = compact.compact
    _settled_jobs(lg, range(80, 140))
    lg.close()
    assert judged() == expect
    files = os.listdir(L.directory_of(str(tmp_path)))
    assert compact.TMP not in files and len(files) == 2, files
