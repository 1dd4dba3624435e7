"""The jobs' ledger: what a service's job pool journals, so that a whole-service crash or a
stop loses no job it accepted, and what the next start re-arms. Runs in the process that
owns the pool (the supervisor's), on the pool's manager thread and, for ``submitted`` and
``done`` records, on callers' threads under the pool's lock.

Where: ``DIR/jobs/`` of the service's journal directory (``TimerService(journal=DIR,
job_workers=N)``), one file per service run, ``ledger-EPOCH.shwj``, each record framed as
the journal's version 2 framed its own (journal/format.py: length, zlib's CRC-32, a
msgpack body: the ledger's files have no version byte, so they keep that framing) and
appended by one writer. The directory and every file must pass the trust rules
(segment/trust.py) before anything is read.

Records (a msgpack array, its kind first):

* ``[SUBMITTED, id, t_us, name, fn, args, limit_s, retry, max_attempts, due_ms, grace_s]``:
  a job accepted (``retry`` the pickled policy or None; ``due_ms`` the monotonic ms before
  which its first attempt may not start, 0 for at once);
* ``[STARTED, id, attempt, t_us]``: an attempt sent to a worker, written before it is sent;
* ``[ENDED, id, attempt, how, t_us, next_due_ms]``: an attempt's outcome (``how`` "ok",
  "raised", "timeout", "died", "stopped"); ``next_due_ms`` the back-off's end when the job
  is retried, else -1;
* ``[DONE, id, outcome, t_us]``: the job's outcome ("ok", "error", "cancelled").

Exactly once per attempt: an attempt whose ENDED is recorded never runs again. An attempt
STARTED without ENDED at a crash counts as crashed: the next start retries it when its
policy allows, else records the job DONE "error". A job with no DONE is re-armed: queued,
or backing off until its ``next_due_ms`` (monotonic: kept across a restart on the same
boot; after a reboot it is due at once). Records reach the file (``write``) before the
attempt they describe is sent; ``fdatasync`` every ``SYNC_S`` (what a process crash cannot
lose, a host crash can: within that interval).
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ...journal import format as F
from ...segment import trust
from .job import Job

log = logging.getLogger("shmwheel.jobs")

SUBMITTED, STARTED, ENDED, DONE = 1, 2, 3, 4
SYNC_S = 0.1
FRAMING = 2  # the journal format version whose framing the ledger keeps (module doc)
_FILE = re.compile(r"^ledger-(\d{6})\.shwj$")


def now_us() -> int:
    return time.monotonic_ns() // 1000


def directory_of(journal: str) -> str:
    return os.path.join(journal, "jobs")


def ledger_files(directory: str) -> list[str]:
    """The ledger's files in `directory`, oldest run first; each checked by trust.py."""
    if not os.path.isdir(directory):
        return []
    trust.check(directory, trust.DIRECTORY, "the jobs' ledger directory")
    names = sorted(n for n in os.listdir(directory) if _FILE.match(n))
    paths = [os.path.join(directory, n) for n in names]
    trust.check_files(paths, "the jobs' ledger file")
    return paths


def read(path: str) -> list[list[Any]]:
    """The intact records of one ledger file (a torn last record is left out)."""
    with open(path, "rb") as f:
        data = f.read()
    records, at, end = [], 0, F.intact_prefix(data, FRAMING)
    while at < end:
        n = int.from_bytes(data[at : at + 4], "little")
        records.append(msgpack.unpackb(data[at + F.FRAME_BYTES : at + F.FRAME_BYTES + n]))
        at += F.FRAME_BYTES + n
    return records


