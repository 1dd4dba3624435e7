"""A journal directory: the options a service journals with, and the directory's lock.

The directory is claimed by the service that writes it with ``claim``: an exclusive
``flock`` on ``DIR/LOCK``, inherited by its service processes, so the lock is free only
when every process of that service is gone.

Trust (``segment/trust.py``'s rules, docs/journal.md): the directory, its ``LOCK`` and
every segment file in it must be this user's and writable by no one else, or
``trusted`` raises ``UntrustedPath`` before anything there is read, written or deleted.
``claim`` asks first; so do salvage, ``shmwheel journal check`` and ``repair``.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass

from ..errors import JournalInUse as JournalInUse  # (defined in errors.py; this path stays)
from ..segment import trust
from ..segment.layout import ServiceConfig
from .format import segment_files

FSYNC_POLICIES = ("none", "interval", "always")
LOCK_NAME = "LOCK"
SALVAGE_HOLDER = "salvage of "  # how a salvage names itself in the lock file
SALVAGE_WAIT_S = 10.0


@dataclass(frozen=True)
class JournalOptions:
    """How a service journals (recorded in its segment, read by its writer processes)."""

    directory: str
    fsync: str = "interval"
    fsync_ms: int = 100
    segment_bytes: int = 64 << 20
    keep_hours: float = 0.0
    epoch: int = 1
    jobs_bytes: int = 16 << 20  # the jobs' ledger's file size before rotation (0: never)

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(
                f"journal_fsync must be one of {', '.join(FSYNC_POLICIES)}, got {self.fsync!r}"
            )
        for what, v, low in (
            ("journal_fsync_ms", self.fsync_ms, 1),
            ("journal_segment_bytes", self.segment_bytes, 1 << 16),
            ("journal_jobs_bytes", self.jobs_bytes, 0),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{what} must be an integer >= {low}, got {v!r}")
        if not isinstance(self.keep_hours, (int, float)) or not self.keep_hours >= 0:
            raise ValueError(f"journal_keep_hours must be a number >= 0, got {self.keep_hours!r}")


def trusted(directory: str) -> None:
    """Refuse, with ``UntrustedPath``, a journal directory that is not safe to use
    (module doc): the directory itself, its LOCK if there is one, each segment file.
    Nothing in it is opened."""
    trust.check(directory, trust.DIRECTORY, "the journal directory")
    lock = os.path.join(directory, LOCK_NAME)
    if os.path.lexists(lock):
        trust.check(lock, trust.REGULAR_FILE, "the journal's lock")
    trust.check_files(segment_files(directory), "the journal segment")


def claim(directory: str, service: str) -> int:
    """Create the journal directory if need be, check it is safe (``trusted``) and lock
    it for `service`; returns the lock's file descriptor (keep it open, pass it to the
    service processes). Raises UntrustedPath (nothing there touched), or JournalInUse
    naming the service that holds it."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    trusted(directory)
    path = os.path.join(directory, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        trust.check(path, trust.REGULAR_FILE, "the journal's lock", os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    start = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            # another service's start salvaging a dead one into this journal holds it
            # for a moment: wait for that (and a little for a holder that has not yet
            # written its name), not for a live service
            waited = time.monotonic() - start
            if waited < (SALVAGE_WAIT_S if holder.startswith(SALVAGE_HOLDER) else 0.5):
                time.sleep(0.01)
                continue
            os.close(fd)
        raise JournalInUse(
            f"journal {directory} is being written by another service "
            f"({holder}): stop it first, or give this service another "
            f"journal directory"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"service {service}, supervisor pid {os.getpid()}\n".encode(), 0)
    return fd


def options_of(cfg: ServiceConfig) -> JournalOptions | None:
    """The journal options a service's config records (None: no journal)."""
    if not cfg.journal_dir:
        return None
    return JournalOptions(
        cfg.journal_dir,
        cfg.journal_fsync,
        cfg.journal_fsync_ms,
        cfg.journal_segment_bytes,
        cfg.journal_keep_hours,
        cfg.journal_epoch,
    )
