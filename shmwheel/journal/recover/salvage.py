"""Step 1 of whole-service recovery (``recovery.py``): the salvage. When a dead
service's segment is still in /dev/shm (its processes were killed, the machine did not
reboot), what its memory knows and its journal may not is recorded into the journal:
schedules still in its clients' rings, cancels that won but whose records were not
drained, outcomes in its result rings. Then the segment is unlinked.

Ground rules: only a process holding the journal's lock salvages (the service starting
on it, or a sweep of stale segments that claims it as ``SALVAGE_HOLDER``), so no process
of the dead service is alive; the segment's own lock is taken (and repaired if its holder
died mid-update) before its tables are read. A journal directory ``directory.trusted``
refuses (another user's, or writable by others) is never written: the segment is kept.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import posix_ipc

from ...errors import ShmwheelError, UntrustedPath
from ...segment import contract as C
from ...segment import layout as L
from ...segment import shm
from .. import format as F
from ..directory import SALVAGE_HOLDER, JournalInUse, JournalOptions, claim
from ..write.writer import SegmentWriter

log = logging.getLogger("shmwheel.journal")


def salvage(service: str, directory: str, epoch: int) -> int:
    """Record into the journal what the dead service's segment knows and its journal may
    not (module doc, step 1), then unlink the segment. Returns the records written (0 when
    there is no segment). The caller holds the journal's lock, so no process of that
    service is alive."""
    try:
        mem = L.ServiceMemory.attach(service)
    except (ShmwheelError, OSError, posix_ipc.Error, ValueError):
        return 0  # gone (the usual case after a reboot), or not a segment we can read
    cfg = mem.config
    if os.path.abspath(cfg.journal_dir or "/nonexistent") != os.path.abspath(
        directory
    ) or shm.pid_alive(int(mem.header[L.W_OWNER])):
        mem.close()  # another journal's service, or a live one: not ours to touch
        return 0
    written = 0
    try:
        opts = JournalOptions(directory, "always", epoch=max(1, epoch))
        writer = SegmentWriter(opts, "recovery", service, list(mem.task_names), cfg.tick_ms)
        tables = mem.tables
        assert tables is not None
        tables.set_journal(writer.buffer)
        try:
            with mem.locked():  # repairs first if a lock holder died mid-update
                written += _salvage_rings(mem)
                gs = mem.nodes()[:, C.F_GS]
                st = C.gs_state(gs)
                # STOPPING is a run in flight whose cancel lost (cancel returned False):
                # that run is still owed, so a one-shot's is left to the crash window like
                # any FIRING run's; only a repeating timer's further runs were cancelled
                flags = C.meta_flags(mem.side.reshape(-1, C.SIDE_WORDS)[:, C.S_META])
                repeating = (flags & C.FLAG_REPEAT) != 0
                slots = np.flatnonzero((st == C.ST_CANCELLED) | ((st == C.ST_STOPPING) & repeating))
                for slot in slots.tolist():
                    writer.append(
                        F.body(
                            F.CANCELLED,
                            int(C.gs_handle(int(gs[slot]), slot)),
                            time.monotonic_ns() // 1000,
                        )
                    )
                written += len(slots)
            writer.flush()
        finally:
            tables.set_journal(None)
            writer.close()
    finally:
        mem.close()
        shm.unlink_service(service)
    log.warning(
        "journal %s: salvaged %d records from the dead service %s's shared memory",
        directory,
        written,
        service,
    )
    return written


def salvage_stale(service: str) -> bool:
    """``census.sweep_stale``'s hook: a dead service that kept a journal is salvaged into
    it before its segment goes, whichever service's start sweeps it. False (keep the
    segment) when that journal is in use (the service starting on it salvages it) or is
    not safe to use (``directory.trusted``: another user could have written it)."""
    try:
        mem = L.ServiceMemory.attach(service)
    except (ShmwheelError, OSError, posix_ipc.Error, ValueError):
        return True
    directory, epoch = mem.config.journal_dir, mem.config.journal_epoch
    mem.close()
    if not directory or not os.path.isdir(directory):
        return True
    try:
        fd = claim(directory, f"{SALVAGE_HOLDER}{service}")
    except UntrustedPath as e:  # never write where another user could: keep the segment
        log.warning("not salvaging the dead service %s into its journal: %s", service, e)
        return False
    except JournalInUse:
        return False
    except OSError as e:  # not ours to write: leave the segment to its journal's owner
        log.warning("journal %s: cannot salvage the dead service %s: %s", directory, service, e)
        return True
    try:
        salvage(service, directory, epoch)
    finally:
        os.close(fd)
    return True


def _salvage_rings(mem: L.ServiceMemory) -> int:
    tables = mem.tables
    assert tables is not None
    written = 0
    for r, ring in enumerate(mem.producer):
        pid = int(mem.ring_table[r, L.RT_PID])
        buf = np.empty((max(1, ring.pending()), C.PRODUCER_RECORD), np.int64)
        _, n = ring.peek(buf)
        if n > 0:
            written += tables.journal_records(buf, n, pid)
    for ring in mem.results:
        buf = np.empty((max(1, ring.pending()), C.RESULT_RECORD), np.int64)
        _, n = ring.peek(buf)
        if n > 0:
            written += tables.journal_settled(buf, n)
            res = np.zeros(C.SETTLE_RESULT_WORDS, np.int64)
            # the unsettled ones: OUTCOME records as it settles
            tables.settle(buf, n, time.monotonic_ns() // 1_000_000, res)
            written += int(res.sum())
    return written
