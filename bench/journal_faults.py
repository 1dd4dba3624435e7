"""The journal on a disk that fills up: a service journaling to a small tmpfs under a
steady load, while the volume is filled to the last byte and freed again, several times.

    python bench/journal_faults.py --seconds 40 --cycles 4 --json bench/results/journal-faults.json

A producer thread schedules one-shot timers (delays 0-500 ms) at --rate per second and
cancels one in ten; every ``schedule`` either returns (accepted) or raises JournalError
(refused). A filler thread, --cycles times, fills the volume with a file until ENOSPC,
holds it full for --full-s seconds and deletes it. Each task appends a line (its id,
deadline and start time) to a log on another disk. At the end the producer stops, the
service runs out what is pending and stops, and every accepted timer is checked against
the log: ran, lost (accepted, not cancelled, never ran: must be 0), ran twice (must be 0),
early (must be 0). Also: how long each fill took to be refused and each free to be taken
again, and the most the writers held in memory.

Needs root (it mounts the tmpfs; unmounted in a finally, also on Ctrl-C). Exit 1 if an
invariant failed.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shmwheel import JournalError, TimerService

TASKS = {"record": "shmwheel.examples.tasks:append_line"}


def fill(path: Path) -> int:
    """Zeros into `path` until the volume is full; the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        block = bytes(65536)
        while True:
            try:
                n += f.write(block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(block) == 512:
                    return n
                block = bytes(len(block) // 2)


def run(args: argparse.Namespace, vol: Path, logdir: Path) -> dict:
    log = logdir / "runs.log"
    stop = threading.Event()
    accepted: dict[str, int] = {}  # tag -> deadline_ms
    cancelled: set[str] = set()
    refused = Counter[str]()
    events: list[dict] = []
    held_max = 0
    with (
        TimerService(
            tasks=TASKS,
            capacity=200_000,
            executors=max(1, (os.cpu_count() or 2) - 1),
            journal=vol / "journal",
            journal_segment_bytes=1 << 16,
        ) as svc,
        svc.client() as c,
    ):

        def faults() -> dict:
            return svc.stats()["journal"]["faults"]

        def produce() -> None:
            rng, n, period = random.Random(args.seed), 0, 1.0 / args.rate
            next_t = time.monotonic()
            while not stop.is_set():
                tag = f"t{n}"
                n += 1
                try:
                    h = c.schedule(
                        "record", {"path": str(log), "tag": tag}, delay_ms=rng.uniform(0, 500)
                    )
                    accepted[tag] = h.deadline_ms
                    if rng.random() < 0.1 and h.cancel():
                        cancelled.add(tag)
                except JournalError:
                    refused["journal"] += 1
                next_t += period
                time.sleep(max(0.0, next_t - time.monotonic()))

        producer = threading.Thread(target=produce, name="producer")
        producer.start()
        try:
            cycle_s = args.seconds / args.cycles
            for k in range(args.cycles):
                time.sleep(cycle_s / 3)
                t0 = time.monotonic()
                filled = fill(vol / "filler")
                seen = refused["journal"]
                while refused["journal"] == seen and time.monotonic() - t0 < 30:
                    time.sleep(0.005)
                refused_after = time.monotonic() - t0
                end = time.monotonic() + args.full_s
                while time.monotonic() < end:
                    held_max = max(held_max, sum(f["held_bytes"] for f in faults().values()))
                    time.sleep(0.05)
                t1 = time.monotonic()
                os.unlink(vol / "filler")
                while faults() and time.monotonic() - t1 < 30:
                    time.sleep(0.005)
                events.append(
                    {
                        "cycle": k + 1,
                        "filled_bytes": filled,
                        "refused_after_s": round(refused_after, 3),
                        "writes_again_after_s": round(time.monotonic() - t1, 3),
                    }
                )
                print(f"cycle {k + 1}: {events[-1]}", flush=True)
                time.sleep(cycle_s * 2 / 3 - args.full_s)
        finally:
            stop.set()
            producer.join()
        end = time.monotonic() + 60
        while time.monotonic() < end:
            st = svc.stats()
            if st["pending"] == 0 and st["in_flight"] == 0:
                break
            time.sleep(0.05)
    rows = [line.split(" ") for line in log.read_text().splitlines()] if log.exists() else []
    runs = Counter(r[4] for r in rows)
    early = sum(1 for r in rows if int(r[2]) < int(r[1]) * 1_000_000)
    due = set(accepted) - cancelled
    return {
        "seconds": args.seconds,
        "rate": args.rate,
        "volume": args.size,
        "cycles": events,
        "accepted": len(accepted),
        "refused": refused["journal"],
        "cancelled": len(cancelled),
        "ran": sum(1 for t in due if runs[t]),
        "lost": sum(1 for t in due if not runs[t]),
        "ran_twice": sum(1 for t, n in runs.items() if n > 1),
        "ran_after_cancel": sum(1 for t in cancelled if runs[t]),
        "early": early,
        "held_bytes_max": held_max,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="length of the run")
    ap.add_argument("--cycles", type=int, default=4, help="times the volume is filled")
    ap.add_argument("--full-s", type=float, default=2.0, help="how long it stays full")
    ap.add_argument("--rate", type=float, default=2000.0, help="timers scheduled per second")
    ap.add_argument("--size", default="4m", help="the tmpfs's size (mount's size=)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if args.seconds / args.cycles < 3 * args.full_s:
        ap.error("each cycle (seconds / cycles) must last at least 3 x --full-s")
    with tempfile.TemporaryDirectory(prefix="shmwheel-faults-") as tmp:
        vol, logdir = Path(tmp) / "vol", Path(tmp) / "log"
        vol.mkdir()
        logdir.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={args.size}", "tmpfs", str(vol)], check=True
        )
        try:
            out = run(args, vol, logdir)
        finally:
            if subprocess.run(["umount", str(vol)], check=False).returncode:
                subprocess.run(["umount", "-l", str(vol)], check=False)
    text = "\n".join(f"{k:>18}: {v}" for k, v in out.items() if k != "cycles")
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        command = "python bench/journal_faults.py " + " ".join(sys.argv[1:])
        cycles = "\n".join(f"cycle {e['cycle']}: {e}" for e in out["cycles"])
        Path(args.json).with_suffix(".txt").write_text(f"{command}\n{cycles}\n{text}\n")
    bad = out["lost"] or out["ran_twice"] or out["ran_after_cancel"] or out["early"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
