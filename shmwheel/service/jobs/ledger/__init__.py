"""The jobs' ledger: what a service's job pool journals, so that a whole-service crash or a
stop loses no job it accepted, and what the next start re-arms. Runs in the process that
owns the pool (the supervisor's), on the pool's manager thread and, for ``submitted`` and
``done`` records, on callers' threads under the pool's lock. This module owns the ledger's
encoding: the writer (``Ledger``), the reader (``read``, ``rows``: the one decoder, which
the Python audit, the PySpark audit and the compaction all use) and ``pending``. Beside it
in this package: the retention (``compact.py``) and the jobs' rules (``audit.py``).

Where: ``DIR/jobs/`` of the service's journal directory (``TimerService(journal=DIR,
job_workers=N)``), files ``ledger-EPOCH-PART.shwj`` (format 1 wrote one file a run,
``ledger-EPOCH.shwj``, read as part 0), in order of (epoch, part); each record framed as
version 2 of the journal framed its own (journal/format.py: length, zlib's CRC-32, a
msgpack body; ``FRAMING``: a ledger file has no version byte before its first frame, so
every format of the ledger keeps that framing) and appended by one writer. The directory
and every file must pass the trust rules (segment/trust.py) before anything is read.

Records (a msgpack array, its kind first):

* ``[HEADER, format, service, epoch, part, boot_id, top, compacted]``: a file's first
  record (format 2; a format 1 file has none). ``top`` the highest job id recorded before
  the file (ids continue above it when every earlier file is gone); ``compacted``: the file
  replaces every ledger file that sorts before it (compact.py). A HEADER later in a file
  (a compacted one) gives the run (service, epoch, boot) of the records after it.
* ``[SUBMITTED, id, t_us, name, fn, args, limit_s, retry, max_attempts, due_ms, grace_s,
  policy]``: a job accepted (``retry`` the pickled policy or None; ``due_ms`` the monotonic
  ms before which its first attempt may not start, 0 for at once; ``policy`` the retry's
  ``[backoff, factor, max_backoff, jitter]`` or None, format 2);
* ``[STARTED, id, attempt, t_us]``: an attempt sent to a worker, written before it is sent
  (an attempt sent in a batch to a worker that died before starting it is sent again: a
  second STARTED of the same attempt);
* ``[ENDED, id, attempt, how, t_us, next_due_ms, began_us]``: an attempt's outcome (``how``
  "ok", "raised", "timeout", "died", "stopped", "failed", "crashed"); ``next_due_ms`` the
  back-off's end when the job is retried, else -1; ``began_us`` when the attempt began to
  run on its worker as the pool saw it, -1 unknown (format 2);
* ``[DONE, id, outcome, t_us]``: the job's outcome ("ok", "error", "cancelled").

Times are monotonic: comparable within one boot (the HEADER's ``boot_id``; a format 1
file's is unknown, taken as the same boot).

Exactly once per attempt: an attempt whose ENDED is recorded never runs again. An attempt
STARTED without ENDED at a crash counts as crashed: the next start retries it when its
policy allows, else records the job DONE "error". A job with no DONE is re-armed: queued,
or backing off until its ``next_due_ms`` (monotonic: kept across a restart on the same
boot; after a reboot it is due at once). Records reach the file (``write``) before the
attempt they describe is sent; ``fdatasync`` every ``SYNC_S`` (what a process crash cannot
lose, a host crash can: within that interval). Retention (compact.py): past ``max_bytes``
the file is closed, the next part opened, and every earlier file compacted into one that
keeps the whole record of each job not yet settled.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ....journal import format as F
from ....segment import trust
from ..job import Job

log = logging.getLogger("shmwheel.jobs")

FORMAT = 2
FRAMING = 2  # the journal format version whose framing every ledger file keeps (module doc)
HEADER, SUBMITTED, STARTED, ENDED, DONE = 0, 1, 2, 3, 4
KINDS = {SUBMITTED: "submitted", STARTED: "started", ENDED: "ended", DONE: "done"}
SYNC_S = 0.1
LATE_S = 1.0  # the audit's slack past a time limit and its grace: the machine's scheduling
DEFAULT_MAX_BYTES = 16 << 20  # a ledger file's size before it is rotated (0: never)
_FILE = re.compile(r"^ledger-(\d{6})(?:-(\d{6}))?\.shwj$")


def now_us() -> int:
    return time.monotonic_ns() // 1000


def directory_of(journal: str) -> str:
    return os.path.join(journal, "jobs")


def file_name(epoch: int, part: int) -> str:
    return f"ledger-{epoch:06d}-{part:06d}.shwj"


def order(path: str) -> tuple[int, int]:
    """A ledger file's (epoch, part) from its name (a format 1 name is part 0)."""
    m = _FILE.match(os.path.basename(path))
    if m is None:
        raise ValueError(f"{path!r} is not a jobs' ledger file")
    return int(m.group(1)), int(m.group(2) or 0)


