"""W9: the journal, measured like the other service workloads (one repetition per call,
``{figure: value}`` back).

``svc_journal``: what the journal costs a producer. W1's two measurements (per-call
``Client.schedule`` of n timers, ``Client.schedule_many`` of 5n in batches), each on a
service without a journal and on one journaling into a fresh temporary directory with the
default options (fsync ``interval``), in the same repetition; and the journal's bytes per
scheduled timer.

``svc_recovery``: what a restart costs. A journaled service is filled with n pending
timers (schedule_many in batches) and stopped cleanly, which leaves them in the journal;
then ``start()`` of a new service on that directory, which re-arms them all, is timed,
beside ``start()`` of the same service without a journal.

Every temporary directory is removed on the way out, also on an error or Ctrl-C, after
the services writing it have stopped (``service_common.owned``).
"""

from __future__ import annotations

import logging
import tempfile
import time

import numpy as np

from ..service.supervisor.supervisor import TimerService
from . import service_common as SC
from . import service_ops as SO
from .workloads import Figures

log = logging.getLogger("shmwheel.bench")

S = "shmwheel"

RECOVERY_N = 1_000_000  # pending timers recovered (--recovery-n)
# the recovery's timers are due in 1-2 h: none fires while they are filled, the service
# stopped and restarted, however slow the machine
RECOVERY_LO_MS, RECOVERY_HI_MS = 3_600_000, 7_200_000
DIR_PREFIX = "shmwheel-bench-journal-"


def _journal_dir() -> tempfile.TemporaryDirectory[str]:
    """A fresh directory for one journal, removed when its `with` block ends."""
    return tempfile.TemporaryDirectory(prefix=DIR_PREFIX)


def wait_linked(svc: TimerService, n: int, timeout_s: float) -> int:
    """Poll until the coordinator has drained every client ring (so what they published is
    journaled and linked) and stats()['pending'] >= n, or timeout_s passes; returns the
    last pending count."""
    assert svc.mem is not None
    end = time.monotonic() + timeout_s
    while True:
        # the rings first: stats()' pending counts a batch twice between the coordinator
        # linking it and consuming it from its ring, so read it only once they are empty
        backlog = sum(r.pending() for r in svc.mem.producer)
        pending = int(svc.stats()["pending"])
        if (backlog == 0 and pending >= n) or time.monotonic() > end:
            return pending
        time.sleep(0.005)


def _journal_bytes(svc: TimerService) -> int:
    return int(svc.stats()["journal"]["bytes_written"])


def _producer_side(
    n: int, journal: str | None, call: bool, delays: list[float], chunks: list[np.ndarray]
) -> tuple[float, float]:
    """One of W1's measurements on a service with (`journal` a directory) or without a
    journal: per call (`call`) over `delays`, else batch over `chunks`. Returns (timers
    per second, journal bytes per timer; 0 without a journal), the bytes counted from
    after warm-up until the coordinator has linked every timer timed."""
    total = n if call else sum(map(len, chunks))
    options = {} if journal is None else {"journal": journal}
    with SC._service(SC._capacity_for(total), **options) as svc, svc.client() as c:
        SC.warm(c)
        before = 0
        if journal is not None:
            wait_linked(svc, 0, 30.0)  # the warm-up's records are not counted
            before = _journal_bytes(svc)
        rate = SO.schedule_call_rate(c, delays) if call else SO.schedule_many_rate(c, chunks)
        if journal is None:
            return rate, 0.0
        pending = wait_linked(svc, total, 30.0 + total / 20_000)
        if pending < total:
            raise RuntimeError(
                f"journal: only {pending} of {total} timers were linked in the bounded wait"
            )
        return rate, (_journal_bytes(svc) - before) / total


def svc_journal(n: int) -> Figures:
    """W9, producer side: W1's per-call schedule of n timers and batch schedule of 5n
    (delays 30-60 s, never due while measured), each with the journal off and on (fsync
    'interval', a fresh temporary directory per service), in that order; the on / off
    ratios and the journal's bytes per timer."""
    delays = SC._far_delays(n).tolist()
    _, chunks = SO.batch_delays(n)
    fig: Figures = {}
    for call, what, how in (
        (True, "Client.schedule", "per call"),
        (False, "Client.schedule_many", "batch"),
    ):
        off, _ = _producer_side(n, None, call, delays, chunks)
        with _journal_dir() as d:
            on, per_timer = _producer_side(n, d, call, delays, chunks)
        fig[f"{S} {what}, journal on"] = on
        fig[f"{S} {what}, journal off"] = off
        fig[f"ratio: journal on / off, {how}"] = on / off
        fig[f"journal bytes per timer, {how}"] = per_timer
    return fig


def _timed_start(svc: TimerService) -> float:
    """svc.start(); its wall time in ms."""
    t = time.perf_counter()
    svc.start()
    return (time.perf_counter() - t) * 1000


def svc_recovery(n: int) -> Figures:
    """W9, recovery: n timers (payload none, due in 1-2 h) scheduled with schedule_many in
    batches of 100k into a journaled service (capacity for n, fsync 'interval', a fresh
    temporary directory); once the coordinator has linked them all, stop() (timed), then
    ``TimerService(journal=the same directory, same tasks and capacity).start()`` timed,
    beside its own ``recovery['seconds']`` (claim, read, re-arm, compact), and checked:
    stats()['pending'] must come back to n. Peer: start() of the same service without a
    journal."""
    cap = SC._capacity_for(n)
    fill = np.random.default_rng(9).uniform(RECOVERY_LO_MS, RECOVERY_HI_MS, n)
    fig: Figures = {}
    with _journal_dir() as d:
        with SC._service(cap, journal=d) as svc:
            with svc.client() as c:
                for i in range(0, n, SC.BATCH):
                    c.schedule_many("noop", fill[i : i + SC.BATCH])
            pending = wait_linked(svc, n, 60.0 + n / 20_000)
            if pending != n:
                raise RuntimeError(f"recovery: {pending} of {n} timers pending before stop()")
            disk = svc.stats()["journal"]["disk_bytes"]
            t = time.perf_counter()
            svc.stop()
            fig[f"{S} stop() with the timers pending"] = (time.perf_counter() - t) * 1000
        with SC.owned(TimerService(tasks=SC.TASKS, capacity=cap, journal=d)) as svc:
            fig[f"{S} start(), recovering the pending timers"] = _timed_start(svc)
            rec = dict(svc.recovery)
            end = time.monotonic() + 5.0
            while (pending := int(svc.stats()["pending"])) != n and time.monotonic() < end:
                time.sleep(0.01)
        if rec.get("recovered") != n or pending != n:
            raise RuntimeError(
                f"recovery: re-armed {rec.get('recovered')} and "
                f"{pending} pending after start(), of {n} (recovery {rec})"
            )
        log.debug("bench: recovery of %d timers: %s", n, rec)
    fig[f"{S} recovery['seconds']"] = rec["seconds"] * 1000
    fig["timers recovered"] = float(rec["recovered"])
    fig["pending after recovery"] = float(pending)
    fig["journal disk bytes before recovery"] = float(disk)
    fig["journal segments read"] = float(rec["segments_read"])
    with SC.owned(TimerService(tasks=SC.TASKS, capacity=cap)) as svc:
        fig[f"{S} start(), no journal"] = _timed_start(svc)
    return fig
