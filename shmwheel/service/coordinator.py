"""The coordinator process: drains every producer ring in batches and links the submitted
slots into the wheel; reclaims the rings of closed or dead clients.

A ring's tail is advanced only after its records are linked, so a coordinator killed at
any moment re-reads them on restart, and ``link_submitted`` skips what is already linked.
Started by the supervisor through ``shmwheel.service.main``.
"""

from __future__ import annotations

import os

import numpy as np

from ..segment import slots as SK
from ..segment import layout as L
from ..segment import shm
from .process import ServiceProcess
from ..wheel.core import warm_up

BATCH = 8192
IDLE_WAIT_S = 0.005


class Coordinator(ServiceProcess):
    def __init__(self, service: str) -> None:
        super().__init__(service, "coordinator")
        self.recs = np.empty((BATCH, L.PRODUCER_RECORD), np.int64)
        self.res = np.zeros(4, np.int64)
        self.row = self.mem.counters[L.ROW_COORDINATOR]

    def drain(self, ring_index: int) -> int:
        """Link one batch from a ring; returns the records consumed."""
        mem = self.mem
        ring = mem.producer[ring_index]
        if ring.corrupt():  # a client wrote over its ring's head: drop what it claims
            self.row[L.C_GARBAGE] += 1
            ring.skip_to_head()
            return 0
        _, n = ring.peek(BATCH, self.recs)
        if n == 0:
            return 0
        res = self.res
        res[:3] = 0
        res[3] = np.iinfo(np.int64).max
        with mem.locked():
            SK.link_submitted(mem.wheel, mem.side, mem.arena, self.recs.reshape(-1), n,
                              ring_index, res)
        ring.consume(n)
        self.row[L.C_LINKED] += res[0]
        self.row[L.C_STALE] += res[1]
        self.row[L.C_GARBAGE] += res[2]
        if res[0] and res[3] < mem.header[L.W_REAPER_WAKE_AT]:
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
            with mem.locked():
                SK.reclaim(mem.wheel, mem.side, mem.arena, r)
                table[r, L.RT_PID] = 0
                table[r, L.RT_STATE] = L.RING_FREE

    def run(self) -> None:
        mem = self.mem
        header = mem.header
        claimed = mem.ring_table[:, L.RT_STATE]
        header[L.W_PID_COORDINATOR] = os.getpid()
        header[L.W_READY] |= L.READY_COORDINATOR
        next_tend = 0
        while self.running():
            total = 0
            for r in np.flatnonzero(claimed != L.RING_FREE):
                total += self.drain(int(r))
            next_tend -= 1
            if next_tend <= 0 or total == 0:
                self.tend_rings()
                next_tend = 1000
            if total == 0:
                header[L.W_COORD_SLEEPING] = 1
                if not any(mem.producer[int(r)].pending() for r in np.flatnonzero(claimed)):
                    self.wait(IDLE_WAIT_S)
                header[L.W_COORD_SLEEPING] = 0
        if self.orphaned:  # the embedding process died: nobody else will clean up
            self.log("supervisor is gone; unlinking the service's shared memory")
            header[L.W_STOPPING] = 1
            shm.unlink_service(self.service)


def main(service: str, index: int) -> None:
    warm_up()
    coordinator = Coordinator(service)
    mem = coordinator.mem  # load the kernels before declaring ready
    SK.link_submitted(mem.wheel, mem.side, mem.arena, coordinator.recs.reshape(-1), 0, 0,
                      coordinator.res)
    SK.reclaim(mem.wheel, mem.side, mem.arena, -1)  # ring -1 owns nothing: frees nothing
    coordinator.settle_heap()
    coordinator.run()

