"""Soak: a steady load on one service for a long time, with lateness and memory over time.

    python bench/soak.py [--minutes 30] [--rate 20000] [--window-s 10] [--json PATH]

A producer schedules --rate no-op timers per second (delays uniform in 10 ms .. 10 s, so
about rate x 5 s are pending at any time) and cancels --cancel-fraction of them before
they fire. Every window it prints, and records, what that window did: timers scheduled,
fired and cancelled, lateness p50 / p99 / p99.9 / max of the runs in that window (from the
service's histogram), early runs, pending, and the resident memory of the service
processes. A flat run (no growth in lateness, memory or pending) is the point. Bounded:
--minutes plus ~30 s to settle; the service is stopped (no segment, no process left)
also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

import shmwheel
from shmwheel.service.stats import lateness_summary


def rss_mb(svc: shmwheel.TimerService) -> float:
    """Resident memory of the service processes (their shared segment counted once each)."""
    total = 0
    for p in svc.procs.values():
        try:
            total += psutil.Process(p.pid).memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=20_000.0, help="timers per second")
    ap.add_argument("--cancel-fraction", type=float, default=0.1)
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--json", type=Path, help="write every window's figures here")
    args = ap.parse_args()
    if args.minutes <= 0 or args.rate <= 0 or not 0 <= args.cancel_fraction < 1:
        ap.error("--minutes and --rate must be > 0, --cancel-fraction in [0, 1)")
    rng = np.random.default_rng(1)
    windows: list[dict[str, Any]] = []
    step_s = 0.02
    per_step = max(1, round(args.rate * step_s))
    with (
        shmwheel.TimerService(
            tasks={"noop": "shmwheel.examples.tasks:noop"},
            capacity=max(100_000, int(args.rate * 12)),
        ) as svc,
        svc.client() as client,
    ):
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        last = svc.stats()
        next_window = t0 + args.window_s
        scheduled = 0
        print(
            f"{'t (s)':>7} {'sched/s':>9} {'fired/s':>9} {'pending':>8} {'p50':>6} {'p99':>6} "
            f"{'p99.9':>6} {'max':>6} {'early':>5} {'rss MB':>7}",
            flush=True,
        )
        try:
            while time.monotonic() < end:
                tick = time.monotonic()
                handles = client.schedule_many("noop", rng.uniform(10, 10_000, per_step))
                scheduled += len(handles)
                k = int(len(handles) * args.cancel_fraction)
                if k:
                    handles[:k].cancel()
                now = time.monotonic()
                if now >= next_window:
                    st = svc.stats()
                    hist = np.array(st["lateness_histogram"]) - np.array(last["lateness_histogram"])
                    dt = now - (next_window - args.window_s)
                    w = {
                        "t_s": round(now - t0, 1),
                        "scheduled_per_s": (st["scheduled"] - last["scheduled"]) / dt,
                        "fired_per_s": (st["fired"] - last["fired"]) / dt,
                        "cancelled_per_s": (st["cancelled"] - last["cancelled"]) / dt,
                        "pending": st["pending"],
                        "early": st["early"] - last["early"],
                        "lateness_ms": lateness_summary(hist),
                        "rss_mb": rss_mb(svc),
                        "restarts": sum(st["restarts"].values()),
                    }
                    windows.append(w)
                    late = w["lateness_ms"]
                    print(
                        f"{w['t_s']:7.1f} {w['scheduled_per_s']:9.0f} {w['fired_per_s']:9.0f} "
                        f"{w['pending']:8d} {late['p50']:6.2f} {late['p99']:6.2f} "
                        f"{late['p999']:6.2f} {late['max']:6.2f} {w['early']:5d} "
                        f"{w['rss_mb']:7.0f}",
                        flush=True,
                    )
                    last, next_window = st, next_window + args.window_s
                time.sleep(max(0.0, step_s - (time.monotonic() - tick)))
        except KeyboardInterrupt:
            print("interrupted: stopping the service", file=sys.stderr)
        final = svc.stats()
    early = final["early"]
    p99s = [w["lateness_ms"]["p99"] for w in windows]
    summary = {
        "minutes": args.minutes,
        "rate": args.rate,
        "scheduled": scheduled,
        "windows": len(windows),
        "early": early,
        "lateness_ms_all": final["lateness_ms"],
        "worst_window_p99_ms": max(p99s, default=0.0),
        "median_window_p99_ms": float(np.median(p99s)) if p99s else 0.0,
        "rss_mb_first_last": [windows[0]["rss_mb"], windows[-1]["rss_mb"]] if windows else [],
        "restarts": final["restarts"],
    }
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "windows": windows}, indent=1))
    return 0 if early == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