def ledger_files(directory: str) -> list[str]:
    """Every ledger file in `directory`, in order (epoch, part); each checked by trust.py."""
    if not os.path.isdir(directory):
        return []
    trust.check(directory, trust.DIRECTORY, "the jobs' ledger directory")
    paths = sorted((os.path.join(directory, n) for n in os.listdir(directory) if _FILE.match(n)),
                   key=order)  # fmt: skip
    trust.check_files(paths, "the jobs' ledger file")
    return paths


def read(path: str, most: int = -1) -> list[list[Any]]:
    """The intact records of one ledger file (a torn last record is left out); the first
    `most` only when it is >= 0."""
    with open(path, "rb") as f:
        data = f.read() if most < 0 else f.read(F.FRAME_BYTES + (1 << 16))
    records: list[list[Any]] = []
    at, end = 0, F.intact_prefix(data, FRAMING)
    while at < end and len(records) != most:
        n = int.from_bytes(data[at : at + 4], "little")
        records.append(msgpack.unpackb(data[at + F.FRAME_BYTES : at + F.FRAME_BYTES + n]))
        at += F.FRAME_BYTES + n
    return records


def is_compacted(records: list[list[Any]]) -> bool:
    return bool(records) and records[0][0] == HEADER and bool(records[0][7])


def retained_paths(directory: str) -> list[str]:
    """The files the ledger is made of: the newest compacted file and the files after it
    (what it replaced may linger after a crash in a compaction: left out), or every file
    when none is compacted. Only each file's first record is read."""
    paths = ledger_files(directory)
    start = max((i for i, p in enumerate(paths) if is_compacted(read(p, 1))), default=0)
    return paths[start:]


def retained(directory: str) -> list[tuple[str, list[list[Any]]]]:
    """``retained_paths`` with their records."""
    return [(p, read(p)) for p in retained_paths(directory)]


@dataclass
class Context:
    """The run a record belongs to (its file's, or the HEADER before it)."""

    service: str = ""
    epoch: int = 0
    boot_id: str = ""


#: a decoded record (``rows``): (column, Arrow type name) in order; None where it does not
#: apply to the kind. ``service``: the name of the run that wrote it; ``next_due_ms``: an
#: ENDED's back-off end, a SUBMITTED's first due.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("ledger", "string"), ("service", "string"), ("epoch", "int64"), ("boot_id", "string"),
    ("file", "string"),
    ("kind", "string"), ("job", "int64"), ("attempt", "int64"), ("t_us", "int64"),
    ("how", "string"), ("next_due_ms", "int64"), ("began_us", "int64"), ("name", "string"),
    ("limit_s", "float64"), ("grace_s", "float64"), ("most", "int64"), ("backoff", "float64"),
    ("factor", "float64"), ("max_backoff", "float64"), ("jitter", "float64"),
)  # fmt: skip


def rows(path: str, records: list[list[Any]], service: str = "") -> Iterator[tuple[Any, ...]]:
    """One tuple (``COLUMNS``) per job record of one file; `service` names the runs of a
    format 1 file (no HEADER). A job is keyed by its ledger (the directory: a service
    restarted under another name keeps its ledger) and its id."""
    ctx, where = Context(service), os.path.dirname(os.path.abspath(path))
    for rec in records:
        kind = rec[0]
        if kind == HEADER:
            ctx = Context(str(rec[2]), int(rec[3]), str(rec[5]))
            continue
        base = (where, ctx.service, ctx.epoch, ctx.boot_id, path, KINDS.get(kind, str(kind)),
                rec[1])  # fmt: skip
        if kind == SUBMITTED:
            pol = rec[11] if len(rec) > 11 and rec[11] is not None else [None] * 4
            yield (*base, None, rec[2], None, rec[9], None, rec[3], rec[6], rec[10], rec[8],
                   *pol)  # fmt: skip
        elif kind == STARTED:
            yield (*base, rec[2], rec[3], *[None] * 11)
        elif kind == ENDED:
            began = rec[6] if len(rec) > 6 else -1
            yield (*base, rec[2], rec[4], rec[3], rec[5], began, *[None] * 8)
        elif kind == DONE:
            yield (*base, None, rec[3], rec[2], *[None] * 10)


