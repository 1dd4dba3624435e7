"""The jobs' rules, checked on a ledger's rows (ledger.rows): their one definition.
``shmwheel journal check`` runs ``audit`` in one process; the PySpark audit
(shmwheel/pipeline/jobs.py) runs ``check`` in its tasks on each job's rows, in the same
order (tests/test_job_audit.py runs both on the same ledgers). A job is keyed by its
ledger (directory) and id; its violations are reported under its SUBMITTED's service.

The rules (``RULES``; docs/journal.md, "The jobs' rules", says the same for users), each
judged per job of a service, on the records retained (compact.py):

- ``attempt outcomes``: an attempt has exactly one outcome: two ENDED records; an ENDED
  with no STARTED; a job DONE "ok" or "error" with an attempt STARTED and never ENDED;
- ``job outcomes``: a job with two DONE records;
- ``back-off early``: attempt k+1 began before attempt k's recorded back-off end, or
  before ``ended + min(max_backoff, backoff * factor**(k-1)) * (1 - jitter)`` (the Retry
  docs' bound), or with no back-off recorded (attempt k was not retried); attempt 1
  before the job's delay;
- ``beyond the policy``: an attempt numbered past the policy's ``attempts``;
- ``stopped late``: a timed-out attempt ended later than its time limit plus the pool's
  grace plus ``ledger.LATE_S`` after it began;
- ``never submitted``: records of a job without its SUBMITTED (records lost: a job is
  retained whole or not at all), whose attempts the rules above cannot judge.

Times are compared within one boot only (a row's ``boot_id``; "" for a format 1 file:
taken as the same boot). An attempt's start is its first STARTED for the back-off rule
(the earliest it was sent) and its ENDED's ``began_us`` (else its last STARTED) for the
time limit (the worker began it then); of two ENDED records of an attempt (a violation
already), the earlier is the one judged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import ledger as L

RULES = ("attempt outcomes", "job outcomes", "back-off early", "beyond the policy",
         "stopped late", "never submitted")  # fmt: skip
TOLERANCE_US = 1  # times are recorded in whole us (floored)

Row = dict[str, Any]


def pause_s(sub: Row, attempt: int) -> float:
    """The Retry docs' ``min(max_backoff, backoff * factor**(attempt-1))``."""
    try:
        d = sub["backoff"] * sub["factor"] ** (attempt - 1)
    except OverflowError:
        d = float("inf")
    return float(min(sub["max_backoff"], d))


def _t(r: Row) -> int:
    return int(r["t_us"])


def same_boot(a: str | None, b: str | None) -> bool:
    return not a or not b or a == b


def check_job(job: int, recs: list[Row]) -> list[tuple[str, int, str]]:
    """(rule, job, detail) of each rule `job`'s rows break."""
    bad: list[tuple[str, int, str]] = []
    sub = next((r for r in recs if r["kind"] == "submitted"), None)
    done = [r for r in recs if r["kind"] == "done"]
    started: dict[int, list[Row]] = {}
    ended: dict[int, list[Row]] = {}
    for r in recs:
        if r["kind"] in ("started", "ended"):
            (started if r["kind"] == "started" else ended).setdefault(r["attempt"], []).append(r)
    if len(done) > 1:
        bad.append(("job outcomes", job, f"{len(done)} DONE records"))
    for a in sorted(set(started) | set(ended)):
        e = ended.get(a, [])
        if len(e) > 1:
            bad.append(("attempt outcomes", job, f"attempt {a}: {len(e)} outcomes"))
        elif e and a not in started:
            bad.append(("attempt outcomes", job, f"attempt {a}: an outcome, never started"))
        elif not e and any(d["how"] in ("ok", "error") for d in done):
            bad.append(("attempt outcomes", job, f"attempt {a}: no outcome, job done"))
    if sub is None:
        bad.append(("never submitted", job, f"{len(recs)} records, no SUBMITTED"))
        return bad
    for a, s in sorted(started.items()):
        first = min(s, key=_t)
        if a > sub["most"]:
            bad.append(("beyond the policy", job, f"attempt {a} of {sub['most']}"))
        if a == 1:
            due, low, boot = sub["next_due_ms"], 0.0, sub["boot_id"]
        elif a - 1 in ended:
            prev = min(ended[a - 1], key=_t)
            due, boot = prev["next_due_ms"], prev["boot_id"]
            low = 0.0
            if due < 0:
                bad.append(("back-off early", job, f"attempt {a}: attempt {a - 1} not retried"))
                continue
            if sub["backoff"] is not None:
                low = prev["t_us"] + pause_s(sub, a - 1) * (1 - sub["jitter"]) * 1e6
        else:
            continue
        if not same_boot(boot, first["boot_id"]):
            continue
        if first["t_us"] + TOLERANCE_US < max(due * 1000, low):
            bad.append(("back-off early", job, f"attempt {a} began at {first['t_us']} us, "
                        f"due at {max(due * 1000, low):.0f} us"))  # fmt: skip
    if sub["limit_s"]:
        for a, e in sorted(ended.items()):
            end = min(e, key=_t)
            if end["how"] != "timeout" or a not in started:
                continue
            last = max(started[a], key=_t)
            began = end["began_us"] if end["began_us"] >= 0 else last["t_us"]
            bound = (sub["limit_s"] + sub["grace_s"] + L.LATE_S) * 1e6
            if same_boot(last["boot_id"], end["boot_id"]) and end["t_us"] - began > bound:
                bad.append(("stopped late", job, f"attempt {a} stopped "
                            f"{(end['t_us'] - began) / 1e6:.3f} s after it began"))  # fmt: skip
    return bad


def check(rows: Iterable[tuple[Any, ...]]) -> list[tuple[str, str, int, str]]:
    """(service, rule, job, detail) of every violation in `rows` (ledger.COLUMNS), a job
    keyed by (ledger, id)."""
    names = [c for c, _ in L.COLUMNS]
    by_job: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        r = dict(zip(names, row, strict=True))
        by_job.setdefault((r["ledger"], r["job"]), []).append(r)
    out = []
    for (_, job), recs in sorted(by_job.items()):
        svc = service_of(recs)
        out += [(svc, rule, j, detail) for rule, j, detail in check_job(job, recs)]
    return out


def service_of(recs: list[Row]) -> str:
    """The service a job's violations are reported under: its SUBMITTED's run's name."""
    return str(next((r["service"] for r in recs if r["kind"] == "submitted"), recs[0]["service"]))


def audit(journal: str) -> list[str]:
    """The violations of the ledger retained under journal directory `journal`, as lines."""
    return [f"job {job}: {rule}: {detail}" for _, rule, job, detail in
            check(L.ledger_rows(journal))]  # fmt: skip
