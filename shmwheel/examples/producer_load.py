"""The producer's load as a function: ``run(client, ...)`` schedules timers at a target
rate with random delays and payloads of a chosen size and cancels a share of them,
``wait_settled(svc, ...)`` waits until a service has run or cancelled them all, and the
helpers that draw the delays and payloads and check the arguments. Uses only the public
client API; the command line around it is ``producer`` (``python -m
shmwheel.examples.producer``).
"""

from __future__ import annotations

import heapq
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import shmwheel
from shmwheel.wheel.constants import MAX_PAYLOAD  # the service's hard maximum, encoded bytes

SLICE_S = 0.01  # with a rate, one call schedules at most this much time's worth
FULL_BACKOFF_S = 0.005  # wait between retries when the service is full


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