class Ledger:
    """This run's ledger file (``epoch``), appended to by ``record`` and written by
    ``flush``; callers hold the pool's lock."""

    def __init__(self, journal: str, epoch: int) -> None:
        self.directory = directory_of(journal)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        trust.check(self.directory, trust.DIRECTORY, "the jobs' ledger directory")
        self.path = os.path.join(self.directory, f"ledger-{epoch:06d}.shwj")
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(self.path, flags, 0o600)
        trust.check(self.path, trust.REGULAR_FILE, "the jobs' ledger file", os.fstat(self.fd))
        self.buf = bytearray()
        self._synced = time.monotonic()

    def record(self, *fields: Any) -> None:
        self.buf += F.frame(msgpack.packb(list(fields)), FRAMING)

    def submitted(self, job: Job, due_ms: int, grace: float) -> None:
        retry = pickle.dumps(job.retry) if job.retry is not None else None
        most = job.retry.attempts if job.retry is not None else 1
        self.record(SUBMITTED, job.id, now_us(), job.name, job._fn, job._blob,
                    job.time_limit, retry, most, due_ms, grace)  # fmt: skip

    def flush(self) -> None:
        """Write what is recorded (and sync, once per SYNC_S); a failure is logged and
        the bytes are kept for the next flush (the pool runs on: a job ledger is not
        worth stopping jobs for)."""
        if self.buf:
            try:
                n = os.write(self.fd, self.buf)
                del self.buf[:n]
            except OSError as e:
                log.error("the jobs' ledger %s cannot be written (%s): holding %d bytes",
                          self.path, e, len(self.buf))  # fmt: skip
                return
        if time.monotonic() - self._synced >= SYNC_S:
            self._synced = time.monotonic()
            try:
                os.fdatasync(self.fd)
            except OSError as e:
                log.error("the jobs' ledger %s cannot be synced: %s", self.path, e)

    def close(self) -> None:
        self.flush()
        try:
            os.fdatasync(self.fd)
        except OSError:
            pass
        os.close(self.fd)


@dataclass
class Pending:
    """A job the ledger has no DONE for: what a start re-arms."""

    id: int
    name: str
    fn: bytes
    args: bytes
    limit: float | None
    retry: bytes | None
    due_ms: int  # monotonic ms: not before (0: at once)
    attempts: int  # attempts STARTED so far
    crashed: bool  # its last attempt STARTED with no ENDED
    history: list[list[Any]] = field(default_factory=list)


def pending(journal: str) -> tuple[list[Pending], int]:
    """Every job of the ledger with no DONE record, and the highest job id recorded."""
    jobs: dict[int, Pending] = {}
    top = 0
    for path in ledger_files(directory_of(journal)):
        for rec in read(path):
            kind, job_id = rec[0], rec[1]
            top = max(top, job_id)
            if kind == SUBMITTED:
                _, _, _, name, fn, args, limit, retry, _, due, _ = rec
                jobs[job_id] = Pending(job_id, name, fn, args, limit, retry, due, 0, False)
            elif job_id not in jobs:
                continue
            elif kind == STARTED:
                p = jobs[job_id]
                p.attempts, p.crashed = rec[2], True
            elif kind == ENDED:
                p = jobs[job_id]
                p.crashed = False
                p.due_ms = rec[5] if rec[5] >= 0 else 0
            elif kind == DONE:
                del jobs[job_id]
    return sorted(jobs.values(), key=lambda p: p.id), top


def audit(journal: str) -> list[str]:
    """The ledger's violations of the jobs' rules, across every run it holds: an attempt
    with two outcomes, an attempt past the policy's, an attempt started before its
    back-off ended, a job with two outcomes, a time limit stopped later than its limit
    plus the grace plus `late_s` (one second: the machine's scheduling)."""
    late_s = 1.0
    bad: list[str] = []
    seen: dict[int, dict[str, Any]] = {}
    for path in ledger_files(directory_of(journal)):
        for rec in read(path):
            kind, job_id = rec[0], rec[1]
            j = seen.setdefault(job_id, {"ended": {}, "started": {}, "done": 0, "most": 1,
                                         "due": 0, "limit": None, "grace": 0.0})  # fmt: skip
            if kind == SUBMITTED:
                j.update(most=rec[8], due=rec[9], limit=rec[6], grace=rec[10])
            elif kind == STARTED:
                attempt, t_us = rec[2], rec[3]
                if attempt > j["most"]:
                    bad.append(f"job {job_id}: attempt {attempt} beyond the policy's {j['most']}")
                if j["due"] and t_us < j["due"] * 1000:
                    bad.append(f"job {job_id}: attempt {attempt} started before its back-off ended")
                j["started"][attempt] = t_us
            elif kind == ENDED:
                attempt, how, t_us, nxt = rec[2], rec[3], rec[4], rec[5]
                if attempt in j["ended"]:
                    bad.append(f"job {job_id}: attempt {attempt} has two outcomes")
                j["ended"][attempt] = how
                j["due"] = nxt if nxt >= 0 else 0
                began = j["started"].get(attempt)
                if how == "timeout" and j["limit"] and began is not None:
                    bound = (j["limit"] + j["grace"] + late_s) * 1e6
                    if t_us - began > bound:
                        bad.append(f"job {job_id}: attempt {attempt} stopped "
                                   f"{(t_us - began) / 1e6:.3f} s after it started")  # fmt: skip
            elif kind == DONE:
                j["done"] += 1
                if j["done"] > 1:
                    bad.append(f"job {job_id}: two outcomes")
    return bad
