"""The embedding process of tests/test_shm_full.py, run as a child inside a private mount
namespace whose /dev/shm is a small tmpfs of its own (the test mounts it and execs this):
``python tests/shm_full_child.py MODE NAME LOGDIR``. Its last stdout line is a JSON object
saying what happened; it exits 0 whenever it could say so (a SIGBUS is its return code).

Modes:

``start CAPACITY``  start a service that /dev/shm cannot hold: reports the error (type,
    message, needed, free) and what is left in /dev/shm and of its child processes.
``full CAPACITY``   start a service, fill the rest of /dev/shm with a file until ENOSPC,
    then connect new clients, ``schedule_many`` (payloads in every arena class),
    ``schedule`` (a failing task too: its error log), an operation completed by another
    client, and wait for every outcome; reports the outcomes, the log's lines, the free
    space while full, then stops the service, removes the filler and reports what is left.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from typing import Any

import psutil

import shmwheel
from shmwheel import ShmwheelError, TimerService

TASKS = {"record": "shmwheel.examples.tasks:append_line", "boom": "shmwheel.examples.tasks:fail"}
SHM = "/dev/shm"
FILLER = os.path.join(SHM, "filler")
WAIT_S = 60.0  # all the outcomes are waited for at most this long, together


def _ignore(_outcome: object) -> None:
    """A done-callback that only asks for the outcome to be kept."""


def left() -> dict[str, Any]:
    """What is in /dev/shm and which processes this one still has."""
    kids = psutil.Process().children(recursive=True)
    return {"shm": sorted(os.listdir(SHM)), "children": [p.pid for p in kids]}


def free_bytes() -> int:
    st = os.statvfs(SHM)
    return st.f_bavail * st.f_frsize


def fill() -> None:
    """Write FILLER until /dev/shm says ENOSPC, big chunks first, then pages."""
    fd = os.open(FILLER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)


def service(name: str, capacity: int) -> TimerService:
    return TimerService(name, tasks=TASKS, capacity=capacity, executors=2, max_clients=8)


def start_too_big(name: str, capacity: int) -> dict[str, Any]:
    svc = service(name, capacity)
    try:
        svc.start()
    except ShmwheelError as e:
        return {
            "error": type(e).__name__,
            "message": str(e),
            "needed": getattr(e, "needed", None),
            "free": getattr(e, "free", None),
            **left(),
        }
    svc.stop()
    return {"error": None, **left()}


def payload(log: str, tag: str, i: int) -> dict[str, Any]:
    """A payload of the record task; its padding puts payloads in every arena class."""
    k = i % 100  # of 100 payloads: 1 in the 4 KiB class, 9 of 1 KiB, 30 of 256 B, 60 of 64 B
    pad = 2500 if k == 0 else 700 if k < 10 else 150 if k < 40 else 10
    return {"path": log, "tag": tag, "pad": "x" * pad}


def full_then_work(name: str, capacity: int, logdir: str) -> dict[str, Any]:
    log = os.path.join(logdir, "runs.log")
    out: dict[str, Any] = {}
    with service(name, capacity) as svc:
        fill()
        out["free_when_full"] = free_bytes()
        expected: list[str] = []
        outcomes: dict[str, int] = {}
        clients = [svc.client(), shmwheel.connect(name)]
        try:
            a, b = clients
            n = 4000
            tags = [f"m{i}" for i in range(n)]
            delays = [50 + (i * 7) % 400 for i in range(n)]
            handles = list(
                a.schedule_many("record", delays, [payload(log, t, i) for i, t in enumerate(tags)])
            )
            # each outcome asked for as soon as its handle exists: one that ended unasked is
            # forgotten once its slot is taken again (docs/api.md), which a loaded machine
            # makes likely before the loop below reaches it
            for h in handles:
                h.add_done_callback(_ignore)
            expected += tags
            for i in range(40):
                handles.append(b.schedule("record", payload(log, f"s{i}", i), delay_ms=20 + i))
                handles[-1].add_done_callback(_ignore)
                expected.append(f"s{i}")
            for i in range(5):
                handles.append(b.schedule("boom", {"i": i}, delay_ms=30))
                handles[-1].add_done_callback(_ignore)
            op = a.watch(["key"], 30_000, on_complete="record", payload=payload(log, "op", 3))
            expected.append("op")
            out["completed_by_other"] = b.check_and_complete("key")
            deadline = time.monotonic() + WAIT_S
            for h in [*handles, op]:
                try:
                    r = h.result(timeout=max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    r = "not done"
                outcomes[r] = outcomes.get(r, 0) + 1
        finally:
            for c in clients:
                c.close()
        out["outcomes"] = outcomes
        tags_run = []
        if os.path.exists(log):
            with open(log) as f:
                tags_run = [line.split(" ")[4] for line in f]
        out["runs"] = len(tags_run)
        out["distinct"] = len(set(tags_run))
        out["missing"] = sorted(set(expected) - set(tags_run))[:10]
        out["free_before_stop"] = free_bytes()
    os.unlink(FILLER)
    out.update(left())
    return out


def main() -> None:
    mode, name, logdir, capacity = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "start":
        result = start_too_big(name, capacity)
    else:
        result = full_then_work(name, capacity, logdir)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
