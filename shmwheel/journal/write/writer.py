"""Appending to a journal: one ``SegmentWriter`` per writer process (the coordinator, the
reaper, a recovery), each with its own files, so writers never lock one another.

A writer fills a ``_native.JournalBuffer`` during a batch (the native state machine does,
see shmwheel/native/slots.h) and calls ``flush`` before the batch's effects become
irreversible: one write(2) of the whole buffer, then, by the fsync policy, nothing
(``none``), an fdatasync by a background thread every ``fsync_ms`` (``interval``, the
default) or an fdatasync now (``always``). A segment that reaches ``segment_bytes`` ends
with an END record naming its successor and is followed by it; a batch is never split
across two files. Each header names its predecessor (``prev``), so a writer's segments
form a chain that shows a missing one (docs/journal.md, "The chain").

Faults. A service's coordinator and reaper never stop for their disk: when a write, a
sync, a truncation or the creation of a file fails (ENOSPC, EDQUOT, EROFS, EIO, a failed
fsync: any OSError), the writer keeps every byte the disk has not taken in memory (its
*tail*: what failed to write, and after a failed fdatasync what that sync could not
vouch for, read back from the page cache), reports the fault in three words per writer
of the service header (journal/write/faults.py: clients then refuse new timers with
JournalError, stats() and ``shmwheel status`` show it), and every RETRY_S truncates the
file back to its last trusted byte and writes the tail again. Once that succeeds the
fault is over, with nothing lost and no restart. Timers already accepted run on
meanwhile, exactly once and never early: the wheel is in shared memory; only their
durability waits. The tail is bounded by HOLD_BYTES: past it the process takes no new
work (``blocked``) until the disk takes writes again, so a long outage makes timers
late, never lost. A writer without fault words (a recovery's, a salvage's) raises
JournalError instead: the start fails, clearly. Every system call on the files goes
through one seam, ``disk.Disk``, where tests inject faults."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from ... import _native as N
from ...errors import JournalError
from ...segment import contract as C
from ...segment import layout as L
from ...segment.layout import ServiceMemory
from .. import format as F
from ..directory import JournalOptions, options_of
from . import spill
from .disk import Disk
from .faults import FW_ERRNO, FW_HELD, FW_SINCE_MS

log = logging.getLogger("shmwheel.journal")

RETRY_S = 0.2  # how often a writer through a fault tries to write what it holds
ROTATE_RETRY_S = 1.0  # how often a rotation whose new file could not be created retries
HOLD_BYTES = 64 << 20  # the most a writer holds through a fault before it stops taking work


class SegmentWriter:
    """Appends framed records to this process's segment files, and holds them in memory
    through a disk fault (module doc, "Faults")."""

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
        fault_words: np.ndarray | None = None,
        disk: Disk | None = None,
        gen_source: Callable[[], int] | None = None,
    ) -> None:
        """`seq_source` numbers the segments (default 1, 2, ... for this writer; the
        coordinator's come from the segment header, so that a restarted coordinator goes
        on counting); `on_open(seq, path)` is told of each new segment. With
        `fault_words` (a service process's writer: its three fault words of the header) a write
        that fails is held and retried; without, it raises JournalError. `gen_source`
        gives each new header's next_gen (a bound on every id issued before it opened)."""
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
        self.disk = disk if disk is not None else Disk(role)
        self._lock = threading.Lock()  # the file and the tail, against the sync thread
        # Ground rules (under _lock): the current file's first `_size` bytes are written
        # and trusted, its first `_durable` of them on disk as the policy wants (synced;
        # with "none", written). `_tail` holds, in order, every byte that belongs after
        # `_size` and is not known to be there: empty but for a fault (or a new segment's
        # header on its way). With a fault, the file's end past `_size` is unknown: the
        # repair truncates it there and writes the tail. A failed sync moves the bytes it
        # could not vouch for back into the tail (read from the page cache), so nothing is
        # copied on the way to the disk while it works.
        self._fd = -1
        self._size = 0
        self._durable = 0
        self._tail = bytearray()
        self._dirty = False  # written and not yet synced
        self._file_gen = 0  # +1 at a new segment, a truncation, bytes back to the tail (sync)
        self._seq = 0
        self._seq_source = seq_source
        self._on_open = on_open
        self._gen_source = gen_source
        self.seq = 0  # the current segment's number
        self.path = ""
        self._prev = "" if role == "recovery" else _newest(opts, role)
        self.fault: OSError | None = None  # the call that failed, while the fault lasts
        self.fault_since = 0.0  # time.time() when it began
        self._retry_at = 0.0
        self._rotate_at = 0.0  # when a rotation that could not create its file retries
        self._fault_words = fault_words
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._begin_segment(self._next_name())
        if opts.fsync == "interval":
            self._thread = threading.Thread(
                target=self._sync_loop, daemon=True, name="shmwheel-journal-sync"
            )
            self._thread.start()

    # -- files ----------------------------------------------------------------------
    def _next_name(self) -> tuple[str, int, int]:
        """(path, monotonic µs, wall µs) of a segment begun now."""
        mono_us, wall_us = F.clock_pair_us()
        name = F.SegmentName(self.opts.epoch, wall_us, self.role, os.getpid())
        return os.path.join(self.opts.directory, name.filename()), mono_us, wall_us

    def _begin_segment(self, at: tuple[str, int, int], fd: int = -1) -> None:
        """Make `at` (its file `fd` if created already) the current segment: its magic
        and header go at the front of the tail, then to the file, synced."""
        path, mono_us, wall_us = at
        self._seq += 1
        if self._seq_source is not None:
            self._seq = self._seq_source()
        if self._gen_source is not None:
            self.next_gen = self._gen_source()
        header = F.body(
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
            self._prev,
        )
        self.path, self.seq, self._fd = path, self._seq, fd
        self._size = self._durable = 0
        self._file_gen += 1
        self._tail[0:0] = F.MAGIC + F.frame(header)
        if self._on_open is not None:
            self._on_open(self._seq, self.path)
        try:
            self._write_tail()
        except OSError as e:
            self._failed(e)

    def _write_tail(self) -> None:
        """Put the tail in the file right after its durable bytes, and make it durable:
        the way a new segment's header and the bytes a fault held reach the disk."""
        new = self._fd < 0
        if new:
            self._fd = self.disk.create(self.path)
        self._file_gen += 1
        self.disk.truncate(self._fd, self._size, self.path)
        self.disk.write_all(self._fd, self._tail, self.path)
        if self.opts.fsync != "none":
            self.disk.fdatasync(self._fd, self.path)
            if new or self._size == 0:  # a new file's name survives a host crash
                self.disk.sync_dir(self.opts.directory)
            self._count(C.C_JOURNAL_SYNCS, 1)
        self._size += len(self._tail)
        self._durable = self._size
        self._tail.clear()
        self._dirty = False

    def _rotate(self) -> None:
        """End the segment with an END naming its successor (synced) and go on in the
        successor. One that cannot be created leaves us in this one for a second more;
        an END that cannot be written is a fault (the repair cuts what got in)."""
        if self._dirty and self.opts.fsync != "none":
            self._sync_locked()
        if self.fault is not None or time.monotonic() < self._rotate_at:
            return
        at = self._next_name()
        try:
            fd = self.disk.create(at[0])
        except OSError as e:
            self._rotate_at = time.monotonic() + ROTATE_RETRY_S
            log.warning(
                "journal %s: cannot begin a new segment (%s); going on in %s",
                self.opts.directory,
                e,
                os.path.basename(self.path),
            )
            return
        end = F.frame(F.body(F.END, time.monotonic_ns() // 1000, os.path.basename(at[0])))
        try:
            self.disk.write_all(self._fd, end, self.path)
            if self.opts.fsync != "none":
                self.disk.fdatasync(self._fd, self.path)
        except OSError as e:
            os.close(fd)
            _unlink_quietly(at[0])
            self._failed(e)
            return
        os.close(self._fd)
        self._prev = os.path.basename(self.path)
        self._begin_segment(at, fd)

    # -- writing --------------------------------------------------------------------
    def flush(self) -> int:
        """Write what the buffer holds (one write), sync by the policy, clear it; returns
        the bytes taken. Through a fault the bytes are held, and a repair is tried at
        most every RETRY_S (so call it now and then even with nothing to write)."""
        buf = self.buffer
        n = len(buf)
        if n == 0 and self.fault is None:
            return 0
        buf.check()
        with self._lock:
            if n and self.fault is None:
                try:
                    self.disk.write_all(self._fd, buf, self.path)
                except OSError as e:
                    self._tail += buf
                    self._failed(e)
                else:
                    self._size += n
                    if self.opts.fsync == "none":
                        self._durable = self._size
                    else:
                        self._dirty = True
                        if self.opts.fsync == "always":
                            self._sync_locked()
                    if self._size >= self.opts.segment_bytes:
                        self._rotate()
            elif n:
                self._tail += buf
            if self.fault is not None:
                self._retry()
        buf.clear()
        self._count(C.C_JOURNAL_BYTES, n)
        return n

    def append(self, body: bytes) -> None:
        """Add one record encoded by format.body (flushed by the next flush)."""
        self.buffer.append(body)

    def commit(self) -> bool:
        """Flush and sync now; True iff everything recorded so far is durable (what a
        writer checks before it deletes a file its records make unneeded)."""
        self.flush()
        self.sync()
        return self.fault is None

    def _count(self, word: int, n: int) -> None:
        if self.counters is not None:
            self.counters[word] += n

    def _sync_locked(self) -> None:
        try:
            self.disk.fdatasync(self._fd, self.path)
        except OSError as e:
            self._unsynced_to_tail()
            self._failed(e)
            return
        self._durable = self._size
        self._dirty = False
        self._count(C.C_JOURNAL_SYNCS, 1)

    def _unsynced_to_tail(self) -> None:
        """After a failed fdatasync: what it could not vouch for, [durable, size), goes
        back to the front of the tail to be written again (and synced) by the repair.
        It is read from the page cache, where Linux keeps a failed writeback's pages;
        only the whole records whose CRC checks out are kept (whatever else was lost is
        logged: a kernel that dropped the pages of a failed write)."""
        n = self._size - self._durable
        try:
            data = self.disk.read(self._fd, n, self._durable) if n > 0 else b""
        except OSError as e:
            log.critical("journal %s: cannot read back what a failed sync left: %s", self.path, e)
            data = b""
        good = F.intact_prefix(data)
        if good < n:
            log.critical(
                "journal %s: after a failed sync, %d of %d bytes of %s no longer read back "
                "as records: the disk lost them",
                *(self.opts.directory, n - good, n, os.path.basename(self.path)),
            )
        self._tail[0:0] = data[:good]
        self._size = self._durable
        self._file_gen += 1

    def sync(self) -> None:
        """fdatasync what was written before the call (a fault: try a repair) without the lock,
        so a flush need not wait; a file changed meanwhile (``_file_gen``) its changer synced."""
        with self._lock:
            if self.fault is not None:
                self._retry()
                return
            if self._fd < 0 or not self._dirty or self.opts.fsync == "none":
                return
            fd, path, size, gen = self._fd, self.path, self._size, self._file_gen
        err: OSError | None = None
        try:
            self.disk.fdatasync(fd, path)  # a rotation may close fd meanwhile: see gen
        except OSError as e:
            err = e
        with self._lock:
            if gen != self._file_gen or self.fault is not None:
                return
            if err is not None:
                self._unsynced_to_tail()
                self._failed(err)
                return
            self._durable = max(self._durable, size)
            self._dirty = self._size > self._durable
            self._count(C.C_JOURNAL_SYNCS, 1)

    def _sync_loop(self) -> None:
        while not self._stop.wait(self.opts.fsync_ms / 1000):
            self.sync()

    # -- faults -----------------------------------------------------------------------
    @property
    def held(self) -> int:
        """Bytes held in memory because the disk did not take them (0 without a fault)."""
        return len(self._tail) if self.fault is not None else 0

    @property
    def blocked(self) -> bool:
        """Holding HOLD_BYTES or more: the process takes no new work until the disk
        takes writes again (the coordinator drains no ring, the reaper fires nothing)."""
        return self.fault is not None and len(self._tail) >= HOLD_BYTES

    def _failed(self, e: OSError) -> None:
        """A call on the file failed: a service's writer holds and reports; any other
        raises JournalError."""
        if self._fault_words is None:
            raise JournalError(
                f"journal {self.opts.directory}: cannot write {os.path.basename(self.path)}: "
                f"{e.strerror or e} ({errno.errorcode.get(e.errno or 0, e.errno)})"
            ) from e
        if self.fault is None:
            self.fault_since = time.time()
            log.error(
                "journal %s: the %s cannot write %s: %s; holding its records in memory "
                "(at most %d MiB) and retrying every %.1f s; new timers are refused until "
                "then",
                self.opts.directory,
                self.role,
                os.path.basename(self.path),
                e,
                HOLD_BYTES >> 20,
                RETRY_S,
            )
            self._retry_at = time.monotonic() + RETRY_S
        self.fault = e.with_traceback(None)  # keeps no frame (nor a view of a buffer)
        self._publish()

    def _retry(self) -> None:
        if time.monotonic() < self._retry_at:
            self._publish()
            return
        self._retry_at = time.monotonic() + RETRY_S
        held, since = len(self._tail), self.fault_since
        try:
            self._write_tail()
        except OSError as e:
            self.fault = e.with_traceback(None)
            self._publish()
            return
        self.fault = None
        self._publish()
        log.warning(
            "journal %s: the %s writes again after %.1f s; the %d bytes it held are on disk",
            self.opts.directory,
            self.role,
            time.time() - since,
            held,
        )
        if self._size >= self.opts.segment_bytes:
            self._rotate()

    def _publish(self) -> None:
        """The fault in the service header, for clients, stats() and the supervisor."""
        words = self._fault_words
        if words is None:
            return
        e = self.fault
        words[FW_HELD] = self.held
        words[FW_SINCE_MS] = int(self.fault_since * 1000) if e is not None else 0
        words[FW_ERRNO] = (e.errno or -1) if e is not None else 0

    def close(self) -> None:
        """Flush, end the segment with an END (synced unless the policy is none) and
        close. Through a fault that a last try does not repair, what is held goes to a
        held file in /dev/shm for the next start (spill.py), logged as a warning."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()
        with self._lock:
            try:
                if self.fault is not None:
                    self._retry_at = 0.0
                    self._retry()
                if self.fault is None and self._fd >= 0:
                    self._tail += F.frame(F.body(F.END, time.monotonic_ns() // 1000, ""))
                    try:
                        self._write_tail()
                    except OSError as e:
                        self._failed(e)
                if self.fault is not None:  # what is held goes to /dev/shm (spill.py), with
                    if self._size > self._durable:  # what was never synced (the disk may
                        self._unsynced_to_tail()  # drop it) and the END of this close
                    self._tail += F.frame(F.body(F.END, time.monotonic_ns() // 1000, ""))
                    spill.hand_over(self, self.path, self._size, bytes(self._tail))
            finally:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1


def _newest(opts: JournalOptions, role: str) -> str:
    """The newest segment of `role` in this epoch (a dead predecessor's): a restarted
    writer's first segment names it as its prev."""
    try:
        names = os.listdir(opts.directory)
    except OSError:
        return ""
    mine = [
        n
        for n in names
        if (s := F.SegmentName.parse(n)) is not None and s.epoch == opts.epoch and s.role == role
    ]
    return max(mine) if mine else ""


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _max_gen(mem: ServiceMemory) -> int:
    """The highest generation of any slot: the largest state word's (never negative, its top
    bits are its generation: contract.h). One pass, no temporary arrays of the capacity."""
    return int(C.gs_gen(int(mem.nodes()[:, C.F_GS].max())))


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
    first = L.W_JFAULT_COORDINATOR if role == "coordinator" else L.W_JFAULT_REAPER
    w = SegmentWriter(
        opts,
        role,
        mem.service,
        list(mem.task_names),
        mem.config.tick_ms,
        counters=mem.counters[row],
        seq_source=seq_source,
        on_open=on_open,
        fault_words=mem.header[first : first + L.JFAULT_WORDS],
        # every slot's generation only grows: above them all is above every id issued so
        # far, so a recovery never issues an id again whose records were all retired
        gen_source=lambda: _max_gen(mem) + 1,
        disk=Disk(role, mem.header[L.W_JINJECT : L.W_JINJECT + 1]),
    )
    mem.bind_tables().set_journal(w.buffer)
    return w
