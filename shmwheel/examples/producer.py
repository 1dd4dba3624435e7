"""Load producer for a shmwheel service, using only the public client API:
``python -m shmwheel.examples.producer``::

    python -m shmwheel.examples.producer --standalone --count 20000 --cancel-fraction 0.1
    python -m shmwheel.examples.producer --service NAME --rate 5000 --count 100000 \\
        --delay-ms 50,500

Its flags, the progress lines and the report it prints, and ``main()``, which starts a
service of its own (``--standalone``: tasks ``noop``, ``log``, ``fail`` from
``shmwheel.examples.tasks``; it prints the service's ``stats()`` and stops it) or
connects to a running one (``--service NAME``), runs the load of ``producer_load``
(``run(client, ...)``, the same load as a function) and stops cleanly on Ctrl-C or
SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import sys
import threading
import time
from typing import Any

import shmwheel

from .producer_load import MAX_PAYLOAD, check_args, run, wait_settled

STANDALONE_TASKS = {
    "noop": "shmwheel.examples.tasks:noop",
    "log": "shmwheel.examples.tasks:log_fire",
    "fail": "shmwheel.examples.tasks:fail",
}


def _delay_range(text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected MIN,MAX or one value in ms, got {text!r}"
        ) from None
    if len(values) == 1:
        values *= 2
    if len(values) != 2 or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected MIN,MAX or one value in ms, got {text!r}")
    if values[0] < 0 or values[1] < values[0]:
        raise argparse.ArgumentTypeError(f"need 0 <= MIN <= MAX, got {text!r}")
    return values[0], values[1]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m shmwheel.examples.producer",
        description="Schedule (and cancel) timers on a shmwheel service and report figures.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--service", metavar="NAME", help="connect to this running service")
    where.add_argument(
        "--standalone",
        action="store_true",
        help="start a TimerService, run, wait for the timers, print stats, stop",
    )
    p.add_argument("--count", type=int, default=10_000, help="timers to schedule (10000)")
    p.add_argument(
        "--rate", type=float, default=0.0, help="timers per second; 0 = as fast as possible (0)"
    )
    p.add_argument(
        "--delay-ms",
        type=_delay_range,
        default=(10.0, 1000.0),
        metavar="MIN,MAX",
        help="delay range in ms, or one value (10,1000)",
    )
    p.add_argument(
        "--distribution",
        choices=("uniform", "exponential"),
        default="uniform",
        help="delay distribution over MIN..MAX (uniform)",
    )
    p.add_argument(
        "--payload-size",
        type=int,
        default=0,
        metavar="BYTES",
        help=f"msgpack-encoded payload bytes, 0..{MAX_PAYLOAD}; 0 = None (0)",
    )
    p.add_argument(
        "--cancel-fraction", type=float, default=0.0, help="share of timers to cancel, 0..1 (0)"
    )
    p.add_argument(
        "--cancel-at",
        type=float,
        default=0.0,
        metavar="F",
        help="cancel each chosen timer F x its delay after scheduling it: 0 at "
        "once, 1 at its deadline (racing the fire), >1 after (0)",
    )
    p.add_argument("--task", default="noop", help="registered task name (noop)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="random seed (default: random, printed with the figures)",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=256,
        help="timers per call: 1 uses schedule(), more schedule_many() (256)",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=300.0,
        help="stop scheduling and cancelling after this long; with "
        "--standalone this also bounds the wait for the timers (300)",
    )
    p.add_argument(
        "--wait-timeout",
        type=float,
        default=None,
        metavar="S",
        help="--standalone: how long to wait for the timers after the last one is due (default 30)",
    )
    p.add_argument(
        "--name", default=None, help="--standalone: the service's name (default: generated)"
    )
    p.add_argument(
        "--capacity", type=int, default=None, help="--standalone: max pending timers (1000000)"
    )
    p.add_argument(
        "--executors",
        type=int,
        default=None,
        help="--standalone: executor processes (default: nproc - 1)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _progress_line(f: dict[str, Any]) -> None:
    if "phase" in f:
        rate = f["scheduled"] / f["elapsed_s"] if f["elapsed_s"] else 0.0
        msg = (
            f"{f['phase']}: {f['scheduled']}/{f['count']} scheduled ({rate:,.0f}/s), "
            f"cancelled {f['cancelled_true']} (false {f['cancel_false']}), "
            f"{f['cancels_waiting']} cancels waiting, full retries {f['full_retries']}"
        )
    else:  # service stats while waiting
        msg = (
            f"waiting: pending {f['pending']}, fired {f['fired']}, "
            f"completed {f['completed']}, cancelled {f['cancelled']}"
        )
    print(f"producer: {msg}", file=sys.stderr, flush=True)


def _print_human(figures: dict[str, Any], stats: dict[str, Any] | None) -> None:
    f = figures
    print(
        f"scheduled       {f['scheduled']} of {f['count']} ({f['task']}, batch {f['batch']}, "
        f"seed {f['seed']})"
    )
    print(
        f"cancelled       {f['cancelled_true']} True, {f['cancel_false']} False"
        + (f", {f['cancels_skipped']} not attempted" if f["cancels_skipped"] else "")
    )
    target = f"target {f['target_rate']:,.0f}/s" if f["target_rate"] else "no target"
    print(
        f"rate            {f['rate']:,.0f} timers/s ({target}); scheduling took "
        f"{f['schedule_s']:.3f} s, all {f['elapsed_s']:.3f} s"
    )
    if f["full_retries"]:
        print(f"full retries    {f['full_retries']}")
    if f["stopped"]:
        print(f"stopped early   {f['stopped']}")
    if stats is not None:
        late = stats["lateness_ms"]
        print(
            f"service         scheduled {stats['scheduled']}, fired {stats['fired']}, "
            f"cancelled {stats['cancelled']}, completed {stats['completed']}, "
            f"errors {stats['task_errors']}, crashed {stats['crashed']}, "
            f"pending {stats['pending']}, early {stats['early']}"
        )
        print(
            f"lateness ms     p50 {late['p50']:.3f}  p99 {late['p99']:.3f}  "
            f"p999 {late['p999']:.3f}  max {late['max']:.3f}"
        )
        if stats.get("restarts"):
            print(f"restarts        {stats['restarts']}")


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    for flag, value in (
        ("--wait-timeout", a.wait_timeout),
        ("--name", a.name),
        ("--capacity", a.capacity),
        ("--executors", a.executors),
    ):
        if value is not None and not a.standalone:
            p.error(f"{flag} only applies with --standalone")
    # the load's shape, as check_args and run take it
    shape = dict(
        rate=a.rate,
        count=a.count,
        delay_ms=a.delay_ms,
        distribution=a.distribution,
        payload_size=a.payload_size,
        cancel_fraction=a.cancel_fraction,
        cancel_at=a.cancel_at,
        batch=a.batch,
        max_seconds=a.max_seconds,
    )
    try:
        check_args(**shape)
        if a.wait_timeout is not None and not a.wait_timeout >= 0:
            raise ValueError(f"wait_timeout must be >= 0, got {a.wait_timeout}")
        if a.standalone and a.task not in STANDALONE_TASKS:
            raise ValueError(
                f"task must be one of {', '.join(STANDALONE_TASKS)} with "
                f"--standalone, got {a.task!r}"
            )
    except ValueError as e:  # name the flag, not the parameter: "--payload-size must be ..."
        p.error(re.sub(r"^(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), str(e)))

    # Ctrl-C / SIGTERM: stop at the next batch boundary and clean up (a second Ctrl-C
    # raises KeyboardInterrupt, still inside the try/finally below).
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print("producer: stopping (Ctrl-C again to abort)", file=sys.stderr, flush=True)

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    progress = None if a.quiet else _progress_line
    svc: shmwheel.TimerService | None = None
    client: shmwheel.Client | None = None
    stats: dict[str, Any] | None = None
    code = 0
    try:
        if a.standalone:
            svc = shmwheel.TimerService(
                a.name,
                tasks=STANDALONE_TASKS,
                capacity=a.capacity or 1_000_000,
                executors=a.executors,
            )
            if not a.quiet:
                print(f"producer: starting service {svc.name}", file=sys.stderr, flush=True)
            svc.start()
            client = svc.client()
        else:
            try:
                client = shmwheel.connect(a.service)
            except shmwheel.ShmwheelError as e:
                raise shmwheel.ShmwheelError(
                    f"cannot connect to service {a.service!r}: {e}"
                ) from None
        figures = run(client, **shape, task=a.task, seed=a.seed, progress=progress, stop=stop)
        if figures["stopped"]:
            code = 130 if stop.is_set() else 1
        if svc is not None and stop.is_set():
            stats = svc.stats()
        elif svc is not None:
            left_ms = figures["last_deadline_ms"] - time.monotonic_ns() // 1_000_000
            timeout = max(0, left_ms) / 1000 + (30.0 if a.wait_timeout is None else a.wait_timeout)
            timeout = min(timeout, max(0.0, a.max_seconds - figures["elapsed_s"]))
            settled, stats = wait_settled(svc, timeout, progress, stop)
            if not settled:
                print(
                    f"producer: timers not all settled after {timeout:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
                code = 1
        if a.json:
            print(json.dumps({"producer": figures, "service": stats}, default=float))
        else:
            _print_human(figures, stats)
    except (ValueError, TypeError, shmwheel.ShmwheelError) as e:
        print(f"producer: error: {e}", file=sys.stderr, flush=True)
        code = 2
    except KeyboardInterrupt:
        print("producer: aborted", file=sys.stderr, flush=True)
        code = 130
        # The interrupt may have landed inside a client call holding the segment lock, where
        # close() would block: leave the ring to the coordinator, which reclaims the rings
        # of clients whose process is gone (and --standalone unlinks everything anyway).
        client = None
    finally:
        # cleanup is bounded (stop() kills what does not exit in time): let nothing cut it short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if client is not None:
                client.close()
        except Exception as e:  # noqa: BLE001 - e.g. the service was stopped under us
            print(
                f"producer: closing the client: {type(e).__name__}: {e}",
                file=sys.stderr,
                flush=True,
            )
        finally:
            if svc is not None:
                svc.stop()
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
    return code


if __name__ == "__main__":
    sys.exit(main())
