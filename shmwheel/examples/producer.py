"""Load producer for a shmwheel service, using only the public client API.

Schedules ``count`` timers at a target rate with random delays and payloads of a chosen
size, cancels a fraction of them, and reports what happened::

    python -m shmwheel.examples.producer --standalone --count 20000 --cancel-fraction 0.1
    python -m shmwheel.examples.producer --service NAME --rate 5000 --count 100000 \
        --delay-ms 50,500

``--standalone`` starts its own ``TimerService`` (tasks ``noop``, ``log``, ``fail`` from
``shmwheel.examples.tasks``), waits (bounded) until every timer has fired or been
cancelled, prints the service's ``stats()`` and stops it. ``--service NAME`` attaches to
a running service with ``shmwheel.connect(NAME)`` and prints only the producer's own
figures. It runs from
any directory once shmwheel is installed.

``run(client, ...)`` is the same load as a function, for use from other programs.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import shmwheel

MAX_PAYLOAD = 4096  # the service's hard maximum, in msgpack-encoded bytes
SLICE_S = 0.01  # with a rate, one call schedules at most this much time's worth
FULL_BACKOFF_S = 0.005  # wait between retries when the service is full
STANDALONE_TASKS = {
    "noop": "shmwheel.examples.tasks:noop",
    "log": "shmwheel.examples.tasks:log_fire",
    "fail": "shmwheel.examples.tasks:fail",
}


def make_payload(size: int) -> Any:
    """A payload whose msgpack encoding is exactly `size` bytes (None for 0 or 1)."""
    if size <= 1:
        return None
    if size <= 257:
        return bytes(size - 2)  # bin8: 2-byte header
    if size == 258:
        return [bytes(255)]  # fixarray(1) + bin8 of 255 bytes
    return bytes(size - 3)  # bin16: 3-byte header


def make_delays(
    rng: np.random.Generator, n: int, lo: float, hi: float, distribution: str
) -> np.ndarray:
    """n delays (ms) in [lo, hi]. "exponential" is an exponential of scale (hi - lo) / 3
    truncated to [lo, hi] (inverse CDF, no pile-up at hi): mostly short, a long tail."""
    if hi == lo:
        return np.full(n, float(lo))
    u = rng.random(n)
    if distribution == "uniform":
        return lo + u * (hi - lo)
    scale = (hi - lo) / 3
    return lo - scale * np.log1p(-u * (1 - math.exp(-(hi - lo) / scale)))


def check_args(
    *,
    rate: float,
    count: int,
    delay_ms: tuple[float, float],
    distribution: str,
    payload_size: int,
    cancel_fraction: float,
    cancel_at: float,
    batch: int,
    max_seconds: float,
) -> None:
    """ValueError naming the argument and what to change."""

    def finite(x: object) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    if not finite(rate) or rate < 0:
        raise ValueError(f"rate must be >= 0 timers/s (0: as fast as possible), got {rate!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be an integer >= 0, got {count!r}")
    if (
        not isinstance(delay_ms, (tuple, list))
        or len(delay_ms) != 2
        or not all(finite(d) for d in delay_ms)
    ):
        raise ValueError(f"delay_ms must be (min, max) in ms, got {delay_ms!r}")
    lo, hi = delay_ms
    if lo < 0 or hi < lo:
        raise ValueError(f"delay_ms must satisfy 0 <= min <= max, got {delay_ms!r}")
    if distribution not in ("uniform", "exponential"):
        raise ValueError(f"distribution must be 'uniform' or 'exponential', got {distribution!r}")
    if (
        isinstance(payload_size, bool)
        or not isinstance(payload_size, int)
        or not 0 <= payload_size <= MAX_PAYLOAD
    ):
        raise ValueError(
            f"payload_size must be 0..{MAX_PAYLOAD} encoded bytes (the service's "
            f"maximum), got {payload_size!r}"
        )
    if not finite(cancel_fraction) or not 0 <= cancel_fraction <= 1:
        raise ValueError(f"cancel_fraction must be in [0, 1], got {cancel_fraction!r}")
    if not finite(cancel_at) or cancel_at < 0:
        raise ValueError(
            f"cancel_at must be >= 0 (a fraction of each timer's delay), got {cancel_at!r}"
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    if not finite(max_seconds) or max_seconds <= 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds!r}")


def run(
    client: shmwheel.Client,
    *,
    rate: float = 0.0,
    count: int = 10_000,
    delay_ms: tuple[float, float] = (10.0, 1000.0),
    distribution: str = "uniform",
    payload_size: int = 0,
    cancel_fraction: float = 0.0,
    cancel_at: float = 0.0,
    task: str = "noop",
    seed: int | None = None,
    batch: int = 256,
    max_seconds: float = 300.0,
    full_timeout_s: float = 10.0,
    progress: Callable[[dict[str, Any]], None] | None = None,
    progress_s: float = 1.0,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """Schedule `count` timers of `task` through `client` and return the figures.

    rate: timers per second (0: as fast as possible). delay_ms: (min, max) ms, drawn from
    `distribution` ("uniform" or "exponential"). payload_size: msgpack-encoded bytes of each
    payload (0: None). cancel_fraction: share of timers cancelled, each at `cancel_at` times
    its delay after it was scheduled (0: at once; 1: at its deadline, racing the fire).
    batch: timers per call (1 uses ``schedule``, more uses ``schedule_many``). When the
    service is Full, the call is retried for up to `full_timeout_s`, then Full is raised; a
    ``schedule_many`` cut short by a stuck producer ring keeps the part it accepted (its
    ``Full.accepted``: counted, and cancelled like the rest) and only the remainder is
    retried, so no timer is scheduled twice. Everything (scheduling
    and the deferred cancels) stops after `max_seconds` or once `stop` is set; the result
    then has ``stopped`` set to the reason. `progress` is called with the running figures
    about every `progress_s` seconds.
    """
    check_args(
        rate=rate,
        count=count,
        delay_ms=delay_ms,
        distribution=distribution,
        payload_size=payload_size,
        cancel_fraction=cancel_fraction,
        cancel_at=cancel_at,
        batch=batch,
        max_seconds=max_seconds,
    )
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    payload = make_payload(payload_size)
    lo, hi = float(delay_ms[0]), float(delay_ms[1])
    if rate > 0:
        batch = max(1, min(batch, int(rate * SLICE_S)))
    figures: dict[str, Any] = {
        "scheduled": 0,
        "cancelled_true": 0,
        "cancel_false": 0,
        "full_retries": 0,
        "elapsed_s": 0.0,
        "schedule_s": 0.0,
        "rate": 0.0,
        "target_rate": rate,
        "count": count,
        "task": task,
        "batch": batch,
        "seed": seed,
        "last_deadline_ms": 0,
        "stopped": None,
    }
    later: list[tuple[float, int]] = []  # (monotonic s, handle id) of deferred cancels
    t0 = time.monotonic()
    end = t0 + max_seconds
    next_report = t0 + progress_s

    def cancel_ids(ids: np.ndarray) -> None:
        if len(ids) == 0:
            return
        ok = client.cancel_many(ids)
        yes = int(ok.sum())
        figures["cancelled_true"] += yes
        figures["cancel_false"] += len(ids) - yes

    def cancel_due(now: float) -> None:
        ids = []
        while later and later[0][0] <= now:
            ids.append(heapq.heappop(later)[1])
        cancel_ids(np.array(ids, np.int64))

    def should_stop(now: float) -> bool:
        if stop is not None and stop.is_set():
            figures["stopped"] = "interrupted"
        elif now >= end:
            figures["stopped"] = f"max_seconds ({max_seconds} s) reached"
        return figures["stopped"] is not None

    def report(now: float, phase: str) -> None:
        nonlocal next_report
        if progress is not None and now >= next_report:
            next_report = now + progress_s
            figures["elapsed_s"] = now - t0
            progress({**figures, "phase": phase, "cancels_waiting": len(later)})

    def schedule_batch(delays: np.ndarray) -> tuple[np.ndarray, np.ndarray, shmwheel.Full | None]:
        """(ids, deadlines, error) of the timers accepted for delays[:len(ids)], retrying
        while the service is full. Fewer than all only when stopped (figures["stopped"]
        set, error None) or after `full_timeout_s` of Full (error: the last Full)."""
        give_up = time.monotonic() + full_timeout_s
        ids: list[np.ndarray] = []
        deadlines: list[np.ndarray] = []
        left = delays

        def result(
            error: shmwheel.Full | None = None,
        ) -> tuple[np.ndarray, np.ndarray, shmwheel.Full | None]:
            if not ids:
                return np.empty(0, np.int64), np.empty(0, np.int64), error
            return np.concatenate(ids), np.concatenate(deadlines), error

        while True:
            try:
                if len(left) == 1:
                    h = client.schedule(task, payload, delay_ms=float(left[0]))
                    ids.append(np.array([h.id], np.int64))
                    deadlines.append(np.array([h.deadline_ms], np.int64))
                else:
                    hs = client.schedule_many(
                        task, left, None if payload is None else [payload] * len(left)
                    )
                    ids.append(hs.ids)
                    deadlines.append(hs.deadlines_ms)
                return result()
            except shmwheel.Full as e:
                # No slot or arena block: nothing was scheduled. A producer ring that stayed
                # full (the coordinator is not draining it): schedule() took its timer back;
                # schedule_many() published a prefix, which will run (e.accepted), and took
                # the rest back. Keep what was accepted and retry only the rest.
                accepted = e.accepted
                if isinstance(accepted, shmwheel.TimerHandles) and len(accepted):
                    ids.append(accepted.ids)
                    deadlines.append(accepted.deadlines_ms)
                    left = left[len(accepted) :]
                if time.monotonic() > give_up:
                    return result(e)
                figures["full_retries"] += 1
                now = time.monotonic()
                cancel_due(now)  # deferred cancels free room too
                if should_stop(now):
                    return result()
                time.sleep(FULL_BACKOFF_S)

    done = 0
    while done < count:
        now = time.monotonic()
        if should_stop(now):
            break
        cancel_due(now)
        report(now, "scheduling")
        if rate > 0:
            due_at = t0 + done / rate
            if due_at > now:
                nap = min(due_at - now, SLICE_S, max(0.0, end - now))
                if later:  # wake for the next deferred cancel too
                    nap = max(0.0, min(nap, later[0][0] - now))
                time.sleep(nap)
                continue
        n = min(batch, count - done)
        delays = make_delays(rng, n, lo, hi, distribution)
        ids, deadlines, error = schedule_batch(delays)
        n = len(ids)  # the accepted part: delays[:n]
        delays = delays[:n]
        done += n
        figures["scheduled"] = done
        if n:
            figures["last_deadline_ms"] = max(figures["last_deadline_ms"], int(deadlines.max()))
        if cancel_fraction > 0 and n:
            pick = rng.random(n) < cancel_fraction
            if cancel_at == 0:
                cancel_ids(ids[pick])
            else:
                at = time.monotonic() + delays[pick] * cancel_at / 1000
                for t, h in zip(at.tolist(), ids[pick].tolist(), strict=True):
                    heapq.heappush(later, (t, h))
        if error is not None:
            raise shmwheel.Full(
                f"still full after retrying for {full_timeout_s} s, with "
                f"{done} of {count} timers already scheduled: "
                f"{error}"
            ) from error
    figures["schedule_s"] = time.monotonic() - t0
    while later:
        now = time.monotonic()
        if should_stop(now):
            break
        cancel_due(now)
        report(now, "cancelling")
        if later:
            time.sleep(max(0.0, min(later[0][0] - now, 0.05)))
    figures["cancels_skipped"] = len(later)
    figures["elapsed_s"] = time.monotonic() - t0
    figures["rate"] = figures["scheduled"] / figures["schedule_s"] if figures["schedule_s"] else 0.0
    return figures


def wait_settled(
    svc: shmwheel.TimerService,
    timeout_s: float,
    progress: Callable[[dict[str, Any]], None] | None = None,
    stop: threading.Event | None = None,
) -> tuple[bool, dict[str, Any]]:
    """Poll svc.stats() until every scheduled timer has fired or been cancelled and every
    fired one has an outcome; (settled, last stats). Bounded by timeout_s."""
    end = time.monotonic() + timeout_s
    next_report = time.monotonic() + 1.0
    while True:
        s = svc.stats()
        outcomes = s["completed"] + s["task_errors"] + s["crashed"]
        if (
            s["pending"] == 0
            and s["fired"] + s["cancelled"] >= s["scheduled"]
            and outcomes >= s["fired"]
        ):
            return True, s
        now = time.monotonic()
        if now > end or (stop is not None and stop.is_set()):
            return False, s
        if progress is not None and now >= next_report:
            next_report = now + 1.0
            progress(s)
        time.sleep(0.02)


# -- command line -------------------------------------------------------------------------
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
        raise argparse.ArgumentTypeError(
            f"expected MIN,MAX or one value in ms, got {text!r}"
        ) from None
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
    try:
        check_args(
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
        figures = run(
            client,
            rate=a.rate,
            count=a.count,
            delay_ms=a.delay_ms,
            distribution=a.distribution,
            payload_size=a.payload_size,
            cancel_fraction=a.cancel_fraction,
            cancel_at=a.cancel_at,
            task=a.task,
            seed=a.seed,
            batch=a.batch,
            max_seconds=a.max_seconds,
            progress=progress,
            stop=stop,
        )
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
