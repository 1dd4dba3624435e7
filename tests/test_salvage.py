"""The salvage step of whole-service recovery (shmwheel/journal/recover/salvage.py), on a dead
service's segment built by hand: which slot states become CANCELLED records."""

from __future__ import annotations

import os
import subprocess
import sys

from shmwheel.journal import reader
from shmwheel.journal.recover import salvage as S
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from shmwheel.segment import shm
from shmwheel.segment.clock import now_ms


def test_a_cancel_that_lost_to_the_run_in_flight_leaves_a_one_shot_owed(tmp_path):
    """A cancel that won (CANCELLED) is recorded; one that met the run in flight
    (STOPPING, cancel returned False) is recorded only for a repeating timer, whose later
    runs it ended: a one-shot's run is still owed, and a CANCELLED record would make the
    recovery drop it (the whole-service crash test caught that: a one-shot never ran)."""
    name = f"salv{os.getpid()}"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names no live process: the service's owner is dead
    cfg = L.ServiceConfig(
        capacity=64, tick_ms=1, wheel_size=8, executors=1, max_clients=2, ring_capacity=8,
        dispatch_capacity=8, arena_blocks=(4, 2, 1, 1), tasks=(("noop", "m:f"),),
        journal_dir=str(tmp_path), journal_epoch=1,
    )  # fmt: skip
    try:
        mem = L.ServiceMemory.create(name, cfg, dead.pid, now_ms())
        nodes, side = mem.nodes(), mem.side.reshape(-1, C.SIDE_WORDS)
        gen = 5
        states = {1: C.ST_STOPPING, 2: C.ST_STOPPING, 3: C.ST_CANCELLED, 4: C.ST_FIRING}
        for slot, st in states.items():
            nodes[slot, C.F_GS] = C.gs_make(gen, st)
        side[2, C.S_META] = C.meta_make(0, C.FLAG_REPEAT | C.FLAG_ARENA, 0, 16, 0)
        mem.close()
        assert S.salvage(name, str(tmp_path), epoch=2) == 2
        got = {r["id"] for r in reader.records(tmp_path) if r["kind"] == "cancelled"}
        gs = C.gs_make(gen, C.ST_CANCELLED)
        assert got == {C.gs_handle(gs, 2), C.gs_handle(gs, 3)}
        assert not shm.service_files(name), "the salvage unlinks the dead segment"
    finally:
        shm.unlink_service(name)
