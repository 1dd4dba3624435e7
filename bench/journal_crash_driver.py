"""The driver of the whole-service crash harness (bench/journal_crash_harness.py): the
embedding process of one cycle, which the harness spawns as a child in a new session
(``python bench/journal_crash_driver.py --workdir ... --cycle N ...``).

It starts ``TimerService(journal=DIR, journal_keep_hours=1e6)`` (so the audit can read every
epoch) and schedules one-shot timers (delays 0-400 ms, some 1-3 s; some tasks sleep 10-40
ms), a few repeating ones (every 50-150 ms), and cancels some, its own by handle and earlier
cycles' by id (so a recovered id is exercised), until the harness SIGKILLs its whole
process group. The FINAL driver (``--final``) starts a service on the same journal,
schedules nothing, waits for every deadline to pass, cancels the repeating timers still
alive (they would run forever), waits until nothing is left to fire and stops cleanly.

Logs (plain appends, one line each; a process kill leaves the page cache intact), read by
bench/journal_crash_audit.py:

``accepted.log`` (the drivers), one line per event:
    S cycle service t_ns                     the driver is about to start its service
    I tag cycle kind t_ns                    about to schedule (kind o: one-shot, r: repeat)
    A tag id deadline_ms kind every cycle t_ns   schedule() returned
    C id cycle t_ns                          about to cancel
    R id result(0/1) t_ns cycle              cancel() returned
``executions.log`` (the task, journal_crash_tasks.mark): ``E id attempt start_ns deadline_ms
fired_ms cycle pid tag``.

A kill can fall between a call's return and its log line, so the driver logs intents
before each call: a tag scheduled but not known to be accepted, or a cancel whose result
is unknown, is "in doubt" at the kill (the audit allows either outcome for it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

TASKS = {"mark": "journal_crash_tasks:mark"}
CAPACITY = 20_000
KEEP_HOURS = 1e6
ACCEPTED, EXECUTIONS = "accepted.log", "executions.log"


def now_ns() -> int:
    return time.monotonic_ns()


# ==========================================================================================
# the driver (runs in its own process: `python journal_crash_harness.py driver ...`)
# ==========================================================================================
class Log:
    """A plain append-only text log: each line one write + flush (survives a SIGKILL of
    the writer in the page cache)."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def __call__(self, *fields: object) -> None:
        self.f.write(" ".join(map(str, fields)) + "\n")
        self.f.flush()


def write_json(path: str, obj: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, default=str)
    os.replace(tmp, path)


def _driver(args: argparse.Namespace) -> int:
    import shmwheel

    work = args.workdir
    os.environ["JC_CYCLE"] = str(args.cycle)
    os.environ["JC_EXEC_LOG"] = os.path.join(work, EXECUTIONS)
    rng = random.Random(args.seed)
    log = Log(os.path.join(work, ACCEPTED))
    with open(args.carry) as f:
        carry = json.load(f)
    svc = shmwheel.TimerService(
        args.name,
        tasks=TASKS,
        journal=args.journal,
        executors=args.executors,
        capacity=CAPACITY,
        journal_keep_hours=args.keep_hours,
        journal_segment_bytes=args.segment_bytes,
    )
    # is the previous (killed) service's segment still there for this start to salvage?
    prev = int(bool(args.prev_name) and os.path.exists(f"/dev/shm/shmwheel.{args.prev_name}"))
    log("S", args.cycle, args.name, now_ns(), prev)
    svc.start()
    write_json(
        os.path.join(work, f"recovery-{args.cycle}.json"),
        {
            "cycle": args.cycle,
            "name": args.name,
            "recovery": svc.recovery,
            "executors": args.executors,
            "pid": os.getpid(),
            "t_ns": now_ns(),
        },
    )
    print("RECOVERY", args.cycle, json.dumps(svc.recovery, default=str), flush=True)
    client = svc.client()
    if args.final:
        return _final(args, svc, client, carry, log)
    parent = os.getppid()
    give_up = time.monotonic() + args.max_seconds
    # one-shots that may be cancelled: [id, deadline_ms, handle or None]
    oneshots: list[list[Any]] = [[i, d, None] for i, d in carry["oneshots"]]
    repeats: list[list[Any]] = [[i, None] for i in carry["repeats"]]  # live, not cancelled
    seq = 0

    def cancel(hid: int, handle: Any) -> None:
        log("C", hid, args.cycle, now_ns())
        ok = handle.cancel() if handle is not None else client.cancel(hid)
        log("R", hid, int(bool(ok)), now_ns(), args.cycle)

    while time.monotonic() < give_up and os.getppid() == parent:
        for _ in range(rng.randint(1, 3)):
            seq += 1
            tag = f"o{args.cycle}-{seq}"
            delay = rng.uniform(0, 400) if rng.random() < 0.85 else rng.uniform(1000, 3000)
            sleep_ms = rng.randint(10, 40) if rng.random() < 0.25 else 0
            log("I", tag, args.cycle, "o", now_ns())
            h = client.schedule("mark", [tag, sleep_ms], delay_ms=delay)
            log("A", tag, h.id, h.deadline_ms, "o", 0, args.cycle, now_ns())
            oneshots.append([h.id, h.deadline_ms, h])
        if rng.random() < 0.08 and len(repeats) < args.max_repeats + 1:
            seq += 1
            tag = f"r{args.cycle}-{seq}"
            every = rng.randint(50, 150)
            log("I", tag, args.cycle, "r", now_ns())
            h = client.schedule("mark", [tag, 0], delay_ms=rng.uniform(0, 200), every_ms=every)
            log("A", tag, h.id, h.deadline_ms, "r", every, args.cycle, now_ns())
            repeats.append([h.id, h])
        # cancel about 15% of the one-shots, at a random moment before (or at) their deadline
        if oneshots and rng.random() < 0.3:
            t = now_ns() // 1_000_000
            live = [o for o in oneshots if o[1] > t - 20]
            oneshots = live
            if live:
                o = live.pop(rng.randrange(len(live)))
                cancel(o[0], o[2])
        if len(repeats) > args.max_repeats or (repeats and rng.random() < 0.01):
            r = repeats.pop(rng.randrange(len(repeats)))
            cancel(r[0], r[1])
        time.sleep(rng.uniform(0.010, 0.025))
    # not killed in time (the harness is gone or stuck): stop cleanly, leave nothing behind
    client.close()
    svc.stop()
    return 3


