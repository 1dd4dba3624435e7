"""Chaos soak: schedule, reset and cancel timers while SIGKILLing service processes at
random, then prove every timer had exactly one outcome and none ran early.

    python bench/chaos.py [--seconds 60] [--rate 20000] [--kill-every-ms 300] [--seed 1]
                          [--roles coordinator,reaper,exec0] [--reset-fraction 0.2]

Timers run
``shmwheel.examples.tasks.append_line``, which writes one line per run; a cancel that returned True
must have no line, every other timer exactly one — except a task whose executor was killed
while running it (its outcome is "crashed": it may have written its line or not, and it
never runs again). A share of the timers is reset once, at a random moment before its
deadline, to a new delay: a timer runs with the deadline of its reset if that returned True,
else with the one it was scheduled with, and never before it. Prints the figures and exits
1 if any invariant broke. Bounded: the run
takes --seconds plus at most 60 s to settle, and stops the service (no segment, no
process left) whatever happens. The test suite runs small versions of each kill.
"""

from __future__ import annotations

import argparse
import atexit
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter

import numpy as np

import shmwheel


def killer(
    svc: shmwheel.TimerService,
    stop: threading.Event,
    every_ms: float,
    rng: random.Random,
    kills: Counter[str],
    roles: list[str] | None = None,
) -> None:
    """SIGKILL a random service process (of `roles`, if given) about every `every_ms`,
    until stopped."""
    while not stop.wait(rng.uniform(0.5, 1.5) * every_ms / 1000):
        role = rng.choice(roles or sorted(svc.procs))
        proc = svc.procs.get(role)
        if proc is None or proc.poll() is not None:
            continue
        try:
            os.kill(proc.pid, signal.SIGKILL)
            kills[role] += 1
        except ProcessLookupError:
            pass


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=20_000, help="timers scheduled per second")
    ap.add_argument("--kill-every-ms", type=float, default=300.0)
    ap.add_argument("--cancel-fraction", type=float, default=0.1)
    ap.add_argument("--reset-fraction", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--roles", help="kill only these roles, e.g. coordinator,exec0 (default: every one)"
    )
    ap.add_argument(
        "--journal",
        metavar="DIR",
        help="journal the service into DIR (kept whole) and, for each timer that never ran, "
        "print what the journal recorded of it",
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    nprng = np.random.default_rng(args.seed)
    fd, log = tempfile.mkstemp(prefix="shmwheel-chaos-", suffix=".log")
    os.close(fd)  # the executors append to it by name
    atexit.register(_remove, log)  # also when the run fails or is interrupted
    kills: Counter[str] = Counter()
    roles = args.roles.split(",") if args.roles else None
    stop = threading.Event()
    cancelled: set[int] = set()
    not_cancelled: set[int] = set()
    deadline_of: dict[int, int] = {}  # tag -> the deadline it must run with
    resets = Counter[str]()
    refused = 0  # batches the watchdog refused (a role restarting faster than it allows)
    scheduled = 0
    t0 = time.monotonic()
    options = {"journal": args.journal, "journal_keep_hours": 1e6} if args.journal else {}
    id_batches: list[np.ndarray] = []  # the handle ids of the tags, batch by batch
    with shmwheel.TimerService(
        tasks={"rec": "shmwheel.examples.tasks:append_line"}, capacity=200_000, **options
    ) as svc:
        if roles and set(roles) - set(svc.procs):
            ap.error(f"--roles: unknown {sorted(set(roles) - set(svc.procs))}; the roles are "
                     f"{', '.join(sorted(svc.procs))}")  # fmt: skip
        thread = threading.Thread(
            target=killer, daemon=True, args=(svc, stop, args.kill_every_ms, rng, kills, roles)
        )
        with svc.client() as client:
            thread.start()
            batch = max(1, int(args.rate / 20))
            pending_cancels: list[tuple[float, int, int]] = []
            pending_resets: list[tuple[float, int, shmwheel.TimerHandle, float]] = []
            while time.monotonic() - t0 < args.seconds:
                tick = time.monotonic()
                tags = range(scheduled, scheduled + batch)
                delays = nprng.uniform(0, 500, batch)
                payloads = [{"path": log, "tag": t} for t in tags]
                try:
                    handles = client.schedule_many("rec", delays, payloads)
                except shmwheel.Full as e:  # a stuck ring while the coordinator restarts
                    handles = e.accepted if e.accepted is not None else []
                except shmwheel.ShmwheelError:  # the watchdog refuses new timers while a
                    handles = []  # role restarts too often: none of this batch is accepted
                    refused += 1
                id_batches.append(np.asarray(getattr(handles, "ids", []), np.int64))
                for tag, h, d in zip(tags, handles, delays, strict=False):  # accepted: a prefix
                    deadline_of[tag] = h.deadline_ms
                    if rng.random() < args.reset_fraction:
                        at = tick + d / 1000 * rng.random()
                        pending_resets.append((at, tag, h, rng.uniform(0, 500)))
                    if rng.random() < args.cancel_fraction:
                        pending_cancels.append((tick + d / 1000 * rng.random(), tag, h))
                    else:
                        not_cancelled.add(tag)
                scheduled += len(handles)
                now = time.monotonic()
                due = [c for c in pending_cancels if c[0] <= now]
                pending_cancels = [c for c in pending_cancels if c[0] > now]
                for _, tag, h in due:
                    (cancelled if h.cancel() else not_cancelled).add(tag)
                moved = [r for r in pending_resets if r[0] <= now]
                pending_resets = [r for r in pending_resets if r[0] > now]
                for _, tag, h, delay in moved:
                    try:
                        won = h.reset(delay)
                    except shmwheel.ShmwheelError:  # Full (a stuck ring while the
                        won = False  # coordinator restarts) or the watchdog's refusal
                    resets["won" if won else "lost"] += 1
                    if won:
                        deadline_of[tag] = h.deadline_ms
                print(
                    f"\r{now - t0:5.1f} s  scheduled {scheduled}  kills {sum(kills.values())}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(max(0.0, 0.05 - (time.monotonic() - tick)))
            for _, tag, h in pending_cancels:
                (cancelled if h.cancel() else not_cancelled).add(tag)
            stop.set()
            thread.join()
            # settled: nothing pending, and no fired timer still waiting for its run or its
            # outcome ("in_flight"; stopping the service drops them)
            end = time.monotonic() + 60
            while time.monotonic() < end:
                left = svc.stats()
                if left["pending"] == 0 and left["in_flight"] == 0:
                    break
                time.sleep(0.1)
            time.sleep(1.0)  # let the last outcomes be counted
            st = svc.stats()
    print(file=sys.stderr)
    runs: Counter[int] = Counter()
    early = 0
    torn = 0
    wrong_deadline = 0  # ran with a deadline that is not its last won reset's (or its own)
    with open(log) as f:
        for line in f:
            fields = line.split()
            if len(fields) > 6:  # an executor killed inside its write left a torn line in
                torn += 1  # front of the next one (that run is recorded crashed)
                fields = fields[-6:]
            _hid, deadline, run_ns, _attempt, tag, _key = fields
            runs[int(tag)] += 1
            early += int(run_ns) < int(deadline) * 1_000_000
            wrong_deadline += int(deadline) != deadline_of.get(int(tag), int(deadline))
    _remove(log)
    twice = [t for t, c in runs.items() if c > 1]
    ran_cancelled = [t for t in cancelled if runs[t]]
    missing = [t for t in not_cancelled if not runs[t]]
    print(
        f"{args.seconds:.0f} s, seed {args.seed}: scheduled {scheduled}, cancelled (True) "
        f"{len(cancelled)}, resets won {resets['won']} / lost {resets['lost']}, ran "
        f"{len(runs)}; kills {dict(sorted(kills.items()))}; "
        f"restarts {st['restarts']}; lock repairs {st['repairs']}; batches refused {refused}"
    )
    print(
        f"ran twice {len(twice)}; ran after a True cancel {len(ran_cancelled)}; ran early "
        f"{early}; ran at a deadline no reset won {wrong_deadline}; never ran {len(missing)} "
        f"(executor crashes recorded: {st['crashed']}); "
        f"pending at the end {st['pending']}, in flight {st['in_flight']}; task errors "
        f"{st['task_errors']}; ring garbage {st['ring_garbage']}; torn log lines {torn}"
    )
    ok = (
        not twice
        and not ran_cancelled
        and not early
        and not wrong_deadline
        and len(missing) <= st["crashed"]
        and st["pending"] == 0
        and st["in_flight"] == 0
        and st["task_errors"] == 0
    )
    if args.journal and len(missing) > st["crashed"]:
        ids = np.concatenate(id_batches)  # tags are dense: tag t is ids[t]
        print(journal_story(args.journal, ids[sorted(missing)].tolist()))
    print("invariants hold" if ok else "INVARIANT BROKEN")
    return 0 if ok else 1


def journal_story(directory: str, missing: list[int]) -> str:
    """What the journal recorded of each timer that never ran, tallied by the sequence of
    its records' kinds (an outcome with its code), with one example id for each."""
    from shmwheel.journal import format as F
    from shmwheel.journal import reader

    want = np.array(sorted(set(missing)), np.int64)
    seen: dict[int, list[str]] = {i: [] for i in want.tolist()}
    oc = 3 + F.FIELDS[F.OUTCOME].index("outcome")
    for seg in reader.read(directory):
        rows = seg.rows[np.isin(seg.rows[:, 3], want)]
        role = F.ROLES.get((seg.header or {}).get("role", 0), "?")
        for r in rows.tolist():
            kind = F.KIND_NAMES.get(r[2], str(r[2]))
            if r[2] == F.OUTCOME:
                kind += f"({F.OUTCOMES.get(r[oc], r[oc])})"
            seen[r[3]].append(f"{kind}@{role}")
    stories = Counter(",".join(v) or "nothing" for v in seen.values())
    example = {}
    for i, v in seen.items():
        example.setdefault(",".join(v) or "nothing", i)
    lines = [f"the journal on the {len(want)} timers that never ran:"]
    for story, n in stories.most_common():
        lines.append(f"  {n:6d}  {story}   (e.g. id {example[story]:#x})")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