def ledger_rows(journal: str, service: str = "") -> list[tuple[Any, ...]]:
    """Every row (``rows``) of the ledger retained under journal directory `journal`."""
    return [r for p, recs in retained(directory_of(journal)) for r in rows(p, recs, service)]


class Ledger:
    """This run's ledger (``epoch``; `top`: the highest job id of earlier runs), appended
    to by ``record`` and written by ``flush``; callers hold the pool's lock. Past
    `max_bytes` (0: never) a file is closed, the next part opened and the earlier files
    compacted (``compactor``: compact.compact, else they stay)."""

    def __init__(self, journal: str, epoch: int, service: str = "", top: int = 0,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 compactor: Callable[[Ledger, int], object] | None = None) -> None:  # fmt: skip
        self.directory = directory_of(journal)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        trust.check(self.directory, trust.DIRECTORY, "the jobs' ledger directory")
        self.epoch, self.service, self.top, self.max_bytes = epoch, service, top, max_bytes
        self.compactor = compactor  # compact.compact: what rotate() runs on earlier files
        self.boot = F.boot_id()
        self.running: set[int] = set()  # jobs with an attempt STARTED and not ENDED
        self.buf = bytearray()
        self._synced = time.monotonic()
        self.fd, self.size, self.part = -1, 0, -1
        self._open(0)

    def _open(self, part: int) -> None:
        self.part = part
        self.path = os.path.join(self.directory, file_name(self.epoch, part))
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(self.path, flags, 0o600)
        st = os.fstat(self.fd)
        trust.check(self.path, trust.REGULAR_FILE, "the jobs' ledger file", st)
        self.size = st.st_size
        if not self.size:
            self.record(*self.header(part, False))

    def header(self, part: int, compacted: bool) -> list[Any]:
        return [HEADER, FORMAT, self.service, self.epoch, part, self.boot, self.top, compacted]

    def record(self, *fields: Any) -> None:
        kind = fields[0]
        if kind == STARTED:
            self.running.add(fields[1])
        elif kind == ENDED:
            self.running.discard(fields[1])
        elif kind == SUBMITTED:
            self.top = max(self.top, fields[1])
        self.buf += F.frame(msgpack.packb(list(fields)), FRAMING)

    def submitted(self, job: Job, due_ms: int, grace: float) -> None:
        r = job.retry
        retry = pickle.dumps(r) if r is not None else None
        most = r.attempts if r is not None else 1
        policy = [r.backoff, r.factor, r.max_backoff, r.jitter] if r is not None else None
        self.record(SUBMITTED, job.id, now_us(), job.name, job._fn, job._blob,
                    job.time_limit, retry, most, due_ms, grace, policy)  # fmt: skip

    def flush(self) -> None:
        """Write what is recorded (and sync, once per SYNC_S); a failure is logged and
        the bytes are kept for the next flush (the pool runs on: a job ledger is not
        worth stopping jobs for). Past ``max_bytes``, rotate (``rotate``)."""
        if self.buf:
            try:
                n = os.write(self.fd, self.buf)
                del self.buf[:n]
                self.size += n
            except OSError as e:
                log.error("the jobs' ledger %s cannot be written (%s): holding %d bytes",
                          self.path, e, len(self.buf))  # fmt: skip
                return
        if self.max_bytes and self.size >= self.max_bytes and not self.buf:
            self.rotate()
        elif time.monotonic() - self._synced >= SYNC_S:
            self._synced = time.monotonic()
            try:
                os.fdatasync(self.fd)
            except OSError as e:
                log.error("the jobs' ledger %s cannot be synced: %s", self.path, e)

    def rotate(self) -> None:
        """Close this file, open part + 2, and compact every earlier file into part + 1
        (``compactor``); a compaction that fails is logged and tried again at the next
        rotation (its earlier files stay: nothing is lost)."""
        self._close_fd()
        done = self.part
        self._open(done + 2)
        if self.compactor is None:
            return
        try:
            self.compactor(self, done + 1)
        except OSError as e:
            log.error("the jobs' ledger in %s cannot be compacted: %s", self.directory, e)

    def _close_fd(self) -> None:
        try:
            os.fdatasync(self.fd)
        except OSError:
            pass
        os.close(self.fd)
        self._synced = time.monotonic()

    def close(self) -> None:
        self.flush()
        self._close_fd()


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
    for _, records in retained(directory_of(journal)):
        for rec in records:
            kind, job_id = rec[0], rec[1]
            if kind == HEADER:
                top = max(top, int(rec[6]))
                continue
            top = max(top, job_id)
            if kind == SUBMITTED:
                name, fn, args, limit, retry, due = rec[3], rec[4], rec[5], rec[6], rec[7], rec[9]
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