def _final(args: argparse.Namespace, svc: Any, client: Any, carry: dict[str, Any], log: Log) -> int:
    """Schedule nothing; let every deadline pass; cancel the repeating timers (the known
    ones and any the executions log reveals); wait until nothing is left to fire; stop."""
    t_ready = time.monotonic()
    exec_log = os.path.join(args.workdir, EXECUTIONS)
    wait_until_ms = carry["wait_until_ms"]
    while now_ns() // 1_000_000 < wait_until_ms or time.monotonic() - t_ready < args.min_final_s:
        time.sleep(0.05)
    done: set[int] = set()
    known = set(carry["repeats"])
    stable = 0
    last = None
    timed_out = True
    give_up = time.monotonic() + args.max_seconds
    while time.monotonic() < give_up:
        known |= _repeat_ids_seen(exec_log)
        for hid in sorted(known - done):
            log("C", hid, args.cycle, now_ns())
            ok = client.cancel(hid)
            log("R", hid, int(bool(ok)), now_ns(), args.cycle)
            done.add(hid)
        s = svc.stats()
        size = os.path.getsize(exec_log) if os.path.exists(exec_log) else 0
        snap = (s["pending"], s["fired"], s["completed"] + s["task_errors"] + s["crashed"], size)
        if s["pending"] == 0 and snap[1] == snap[2] and snap == last:
            stable += 1
            if stable >= 3:
                timed_out = False
                break
        else:
            stable = 0
        last = snap
        time.sleep(0.2)
    stats = svc.stats()
    client.close()
    svc.stop()
    keep = (
        "pending",
        "scheduled",
        "fired",
        "cancelled",
        "completed",
        "task_errors",
        "crashed",
        "rearmed",
        "early",
        "ring_garbage",
        "ring_stale",
        "retired",
        "repairs",
        "lateness_ms",
        "journal",
    )
    write_json(
        os.path.join(args.workdir, "final.json"),
        {
            "timed_out": timed_out,
            "stats": {k: stats.get(k) for k in keep},
            "recovery": svc.recovery,
            "repeats_cancelled": len(done),
        },
    )
    return 4 if timed_out else 0


def _repeat_ids_seen(path: str) -> set[int]:
    ids = set()
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) == 9 and p[8].startswith("r"):
                    ids.add(int(p[1]))
    except FileNotFoundError:
        pass
    return ids


def driver_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--cycle", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--executors", type=int, default=1)
    ap.add_argument("--carry", required=True)
    ap.add_argument("--max-repeats", type=int, default=4)
    ap.add_argument("--keep-hours", type=float, default=KEEP_HOURS)
    ap.add_argument("--segment-bytes", type=int, default=64 << 20)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--min-final-s", type=float, default=1.0)
    ap.add_argument("--prev-name", default="")
    ap.add_argument("--final", action="store_true")
    return _driver(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(driver_main(sys.argv[1:]))
