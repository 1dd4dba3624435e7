"""The embedding process of one disk-fault case (tests/test_journal_faults.py runs it as a
child in a new session, then SIGKILLs its whole process group: a whole-service crash).

``python tests/journal_fault_driver.py DIR LOG ROLE ERRNO OPS`` starts a journaled
service on DIR and, through the writer's fault seam (the injection word of the service
header, shmwheel/journal/write/disk.py), makes the ROLE's (coordinator, reaper) journal calls in
OPS fail with ERRNO while timers are scheduled, cancelled, fired and settled:

1. before: 300 one-shots due within 0.9 s, 40 to cancel later (due at 1.5 s), and one
   repeating timer (every 40 ms), then the fault;
2. during: schedule until JournalError (the refusal, timed), schedule_many and watch
   refused too; the 40 cancelled (a cancel still works); the one-shots fire and settle;
3. the fault cleared: schedules succeed again; 100 more one-shots due 2.5-3 s later
   (pending at the kill); the repeating timer cancelled; everything due has run.

Then it prints one JSON line (what was accepted, cancelled, refused and how fast) and
sleeps until it is killed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from helpers import TASKS, read_log, wait_for  # noqa: E402

from shmwheel import JournalError, TimerService  # noqa: E402
from shmwheel.journal.write import disk  # noqa: E402
from shmwheel.segment import layout as L  # noqa: E402


def wait(pred, timeout: float, what: str) -> float:
    """wait_for(pred, timeout, what), bounded; returns how long it took (s)."""
    t0 = time.monotonic()
    wait_for(pred, timeout, what, pause=0.005)
    return time.monotonic() - t0


def main(directory: str, log: str, role: str, code: int, ops: int) -> None:
    svc = TimerService(
        tasks=TASKS,
        capacity=20_000,
        executors=1,
        journal=directory,
        journal_segment_bytes=1 << 16,
        journal_keep_hours=1e6,
    ).start()
    assert svc.mem is not None
    c = svc.client()
    out: dict = {"accepted": [], "cancelled": [], "ran_before_kill": [], "ids": {}}

    def one(tag: str, delay: float) -> None:
        h = c.schedule("record", {"path": log, "tag": tag}, delay_ms=delay)
        out["accepted"].append(tag)
        out["ids"][tag] = h.id

    for i in range(300):
        one(f"a{i}", i * 3)
    late = [c.schedule("record", {"path": log, "tag": f"x{i}"}, delay_ms=1500) for i in range(40)]
    out["accepted"] += [f"x{i}" for i in range(40)]
    out["ids"].update({f"x{i}": h.id for i, h in enumerate(late)})
    rep = c.schedule("record", {"path": log, "tag": "rep"}, delay_ms=5, every_ms=40)

    svc.mem.header[L.W_JINJECT] = disk.inject(code, ops, disk.ROLE_BITS[role])
    t_fault = time.monotonic()
    n = 0
    while True:  # accepted until the refusal: those are the service's to keep
        try:
            one(f"d{n}", 200)
            n += 1
        except JournalError as e:
            out["refusal_s"] = time.monotonic() - t_fault
            out["refusal"] = str(e)
            break
        if time.monotonic() - t_fault > 10:
            raise SystemExit("driver: no JournalError within 10 s of the fault")
        time.sleep(0.002)
    for call in (
        lambda: c.schedule_many("record", [100] * 5, [{"path": log, "tag": "m"}] * 5),
        lambda: c.watch(["k"], 1000),
    ):
        try:
            call()
            raise SystemExit("driver: accepted a call while the journal had a fault")
        except JournalError:
            pass
    out["faults"] = svc.stats()["journal"]["faults"]
    for i, h in enumerate(late):  # cancels still work, and are recorded once it can write
        if h.cancel():
            out["cancelled"].append(f"x{i}")
    time.sleep(0.3)  # the one-shots fire and settle through the fault
    out["held_bytes"] = svc.stats()["journal"]["faults"].get(role, {}).get("held_bytes", 0)

    svc.mem.header[L.W_JINJECT] = 0
    out["recovered_s"] = wait(lambda: not svc.stats()["journal"]["faults"], 5, "the repair")
    wait(lambda: not svc.mem.header[L.W_JREFUSE], 2, "the gate to open")
    for i in range(100):
        one(f"b{i}", 2500 + 5 * i)
    out["rep_cancelled"] = rep.cancel()
    due = {t for t in out["accepted"] if t[0] in "adx"} - set(out["cancelled"])
    wait(lambda: due <= {r[0] for r in read_log(Path(log))}, 10, "the due timers to run")
    wait(lambda: svc.stats()["in_flight"] == 0, 5, "nothing in flight")
    out["ran_before_kill"] = sorted({r[0] for r in read_log(Path(log))})
    print(json.dumps(out), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
