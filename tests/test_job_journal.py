"""Journaled jobs (service/jobs/ledger/): a whole-service SIGKILL with jobs pending,
running and backing off loses none of them; the next start on the journal re-arms them;
an attempt running at the crash counts as crashed and is retried as its policy allows; no
attempt whose outcome was recorded runs again, none starts early, and the ledger's audit
is clean."""

from __future__ import annotations

from journaled_jobs import sigkill_and_recover

from shmwheel.service.jobs import ledger
from shmwheel.service.jobs.ledger import audit


def test_a_whole_service_sigkill_loses_no_job_and_reruns_only_crashed_attempts(tmp_path, cli):
    journal = sigkill_and_recover(tmp_path)
    assert audit.audit(str(journal)) == []
    code, out, _ = cli("journal", "check", str(journal))
    assert code == 0 and "jobs: 0 a start would re-arm; the ledger's audit: clean" in out


def test_the_audit_finds_a_second_outcome_and_an_early_attempt(tmp_path):
    journal = tmp_path / "journal"
    lg = ledger.Ledger(str(journal), 1)
    lg.record(ledger.SUBMITTED, 1, 0, "f", b"", b"", None, None, 2, 0, 1.0)
    lg.record(ledger.STARTED, 1, 1, 10)
    lg.record(ledger.ENDED, 1, 1, "raised", 20, 5_000)  # back off until 5,000 ms
    lg.record(ledger.STARTED, 1, 2, 4_000_000)  # 4,000 ms: early
    lg.record(ledger.ENDED, 1, 2, "ok", 4_000_100, -1)
    lg.record(ledger.ENDED, 1, 2, "ok", 4_000_200, -1)
    lg.record(ledger.STARTED, 1, 3, 9_000_000)  # beyond 2 attempts
    lg.record(ledger.DONE, 1, "ok", 4_000_300)
    lg.record(ledger.DONE, 1, "ok", 4_000_400)
    lg.close()
    bad = audit.audit(str(journal))
    assert any("back-off early: attempt 2" in b for b in bad)
    assert any("attempt outcomes: attempt 2: 2 outcomes" in b for b in bad)
    assert any("beyond the policy" in b for b in bad)
    assert any("job outcomes" in b for b in bad)
