"""The coordinator process: drains every producer ring in batches and applies the
records under the segment lock (``Tables.link_records``): a schedule record links its
submitted slot into the wheel, a cancel record unlinks and frees the slot a cancel won.
It also reclaims the rings of closed or dead clients.

A ring's tail is advanced only after its records are applied, so a coordinator killed at
any moment re-reads them on restart, and ``link_records`` skips what is applied already
(the slot's state or generation has moved on).

With a journal, a batch is recorded before it is applied (write-ahead): the SCHEDULED and
CANCELLED records of the batch are written to the coordinator's segment file (and synced,
by the fsync policy) before the slots are linked or freed, so every timer is on disk
before it can fire, and every won cancel before its slot is reused. Through a disk fault
the writer holds the records (shmwheel/journal/write/writer.py, "Faults") and the batch is
applied all the same: durability waits, the timers do not. Started by the supervisor
through ``shmwheel.service.processes.main``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from ... import _native as N
from ...segment import contract as C
from ...segment import layout as L
from ...segment import shm
from .process import ServiceProcess

if TYPE_CHECKING:  # pragma: no cover
    from ...journal.write.retention import Retention
    from ...journal.write.writer import SegmentWriter

log = logging.getLogger("shmwheel.coordinator")

BATCH = 8192
IDLE_WAIT_S = 0.005  # also the bound on how long a cancelled slot waits to be freed
# for HOT_NS after it linked something the coordinator polls every HOT_STEP_S without
# announcing a sleep (W_COORD_SLEEPING stays 0), so clients in a burst do not wake it
HOT_NS, HOT_STEP_S = 5_000_000, 0.0005


class Coordinator(ServiceProcess):
    def __init__(self, service: str) -> None:
        super().__init__(service, "coordinator")
        self.recs = np.empty((BATCH, C.PRODUCER_RECORD), np.int64)
        self.res = np.zeros(C.LINK_RESULT_WORDS, np.int64)
        self.row = self.mem.counters[L.ROW_COORDINATOR]
        self.retention: Retention | None = None
        self.journal: SegmentWriter | None = None
        if self.mem.config.journal_dir:  # the journal's modules load only when it has one
            from ...journal.directory import options_of
            from ...journal.write.retention import Retention
            from ...journal.write.writer import service_writer

            opts = options_of(self.mem.config)
            assert opts is not None
            retention = self.retention = Retention(self.mem, opts)
            self.journal = service_writer(
                self.mem, "coordinator", L.ROW_COORDINATOR, retention.next_seq, retention.opened
            )

    def drain(self, ring_index: int) -> int:
        """Apply one batch of a ring; returns the records consumed."""
        mem = self.mem
        ring = mem.producer[ring_index]
        _, n = ring.peek(self.recs)
        if n < 0:  # a client wrote over its ring's head: drop what it claims
            self.row[C.C_GARBAGE] += 1
            ring.consume(0)
            return 0
        if n == 0:
            return 0
        if self.journal is not None and self.journal.blocked:
            # the disk holds nothing more (journal/write/writer.py, "Faults"): the ring waits
            return 0
        res = self.res
        res[:] = 0
        res[C.LR_EARLIEST] = C.NEVER
        if self.journal is not None:  # write-ahead: on disk before it is applied
            producer = int(mem.ring_table[ring_index, L.RT_PID])
            with mem.locked():
                self.tables.journal_records(self.recs, n, producer)
            self.journal.flush()
        with mem.locked():
            self.tables.link_records(self.recs, n, ring_index, res)
        ring.consume(n)
        self.row[C.C_LINKED] += res[C.LR_LINKED]
        self.row[C.C_STALE] += res[C.LR_STALE]
        self.row[C.C_GARBAGE] += res[C.LR_GARBAGE]
        self.row[C.C_RETIRED] += res[C.LR_RETIRED]
        if res[C.LR_LINKED] and res[C.LR_EARLIEST] < mem.header[L.W_REAPER_WAKE_AT]:
            mem.ring_bell("reaper")  # an earlier deadline than the reaper sleeps towards
        return n

    def tend_rings(self) -> None:
        """Free the rings of clients that closed or died, after draining what they published."""
        mem = self.mem
        table = mem.ring_table
        for r in np.flatnonzero(table[:, L.RT_STATE] != L.RING_FREE).tolist():
            closing = table[r, L.RT_STATE] == L.RING_CLOSING
            if not closing and shm.pid_alive(int(table[r, L.RT_PID])):
                continue
            while self.drain(r):
                pass
            with mem.locked():  # (what it journals names the client's pid: docs/journal.md)
                freed = self.tables.reclaim(r, int(table[r, L.RT_PID]))
                table[r, L.RT_PID] = 0
                table[r, L.RT_STATE] = L.RING_FREE
            if self.journal is not None:  # cancelled slots whose records the ring lost
                self.journal.flush()
            if not closing:
                log.info("client ring %d: its process is gone; %d reserved slots freed", r, freed)

    def run(self) -> None:
        mem = self.mem
        header = mem.header
        claimed = mem.ring_table[:, L.RT_STATE]
        header[L.W_PID_COORDINATOR] = os.getpid()
        N.word_or(header, L.W_READY, L.READY_COORDINATOR)  # the reaper sets its bit too
        next_tend = 0
        hot_until = 0
        while self.running():
            total = 0
            for r in np.flatnonzero(claimed != L.RING_FREE).tolist():
                total += self.drain(r)
            next_tend -= 1
            if next_tend <= 0 or total == 0:
                self.tend_rings()
                next_tend = 1000
                if self.retention is not None and self.journal is not None:
                    self.journal.flush()  # through a fault: the retry, even when idle
                    self.retention.tick(self.journal)
            now = time.monotonic_ns()
            if total:
                hot_until = now + HOT_NS
            elif now < hot_until:
                # just after work: poll in short steps without announcing a sleep, so a
                # burst of clients' records needs no wake-up (a system call and a context
                # switch each) and waits at most HOT_STEP_S
                self.wait(HOT_STEP_S)
            else:
                header[L.W_COORD_SLEEPING] = 1
                if not any(mem.producer[r].pending() for r in np.flatnonzero(claimed).tolist()):
                    self.wait(IDLE_WAIT_S)
                header[L.W_COORD_SLEEPING] = 0
        if self.journal is not None:
            # what clients published before the stop (or the supervisor's death) goes to
            # disk and into the wheel, so a restart on the journal finds it
            for r in np.flatnonzero(claimed != L.RING_FREE).tolist():
                while self.drain(r):
                    pass
            self.journal.close()
        if self.orphaned:  # the embedding process died: nobody else will clean up
            log.warning("service %s: supervisor is gone; unlinking its shared memory", self.service)
            header[L.W_STOPPING] = 1
            shm.unlink_service(self.service)


def main(service: str, index: int) -> None:
    coordinator = Coordinator(service)
    coordinator.settle_heap()
    coordinator.run()
