"""The reaper process: owns the clock. It sleeps until the wheel's next event (woken early
by the coordinator when an earlier deadline arrives), advances the wheel, dispatches the
timers it won to the executors' rings in batches, pre-cascades, and settles the outcomes
the executors report (freeing one-shot slots, re-arming repeating ones).

Exactly once: advancing takes each due slot from PENDING to FIRING by compare-and-swap
(a racing cancel wins or loses there, never both). A FIRING slot is then always in
exactly one place — the reaper's backlog, a dispatch ring, an executor's ``started`` word,
or a result ring — and each hand-over writes the next place before clearing the previous
one. On start the reaper dispatches the FIRING slots found in none of those places (a
dead reaper held them, so they never ran).

With a journal, the reaper records FIRED as it wins slots, CANCELLED for the cancelled
slots its walk retires, and OUTCOME as it settles. The FIRED records of an advance are
written before any of its timers is dispatched, so no run starts that the journal does not
show fired; a reaper that dies between winning and writing leaves ``W_REAPER_JOPEN`` set,
and its successor writes them (``journal_fired``). A batch of outcomes is written before
its result ring is consumed, so a restarted reaper finds the ones its predecessor settled
without recording and records them (``journal_settled``). Started by the supervisor
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
from ...segment import verify as V
from .process import ServiceProcess

if TYPE_CHECKING:  # pragma: no cover
    from ...journal.write.retention import ReaperFiles
    from ...journal.write.writer import SegmentWriter

log = logging.getLogger("shmwheel.reaper")

BATCH = 16384
CASCADE_BUDGET = 1024  # entries per pre-cascade step: ~0.1 ms of lock time
MAX_SLEEP_S = 0.05
# After work, the reaper stays "hot" for HOT_S: it sleeps HOT_STEP_S at a time and says so
# in W_REAPER_WAKE_AT, so a burst of completions (check_and_complete) needs no wake-up each:
# they wait at most HOT_STEP_S for it instead of costing a system call and a context switch
HOT_S, HOT_STEP_S = 0.005, 0.001
BLOCKED_WAIT_MS = 50  # how often a reaper whose journal holds all it may looks again
PURGE_BUDGET = 64  # watch-list chains purged per loop (the purgatory's reaper duty)
STUCK_CHECK_NS = 10_000_000  # how often the reaper looks for stuck executors (take_over)


class Reaper(ServiceProcess):
    def __init__(self, service: str) -> None:
        super().__init__(service, "reaper")
        self.out = np.empty(BATCH, np.int64)
        self.rbuf = np.empty((BATCH, C.RESULT_RECORD), np.int64)
        self.res = np.zeros(C.SETTLE_RESULT_WORDS, np.int64)
        self.row = self.mem.counters[L.ROW_REAPER]
        self.backlog = np.empty(0, np.int64)  # fired handles not yet in a dispatch ring
        self.hot_until = 0  # monotonic ns: until then the reaper sleeps HOT_STEP_S at most
        # take_over: each executor's `started` as last seen and since when (monotonic ns),
        # the executors judged stuck, and when to look again
        self.started_seen = [(-1, 0)] * len(self.mem.dispatch)
        self.stuck: set[int] = set()
        self.next_stuck_check = 0
        self.taken = np.empty(len(self.mem.dispatch[0].data), np.int64)
        self.mem.exec_table[:, L.X_STUCK] = 0  # a new reaper judges afresh
        self.retention: ReaperFiles | None = None
        self.journal: SegmentWriter | None = None
        if self.mem.config.journal_dir:  # the journal's modules load only when it has one
            from ...journal.directory import options_of
            from ...journal.write.retention import ReaperFiles
            from ...journal.write.writer import service_writer

            opts = options_of(self.mem.config)
            assert opts is not None
            retention = self.retention = ReaperFiles(self.mem, opts)
            self.journal = service_writer(
                self.mem, "reaper", L.ROW_REAPER, on_open=retention.opened
            )

    # -- outcomes ---------------------------------------------------------------------
    def settle(self) -> int:
        mem, total = self.mem, 0
        for ring in mem.results:
            _, n = ring.peek(self.rbuf)
            if n <= 0:
                continue
            self.res[:] = 0
            with mem.locked():
                # this moment's clock: the wheel's is the last advance, a sleep ago
                self.tables.settle(self.rbuf, n, time.monotonic_ns() // 1_000_000, self.res)
            if self.journal is not None:  # recorded before the ring forgets them
                self.journal.flush()
            ring.consume(n)
            self.row[C.C_FREED] += self.res[C.SR_FREED]
            self.row[C.C_REARMED] += self.res[C.SR_REARMED]
            total += n
        return total

    # -- dispatch ---------------------------------------------------------------------
    def take_over(self, now_ns: int) -> int:
        """Take the timers waiting behind a stuck executor's running task (docs/concepts.md,
        "Stuck executors"): an executor is stuck when its `started` word has named the same
        dispatch record for `stuck_after_ms` while records wait behind it on its ring. Those
        records are claimed for the reaper (a CAS each, ring.h: the executor, should it wake
        meanwhile, claims the one it reaches first and the reaper stops there) and go to the
        front of the backlog, which dispatch() spreads over the executors not stuck. The
        stuck executor skips what was taken when its task returns. Returns how many were
        taken."""
        if now_ns < self.next_stuck_check:
            return 0
        self.next_stuck_check = now_ns + STUCK_CHECK_NS
        mem, table = self.mem, self.mem.exec_table
        after_ns = mem.config.stuck_after_ms * 1_000_000
        taken = 0
        for i, s in enumerate(table[:, L.X_STARTED].tolist()):
            seen, since = self.started_seen[i]
            if s != seen or s < 0:
                self.started_seen[i] = (s, now_ns)
                if i in self.stuck:
                    self.stuck.discard(i)
                    table[i, L.X_STUCK] = 0
                    log.warning("executor %d is running again", i)
                continue
            ring = mem.dispatch[i]
            if now_ns - since < after_ns or (i not in self.stuck and ring.head <= s + 1):
                continue  # a long task with nothing behind it is not stuck
            if i not in self.stuck:
                self.stuck.add(i)
                table[i, L.X_STUCK] = 1
                log.warning(
                    "executor %d has run one task for %.1f s with %d timers waiting behind "
                    "it: stuck; the other executors take them",
                    i,
                    (now_ns - since) / 1e9,
                    ring.head - s - 1,
                )
            if len(self.stuck) == len(table):
                continue  # nobody to take them
            n = N.dispatch_take(ring.words, s + 1, self.taken)
            if n:
                got = self.taken[:n].copy()
                self.backlog = np.concatenate([got, self.backlog]) if len(self.backlog) else got
                taken += n
        if taken:
            self.row[C.C_TAKEN_OVER] += taken
            self.dispatch(now_ns)
        return taken

    def dispatch(self, now_ns: int) -> None:
        """Spread the backlog over the executors' rings, most free space first (the stuck
        ones last: take_over)."""
        mem = self.mem
        rings = mem.dispatch
        left = self.backlog
        if len(left) == 0:
            return
        order = sorted(range(len(rings)), key=lambda i: -rings[i].free())
        if self.stuck:
            order = [i for i in order if i not in self.stuck] or order
        share = -(-len(left) // len(order))
        for i in order:
            if len(left) == 0:
                break
            chunk = left[:share]
            recs = np.empty((len(chunk), C.DISPATCH_RECORD), np.int64)
            recs[:, C.DR_HANDLE] = chunk
            recs[:, C.DR_FIRED_NS] = now_ns
            k = rings[i].push(recs)
            left = left[k:]
            if k and mem.exec_table[i, L.X_SLEEPING]:
                mem.ring_bell(f"exec{i}")
        self.backlog = left

    def fire(self) -> tuple[int, int]:
        """Advance to now and dispatch what fired, then pre-cascade one bounded step;
        returns (fired, next event in ms; 0 when more work is waiting now). Due timers go
        out before any cascade work: a bucket is eligible a whole coarse tick before it
        expires, so cascading can wait, a due timer cannot."""
        mem = self.mem
        now_ns = time.monotonic_ns()
        n = 0
        journal = self.journal
        blocked = journal is not None and journal.blocked
        # nothing is won while the backlog holds timers (the executors' rings are full: the
        # timers wait in the wheel, where a cancel can still win them), so at a death with
        # W_REAPER_JOPEN set every FIRING slot in no place is of the last advance (recover)
        if not blocked and not len(self.backlog):  # blocked: the journal's writer holds all it may
            if journal is not None:
                mem.header[L.W_REAPER_JOPEN] = 1
            with mem.locked():
                n = self.tables.advance(now_ns // 1_000_000, self.out)
            if journal is not None:
                # write-ahead: the FIRED records advance encoded reach the file before any
                # executor can run these timers, so no run starts that the journal does not
                # show fired (the flush at the end writes the rest)
                if n:
                    journal.flush()
                mem.header[L.W_REAPER_JOPEN] = 0
        if n:
            fired = self.out[:n].copy()
            self.backlog = np.concatenate([self.backlog, fired]) if len(self.backlog) else fired
            self.row[C.C_FIRED] += n
        self.dispatch(now_ns)
        with mem.locked():
            moved = self.tables.cascade_step(CASCADE_BUDGET)
            nxt = self.tables.next_wakeup()
            busy = n == len(self.out) or moved == CASCADE_BUDGET
            self.row[C.C_RETIRED] += self.tables.take_retired()
            self.row[C.C_OPS_EXPIRED] += self.tables.take_expired()
            self.tables.watch_purge(PURGE_BUDGET)  # entries of finished operations
            if not busy:
                # set under the lock: a deadline the coordinator links after this sees it
                if now_ns < self.hot_until:
                    nxt = min(nxt, now_ns // 1_000_000 + int(HOT_STEP_S * 1000))
                if len(self.backlog):
                    # due timers wait in the wheel for room in the rings (run() looks again
                    # in 0.2 ms): say when, not their past deadline, which the watchdog
                    # would read as a reaper that has work and does not wake for it
                    nxt = max(nxt, now_ns // 1_000_000 + 1)
                mem.header[L.W_REAPER_WAKE_AT] = nxt
        if blocked:
            nxt, busy = max(nxt, now_ns // 1_000_000 + BLOCKED_WAIT_MS), False
        if self.journal is not None:
            self.journal.flush()
            self.retention.tick(self.journal)  # type: ignore[union-attr]
        return n, 0 if busy else int(nxt)

    # -- recovery ---------------------------------------------------------------------
    def recover(self) -> int:
        """Queue the FIRING slots that no executor has (a previous reaper died holding them);
        record the outcomes it settled but did not get to record, and, if it died between
        winning timers and writing their FIRED records (W_REAPER_JOPEN), those records."""
        mem, journal = self.mem, self.journal
        if journal is not None:
            for ring in mem.results:
                _, n = ring.peek(self.rbuf)
                if n > 0:
                    with mem.locked():
                        self.tables.journal_settled(self.rbuf, n)
        recorded = 0
        with mem.locked():
            # only a reaper moves a slot to FIRING (its advance): on a segment no reaper
            # has run on (no pid recorded yet) there is none, and the scan of every node
            # (tens of ms at 1 M) is skipped
            first = not mem.header[L.W_PID_REAPER]
            orphans = np.empty(0, np.int64) if first else V.firing_nowhere(mem)
            if journal is not None and len(orphans) and mem.header[L.W_REAPER_JOPEN]:
                recorded = self.tables.journal_fired(orphans)  # all of its last advance
        if recorded:
            log.warning("wrote the fired records of %d timers a previous reaper won", recorded)
        if journal is not None:
            journal.flush()
            mem.header[L.W_REAPER_JOPEN] = 0
        if len(orphans):
            self.backlog = orphans
            log.warning(
                "recovered %d fired timers a previous reaper had not dispatched", len(orphans)
            )
        return len(orphans)

    def run(self) -> None:
        self.recover()
        self.mem.header[L.W_PID_REAPER] = os.getpid()
        N.word_or(self.mem.header, L.W_READY, L.READY_REAPER)  # the coordinator sets its bit too
        while self.running():
            settled = self.settle()
            self.take_over(time.monotonic_ns())
            fired, nxt = self.fire()
            if settled or fired:
                self.hot_until = time.monotonic_ns() + int(HOT_S * 1e9)
            if nxt == 0:
                # more cascade work: let a just-woken executor that the scheduler placed
                # on this core run the timers dispatched above before we continue
                os.sched_yield()
                continue
            if len(self.backlog):
                self.wait(0.0002)  # executors are behind: let them run
                continue
            self.wait(min((nxt * 1_000_000 - time.monotonic_ns()) / 1e9, MAX_SLEEP_S))
        if self.journal is not None:
            self._await_executors()
            self.settle()  # outcomes reported before the stop are recorded
            self.journal.close()

    def _await_executors(self) -> None:
        """At a stop: settle what the executors report until none is in a batch (each
        finishes the run in hand and starts no other: executor.c), so that every run that
        started has its outcome recorded and none runs again at the next start. Not when
        the supervisor is gone (a whole-service crash: at-least-once, docs/journal.md);
        a task that does not end is ended by stop()'s timeout, which kills us too."""
        table, parent = self.mem.exec_table, self.parent
        while not (os.getppid() != parent and not shm.pid_alive(self.owner)):
            busy = [
                int(pid)
                for pid, started in zip(table[:, L.X_PID], table[:, L.X_STARTED], strict=True)
                if started >= 0 and _running(int(pid))
            ]
            if not busy:
                return
            self.settle()
            self.wait(0.002)


def _running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie has)."""
    import psutil  # here: only a journaled stop asks, and the zygote's start stays shorter

    if not shm.pid_alive(pid):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def main(service: str, index: int) -> None:
    reaper = Reaper(service)
    reaper.settle_heap()
    reaper.run()
