"""Appending to a journal: one ``SegmentWriter`` per writer process (the coordinator, the
reaper, a recovery), each with its own files, so writers never lock one another.

A writer fills a ``_native.JournalBuffer`` during a batch (the native state machine does,
see shmwheel/native/slots.h) and calls ``flush`` before the batch's effects become
irreversible: one write(2) of the whole buffer, then, by the fsync policy, nothing
(``none``), an fdatasync by a background thread every ``fsync_ms`` (``interval``, the
default) or an fdatasync now (``always``). A segment that reaches ``segment_bytes`` is
synced, closed and followed by a new one; a batch is never split across two files.

The directory is claimed by the service that writes it with ``claim``: an exclusive
``flock`` on ``DIR/LOCK``, inherited by its service processes, so the lock is free only
when every process of that service is gone.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import _native as N
from ..errors import ShmwheelError
from ..segment.layout import ServiceConfig, ServiceMemory
from . import format as F

log = logging.getLogger("shmwheel.journal")

FSYNC_POLICIES = ("none", "interval", "always")
LOCK_NAME = "LOCK"
SALVAGE_HOLDER = "salvage of "  # how a salvage names itself in the lock file
SALVAGE_WAIT_S = 10.0


class JournalInUse(ShmwheelError):
    """Another live service is writing this journal directory."""


@dataclass(frozen=True)
class JournalOptions:
    """How a service journals (recorded in its segment, read by its writer processes)."""

    directory: str
    fsync: str = "interval"
    fsync_ms: int = 100
    segment_bytes: int = 64 << 20
    keep_hours: float = 0.0
    epoch: int = 1

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(
                f"journal_fsync must be one of {', '.join(FSYNC_POLICIES)}, got {self.fsync!r}"
            )
        for what, v, low in (
            ("journal_fsync_ms", self.fsync_ms, 1),
            ("journal_segment_bytes", self.segment_bytes, 1 << 16),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{what} must be an integer >= {low}, got {v!r}")
        if not isinstance(self.keep_hours, (int, float)) or not self.keep_hours >= 0:
            raise ValueError(f"journal_keep_hours must be a number >= 0, got {self.keep_hours!r}")


def claim(directory: str, service: str) -> int:
    """Create the journal directory if need be and lock it for `service`; returns the
    lock's file descriptor (keep it open, pass it to the service processes). Raises
    JournalInUse naming the service that holds it."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
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


class SegmentWriter:
    """Appends framed records to this process's segment files."""

    def __init__(
        self,
        opts: JournalOptions,
        role: str,
        service: str,
        tasks: list[str],
        tick_ms: int,
        next_gen: int = 0,
        counters: np.ndarray | None = None,
        seq_source: Callable[[], int] | None = None,
        on_open: Callable[[int, str], None] | None = None,
    ) -> None:
        """`seq_source` numbers the segments (default 1, 2, ... for this writer; the
        coordinator's come from the segment header, so that a restarted coordinator goes
        on counting); `on_open(seq, path)` is told of each new segment."""
        if role not in F.ROLE_CODES:
            raise ValueError(f"unknown journal writer role {role!r}")
        self.opts = opts
        self.role = role
        self.service = service
        self.tasks = list(tasks)
        self.tick_ms = tick_ms
        self.next_gen = next_gen
        self.counters = counters  # this writer's counter row (bytes, syncs), if any
        self.buffer = N.JournalBuffer()
        self._lock = threading.Lock()  # the file descriptor against the sync thread
        self._fd = -1
        self._size = 0
        self._seq = 0
        self._seq_source = seq_source
        self._on_open = on_open
        self.seq = 0  # the current segment's number
        self._dirty = False
        self.path = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open()
        if opts.fsync == "interval":
            self._thread = threading.Thread(
                target=self._sync_loop, daemon=True, name="shmwheel-journal-sync"
            )
            self._thread.start()

    # -- files ----------------------------------------------------------------------
    def _open(self) -> None:
        mono_us, wall_us = F.clock_pair_us()
        name = F.SegmentName(self.opts.epoch, wall_us, self.role, os.getpid())
        self.path = os.path.join(self.opts.directory, name.filename())
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._seq += 1
        if self._seq_source is not None:
            self._seq = self._seq_source()
        header = N.JournalBuffer()
        header.append(
            F.body(
                F.HEADER,
                F.VERSION,
                F.ROLE_CODES[self.role],
                os.getpid(),
                self.service,
                self.opts.epoch,
                self._seq,
                mono_us,
                wall_us,
                F.boot_id(),
                self.tasks,
                self.next_gen,
                self.tick_ms,
            )
        )
        data = F.MAGIC + bytes(memoryview(header))
        _write_all(fd, data)
        if self.opts.fsync != "none":  # the file and its name survive a host crash
            os.fdatasync(fd)
            _sync_dir(self.opts.directory)
        self._fd, self._size, self.seq = fd, len(data), self._seq
        if self._on_open is not None:
            self._on_open(self._seq, self.path)

    def _rotate(self) -> None:
        old = self._fd
        if self.opts.fsync != "none":
            os.fdatasync(old)
        os.close(old)
        self._open()

    # -- writing --------------------------------------------------------------------
    def flush(self) -> int:
        """Write what the buffer holds (one write), sync by the policy, clear it; returns
        the bytes written."""
        buf = self.buffer
        n = len(buf)
        if n == 0:
            return 0
        buf.check()
        with self._lock:
            _write_all(self._fd, buf)
            self._size += n
            self._dirty = True
            if self.opts.fsync == "always":
                os.fdatasync(self._fd)
                self._dirty = False
                self._count(N.C_JOURNAL_SYNCS, 1)
            if self._size >= self.opts.segment_bytes:
                self._rotate()
        buf.clear()
        self._count(N.C_JOURNAL_BYTES, n)
        return n

    def append(self, body: bytes) -> None:
        """Add one record encoded by format.body (flushed by the next flush)."""
        self.buffer.append(body)

    def _count(self, word: int, n: int) -> None:
        if self.counters is not None:
            self.counters[word] += n

    def sync(self) -> None:
        with self._lock:
            if self._fd >= 0 and self._dirty:
                os.fdatasync(self._fd)
                self._dirty = False
                self._count(N.C_JOURNAL_SYNCS, 1)

    def _sync_loop(self) -> None:
        while not self._stop.wait(self.opts.fsync_ms / 1000):
            try:
                self.sync()
            except OSError as e:  # a full or failing disk: say so, keep trying
                log.error("journal %s: fdatasync failed: %s", self.path, e)

    def close(self) -> None:
        """Flush, sync (unless the policy is none) and close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._fd < 0:
            return
        self.flush()
        if self.opts.fsync != "none":
            self.sync()
        with self._lock:
            os.close(self._fd)
            self._fd = -1


def _write_all(fd: int, data: bytes | N.JournalBuffer) -> None:
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view) :]


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def service_writer(
    mem: ServiceMemory,
    role: str,
    row: int,
    seq_source: Callable[[], int] | None = None,
    on_open: Callable[[int, str], None] | None = None,
) -> SegmentWriter | None:
    """The writer of a service process (coordinator, reaper) attached to `mem`, with its
    buffer set on the process's tables; None when the service has no journal."""
    opts = options_of(mem.config)
    if opts is None:
        return None
    w = SegmentWriter(
        opts,
        role,
        mem.service,
        list(mem.task_names),
        mem.config.tick_ms,
        counters=mem.counters[row],
        seq_source=seq_source,
        on_open=on_open,
    )
    mem.bind_tables().set_journal(w.buffer)
    return w
