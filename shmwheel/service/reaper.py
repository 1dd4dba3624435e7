"""The reaper process: owns the clock. It sleeps until the wheel's next event (woken early
by the coordinator when an earlier deadline arrives), advances the wheel, pre-cascades,
dispatches due slots to the executors' rings in batches, and settles the outcomes the
executors report (freeing one-shot slots, re-arming repeating ones).

Exactly once across a reaper crash: advancing marks slots DUE under the lock; a DUE slot
is always in exactly one place — the reaper's hands, a dispatch ring, an executor's
``started`` word, or a result ring — and each hand-over writes the next place before
clearing the previous one. On start the reaper dispatches the DUE slots found in none
of those places (they were in a dead reaper's hands, so they never ran).
Started by the supervisor through ``shmwheel.service.main``.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..segment import slots as SK
from ..segment import layout as L
from ..wheel import kernels as K
from ..segment.ring import Ring
from .process import ServiceProcess
from ..wheel.core import warm_up

BATCH = 16384
CASCADE_BUDGET = 1024  # entries per pre-cascade step: ~0.1 ms of lock time
MAX_SLEEP_S = 0.05


class Reaper(ServiceProcess):
    def __init__(self, service: str) -> None:
        super().__init__(service, "reaper")
        mem = self.mem
        self.out = np.empty(BATCH, np.int64)
        self.rbuf = np.empty((BATCH, L.RESULT_RECORD), np.int64)
        self.res = np.zeros(2, np.int64)
        self.row = mem.counters[L.ROW_REAPER]
        self.backlog = np.empty(0, np.int64)  # due handles not yet in a dispatch ring
        self.next_exec = 0
        cap = mem.config.capacity
        self.gs = mem.wheel[mem.nodes_off : mem.nodes_off + cap * K.NODE_WORDS] \
            .reshape(-1, K.NODE_WORDS)[:, K.F_GS]

    # -- outcomes ---------------------------------------------------------------------
    def settle(self) -> int:
        mem, total = self.mem, 0
        for ring in mem.results:
            _, n = ring.peek(BATCH, self.rbuf)
            if n == 0:
                continue
            self.res[:] = 0
            with mem.locked():
                SK.settle(mem.wheel, mem.side, mem.arena, mem.arena_words, self.rbuf.reshape(-1), n,
                          self.res)
            ring.consume(n)
            self.row[L.C_FREED] += self.res[0]
            self.row[L.C_REARMED] += self.res[1]
            total += n
        return total

    # -- dispatch ---------------------------------------------------------------------
    def dispatch(self, now_ns: int) -> None:
        """Spread the backlog over the executors' rings, most free space first."""
        mem = self.mem
        rings = mem.dispatch
        left = self.backlog
        if len(left) == 0:
            return
        order = sorted(range(len(rings)), key=lambda i: -rings[i].free())
        share = -(-len(left) // len(rings))
        for i in order:
            if len(left) == 0:
                break
            chunk = left[:share]
            recs = np.empty((len(chunk), L.DISPATCH_RECORD), np.int64)
            recs[:, 0] = chunk
            recs[:, 1] = now_ns
            k = rings[i].push_records(recs)
            left = left[k:]
            if k and mem.exec_table[i, L.X_SLEEPING]:
                mem.ring_bell(f"exec{i}")
        self.backlog = left

    def fire(self) -> tuple[int, int]:
        """Advance to now and dispatch what came due, then pre-cascade one bounded step;
        returns (fired, next event in ms; 0 when more work is waiting now). Due timers go
        out before any cascade work: a bucket is eligible a whole coarse tick before it
        expires, so cascading can wait, a due timer cannot."""
        mem = self.mem
        now_ns = time.monotonic_ns()
        with mem.locked():
            n = K.advance(mem.wheel, now_ns // 1_000_000, self.out, False)
        if n:
            slots = self.out[:n]
            handles = (self.gs[slots] & ~np.int64(0xFFFFFFFF)) | slots
            self.backlog = np.concatenate([self.backlog, handles]) if len(self.backlog) else handles
            self.row[L.C_FIRED] += n
        self.dispatch(now_ns)
        with mem.locked():
            moved = K.cascade_step(mem.wheel, CASCADE_BUDGET)
            nxt = K.next_wakeup(mem.wheel)
            busy = n == len(self.out) or moved == CASCADE_BUDGET
            if not busy:
                # set under the lock: a deadline the coordinator links after this sees it
                mem.header[L.W_REAPER_WAKE_AT] = nxt
        return n, 0 if busy else int(nxt)

    # -- recovery ---------------------------------------------------------------------
    def recover(self) -> int:
        """Queue the DUE slots that no executor has (a previous reaper died holding them)."""
        mem = self.mem
        cap = mem.config.capacity
        due = np.empty(cap, np.int64)
        with mem.locked():
            n = SK.slots_in_state(mem.wheel, K.DUE, -1, mem.side, due)
        if n == 0:
            return 0
        held = [ring_column(r, 0) for r in mem.dispatch]             # 1. queued
        for i, ring in enumerate(mem.dispatch):                        # 2. running
            seq = int(mem.exec_table[i, L.X_STARTED])
            if seq >= 0:
                held.append(np.array([ring.record_at(seq)[0]], np.int64))
        held += [ring_column(r, 0) for r in mem.results]              # 3. reported
        held_slots = np.concatenate(held) & 0xFFFFFFFF if held else np.empty(0, np.int64)
        orphans = due[:n][~np.isin(due[:n], held_slots)]
        if len(orphans):
            self.backlog = (self.gs[orphans] & ~np.int64(0xFFFFFFFF)) | orphans
            self.log(f"recovered {len(orphans)} due timers a previous reaper had not dispatched")
        return len(orphans)

    def run(self) -> None:
        self.recover()
        self.mem.header[L.W_PID_REAPER] = os.getpid()
        self.mem.header[L.W_READY] |= L.READY_REAPER
        while self.running():
            self.settle()
            _, nxt = self.fire()
            if nxt == 0:
                # more cascade work: let a just-woken executor that the scheduler placed
                # on this core run the timers dispatched above before we continue
                os.sched_yield()
                continue
            if len(self.backlog):
                self.wait(0.0002)  # executors are behind: let them run
                continue
            self.wait(min((nxt * 1_000_000 - time.monotonic_ns()) / 1e9, MAX_SLEEP_S))


def ring_column(ring: Ring, col: int) -> np.ndarray:
    """Column `col` of a ring's unconsumed records [tail, head)."""
    tail = ring.tail
    idx = (tail + np.arange(ring.pending())) & ring.mask
    return ring.data[idx, col].copy()


def main(service: str, index: int) -> None:
    warm_up()
    reaper = Reaper(service)
    mem = reaper.mem  # load the service kernels now, not at the first outcome (a stall)
    SK.settle(mem.wheel, mem.side, mem.arena, mem.arena_words, reaper.rbuf.reshape(-1), 0,
              reaper.res)
    reaper.settle_heap()
    reaper.run()

