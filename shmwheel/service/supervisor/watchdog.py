"""The supervisor's watchdog: what only a sick service shows, checked on a period from the
monitor thread (``TimerService._watch``), repaired where that keeps exactly-once, failed
loudly where not. Its verdict lives in two header words the supervisor alone writes
(``W_HEALTH``, ``W_HEALTH_REASONS``), so any attached process reads it
(``stats()["health"]``, ``shmwheel status``).

Checks (docs/operating.md, "Watchdog and health"):

* header words every monitor pass (50 ms): the words fixed at create (magic, version,
  size, owner, meta length, instance) against the supervisor's copy, ``stopping`` set
  while the supervisor is not stopping, unknown ``ready`` bits: restored;
* every ``PERIOD_S``: rings whose head is not within ``tail + [0, capacity]`` (a result
  ring's index is re-derived from its records with its executor killed; producer and
  dispatch rings are skipped by their consumers already); a process stopped (SIGSTOP)
  for ``STALL_S``, or the coordinator / reaper with work and no progress counter moving
  for ``STALL_S``: SIGKILLed, so the supervisor restarts it; timers due ``LATE_S`` ago
  and not run; an executor the reaper judges stuck (``X_STUCK``);
* on each exit: more than ``RESTARTS_N`` restarts of a role in ``RATE_WINDOW_S`` show
  ``degraded`` (reason ``restarts``) at once, for ``HOLD_S`` after the last;
  more than ``RATE_N`` restarts in ``RATE_WINDOW_S``, or ``START_FAILS``
  exits in a row before finishing its start, back off (doubling up to ``MAX_DELAY_S``)
  and fail the service until the role stays up for a window.

``SHMWHEEL_WATCHDOG=0`` in the embedding process's environment turns it off (health then
says ``ok`` with the reason ``watchdog_off``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from ... import _native as N
from ...segment import contract as C
from ...segment import layout as L
from ...segment.health import (  # the verdict's encoding in the header, and its reasons
    BIT,
    ENV,
    FAILED,
    LATE_S,
    OK,
    REASONS,
    STATES,
    read_health,
)
from ...segment.ring import Ring


class Supervised(Protocol):
    """What the watchdog reads of the supervisor (``TimerService`` is one): its memory,
    its processes, its name and its stop flag."""

    @property
    def name(self) -> str: ...
    @property
    def mem(self) -> L.ServiceMemory | None: ...
    @property
    def procs(self) -> Mapping[str, Any]: ...
    @property
    def _stop(self) -> threading.Event: ...


log = logging.getLogger("shmwheel.service")

PERIOD_S = 0.5  # the period of the ring, process and lateness checks
STALL_S = 2.0  # stopped, or with work and no progress, this long: killed and restarted
RATE_N, RATE_WINDOW_S = 20, 10.0  # more restarts of one role in the window: a storm
RESTARTS_N = 3  # more restarts of one role in the window: degraded ("restarts"), at once
START_FAILS = 5  # or this many exits in a row before it finished starting
MAX_DELAY_S = 10.0  # the longest back-off between restarts in a storm
HOLD_S = 5.0  # a repaired sickness stays among the reasons this long

# the header words create() fixes for the segment's life
FIXED_WORDS = (L.W_MAGIC, L.W_VERSION, L.W_TOTAL, L.W_OWNER, L.W_META_LEN, L.W_INSTANCE)


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def proc_state(pid: int) -> str:
    """The kernel's one-letter state of `pid` ('T' stopped), '' if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return ""
    return stat[stat.rfind(b")") + 2 :][:1].decode()


class Watchdog:
    """One per running service, driven by the supervisor's monitor thread."""

    def __init__(self, svc: Supervised) -> None:
        assert svc.mem is not None
        self.svc = svc
        self.enabled = enabled()
        h = svc.mem.header
        self.fixed = {w: int(h[w]) for w in FIXED_WORDS}
        self.fixed[L.W_OWNER] = os.getpid()  # the supervisor: this process
        self.next_at = 0.0
        self.seen: dict[str, float] = {}  # reason -> when last seen (monotonic s)
        self.progress: dict[str, tuple[object, float]] = {}  # role -> (signature, since)
        self.stopped_since: dict[str, float] = {}
        self.corrupt_seen: set[str] = set()
        self.restarts: dict[str, deque[float]] = {}
        self.storm: dict[str, float] = {}  # role -> its current back-off (s)
        self.start_fails: dict[str, int] = {}  # role -> exits in a row while starting
        self.unrepairable: set[int] = set()
        self.state = OK
        self.checks, self.cost_s = 0, 0.0  # periods run and their time (for the docs)
        self._publish(time.monotonic())

    # -- the supervisor's hooks -------------------------------------------------------
    def tick(self, now: float) -> None:
        """Called every monitor pass: the header at once, the rest every PERIOD_S."""
        mem = self.svc.mem
        if not self.enabled or mem is None:
            return
        self._header(mem, now)
        if now < self.next_at:
            return
        self.next_at = now + PERIOD_S
        t = time.perf_counter()
        self._rings(mem, now)
        self._processes(mem, now)
        self._late(mem, now)
        if mem.exec_table[:, L.X_STUCK].any():  # the reaper's verdict (reaper.py, take_over)
            self._flag("stuck", now)
        for role, q in self.restarts.items():
            p = self.svc.procs.get(role)
            if not q or now - q[-1] <= RATE_WINDOW_S or p is None or p.poll() is not None:
                continue
            if self.storm.pop(role, None) is not None:
                log.warning(
                    "service %s: %s has stayed up; restarts no longer held back",
                    self.svc.name,
                    role,
                )
        self._publish(now)
        self.checks += 1
        self.cost_s += time.perf_counter() - t

    def on_exit(self, role: str, now: float, up: bool) -> float:
        """A process of `role` exited (`up`: after it had finished starting) and will be
        restarted: the delay (s) the restart rate asks for; 0 while the role restarts at
        most RATE_N times in RATE_WINDOW_S and has not failed to start START_FAILS
        times in a row (the supervisor's own back-off spaces those)."""
        if not self.enabled:
            return 0.0
        times = self.restarts.setdefault(role, deque())
        times.append(now)
        while now - times[0] > RATE_WINDOW_S:
            times.popleft()
        fails = self.start_fails[role] = 0 if up else self.start_fails.get(role, 0) + 1
        if len(times) > RESTARTS_N:  # shown now, long before a storm would fail the service
            self._flag("restarts", now)
            self._publish(now)
        if role not in self.storm and len(times) <= RATE_N and fails < START_FAILS:
            return 0.0
        delay = min(MAX_DELAY_S, max(PERIOD_S, 2 * self.storm.get(role, 0.0)))
        if role not in self.storm:
            log.critical(
                "service %s: %s restarted %d times in %.0f s (%d in a row while starting); "
                "holding restarts back (up to %.0f s) and refusing new timers until it stays up",
                self.svc.name,
                role,
                len(times),
                RATE_WINDOW_S,
                fails,
                MAX_DELAY_S,
            )
        self.storm[role] = delay
        self._publish(now)
        return delay

    @property
    def failed(self) -> bool:
        return self.state == FAILED

    # -- checks -----------------------------------------------------------------------
    def _flag(self, reason: str, now: float) -> None:
        self.seen[reason] = now

    def _header(self, mem: L.ServiceMemory, now: float) -> None:
        h = mem.header
        bad = []
        for w, v in self.fixed.items():
            if int(h[w]) != v:
                bad.append((w, int(h[w]), v))
                h[w] = v
        if h[L.W_STOPPING] and not self.svc._stop.is_set():
            bad.append((L.W_STOPPING, int(h[L.W_STOPPING]), 0))
            h[L.W_STOPPING] = 0
        ready = int(h[L.W_READY])
        if ready & ~(L.READY_COORDINATOR | L.READY_REAPER):
            bad.append((L.W_READY, ready, ready & 3))
            N.word_and(h, L.W_READY, L.READY_COORDINATOR | L.READY_REAPER)
        for word, was, now_v in bad:
            log.error(
                "service %s: header word %d was %d, outside its invariant; restored to %d",
                self.svc.name,
                word,
                was,
                now_v,
            )
        if bad:
            self._flag("header", now)
            self._publish(now)

    def _rings(self, mem: L.ServiceMemory, now: float) -> None:
        claimed = mem.ring_table[:, L.RT_STATE] != L.RING_FREE
        named = [(f"producer ring {i}", r) for i, r in enumerate(mem.producer) if claimed[i]]
        named += [(f"dispatch ring {i}", r) for i, r in enumerate(mem.dispatch)]
        corrupt = set()
        for what, ring in named:
            if ring.corrupt():  # its consumer skips to the head (and counts it)
                corrupt.add(what)
                self._flag("ring_index", now)
                if what not in self.corrupt_seen:
                    log.error(
                        "service %s: %s has head %d, tail %d",
                        self.svc.name,
                        what,
                        ring.head,
                        ring.tail,
                    )
        self.corrupt_seen = corrupt
        for i, ring in enumerate(mem.results):
            if i in self.unrepairable:
                continue
            if ring.corrupt():
                time.sleep(0.001)  # not a torn read of a moving pair: still so a moment on
                if ring.corrupt():
                    self._flag("ring_index", now)
                    self._repair_results(mem, i, ring)

    def _repair_results(self, mem: L.ServiceMemory, i: int, ring: Ring) -> None:
        """Re-derive result ring i's corrupt index from its records, with its executor
        (the head's writer) killed; the reaper (the tail's) does not consume a corrupt
        ring. Records [tail, head) are outcomes not yet settled: each names a FIRING or
        STOPPING slot of its generation; column RR_SEQ is the dispatch sequence, increasing
        with the ring's sequence, so the newest record ends at the head."""
        role, name = f"exec{i}", self.svc.name
        p = self.svc.procs.get(role)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        head, tail, cap = ring.head, ring.tail, ring.capacity
        seqs = ring.data[:, C.RR_SEQ]
        pos = (int(np.argmax(seqs)) + 1) % cap if seqs.any() else 0
        unsettled = self._unsettled(mem, ring)
        if head % cap == pos and head >= 0:  # the head is right: the tail moved
            k = unsettled(head - 1, head - cap)
            fix, word, value = "tail", C.RING_TAIL, head - k if k >= 0 else -1
        else:
            new_head = tail + (pos - tail) % cap
            if new_head == tail and unsettled(tail + cap - 1, tail) == cap:
                new_head = tail + cap  # full, not empty
            ok = unsettled(new_head - 1, tail) == new_head - tail
            fix, word, value = "head", C.RING_HEAD, new_head if ok else -1
        if value < 0:
            self.unrepairable.add(i)
            log.critical(
                "service %s: result ring %d has head %d, tail %d and its records do not say "
                "which is right; its outcomes cannot be settled: new timers are refused",
                name,
                i,
                head,
                tail,
            )
            return
        ring.words[word] = value
        log.error(
            "service %s: result ring %d had head %d, tail %d; re-derived its %s as %d "
            "from its records (%s restarted)",
            name,
            i,
            head,
            tail,
            fix,
            value,
            role,
        )

    @staticmethod
    def _unsettled(mem: L.ServiceMemory, ring: Ring) -> Any:
        """count(from_seq, down_to): records from `from_seq` backwards (not below
        `down_to`) that name a FIRING/STOPPING slot of their generation, once each;
        -1 when one of them is a repeating timer (an older settled outcome of it may
        name the same handle: not provable)."""
        nodes = mem.nodes()
        meta = mem.side.reshape(-1, C.SIDE_WORDS)[:, C.S_META]

        def count(seq: int, down_to: int) -> int:
            n, slots = 0, set()
            while seq >= down_to:
                h = int(ring.record_at(seq)[C.RR_HANDLE])
                slot = int(C.handle_slot(h))
                if not 0 <= slot < len(nodes) or slot in slots:
                    break
                gs = int(nodes[slot, C.F_GS])
                st = int(C.gs_state(gs))
                if st not in (C.ST_FIRING, C.ST_STOPPING) or int(C.gs_handle(gs, slot)) != h:
                    break
                if int(C.meta_flags(int(meta[slot]))) & C.FLAG_REPEAT:
                    return -1
                slots.add(slot)
                n, seq = n + 1, seq - 1
            return n

        return count

    def _processes(self, mem: L.ServiceMemory, now: float) -> None:
        h, name = mem.header, self.svc.name
        alive = {role: p for role, p in self.svc.procs.items() if p.poll() is None}
        for role in (set(self.stopped_since) | set(self.progress)) - set(alive):
            self.stopped_since.pop(role, None)  # exited: its clocks start again at restart
            self.progress.pop(role, None)
        states = {role: proc_state(p.pid) for role, p in alive.items()}
        # a stopped process may hold the segment lock (flock): whoever waits on it makes
        # no progress through no fault of its own. While one is stopped, nobody else is
        # judged stalled: the stopped one is killed first, the others' clocks start again
        held = any(st == "T" for st in states.values())
        for role, p in alive.items():
            if states[role] == "T":
                since = self.stopped_since.setdefault(role, now)
                if now - since >= STALL_S:
                    log.error(
                        "service %s: %s (pid %d) has been stopped for %.1f s; killing it "
                        "so that it restarts",
                        name,
                        role,
                        p.pid,
                        now - since,
                    )
                    self._flag("stopped", now)
                    p.kill()
                continue
            self.stopped_since.pop(role, None)
            if role == "coordinator":
                rings = [r for i, r in enumerate(mem.producer) if mem.ring_table[i, L.RT_STATE]]
                sig: object = tuple(r.tail for r in rings)
                work = any(r.pending() for r in rings) and not h[L.W_JFAULT_COORDINATOR]
            elif role == "reaper":
                sig = (
                    tuple(r.tail for r in mem.results),
                    int(mem.counters[L.ROW_REAPER, C.C_FIRED]),
                    int(h[L.W_REAPER_WAKE_AT]),
                )
                late = time.monotonic_ns() // 1_000_000 - int(h[L.W_REAPER_WAKE_AT])
                work = any(r.pending() for r in mem.results) or late > STALL_S * 1000
                work = work and not h[L.W_JFAULT_REAPER]  # a journal fault holds it back
            else:
                continue  # an executor may run one long task: only a stopped one is killed
            prev = self.progress.get(role)
            if not work or held or prev is None or prev[0] != sig:
                self.progress[role] = (sig, now)
            elif now - prev[1] >= STALL_S:
                log.error(
                    "service %s: %s (pid %d) has had work and made no progress for %.1f s; "
                    "killing it so that it restarts",
                    name,
                    role,
                    p.pid,
                    now - prev[1],
                )
                self._flag("stalled", now)
                self.progress.pop(role, None)
                p.kill()

    def _late(self, mem: L.ServiceMemory, now: float) -> None:
        now_ns = time.monotonic_ns()
        oldest = now_ns
        for ring in mem.dispatch:
            if ring.pending() and not ring.corrupt():
                oldest = min(oldest, int(C.dr_fired_ns(ring.record_at(ring.tail)[C.DR_FIRED_NS])))
        wake = int(mem.header[L.W_REAPER_WAKE_AT])
        if wake > 0:
            oldest = min(oldest, wake * 1_000_000)
        if now_ns - oldest > LATE_S * 1e9:
            if now - self.seen.get("late", -HOLD_S) > HOLD_S:
                log.warning(
                    "service %s: timers due %.1f s ago have not run",
                    self.svc.name,
                    (now_ns - oldest) / 1e9,
                )
            self._flag("late", now)

    # -- the verdict ------------------------------------------------------------------
    def _publish(self, now: float) -> None:
        mem = self.svc.mem
        if mem is None:
            return
        bits = 0
        if not self.enabled:
            bits |= BIT["watchdog_off"]
        for reason, t in self.seen.items():
            if now - t <= HOLD_S:
                bits |= BIT[reason]
        if self.storm:
            bits |= BIT["restart_rate"]
        if self.unrepairable:
            bits |= BIT["ring_unrepairable"]
        state = max([sev for n, sev, _ in REASONS if bits & BIT[n]], default=OK)
        if state != self.state:
            reasons = read_health(np.array([0] * L.W_HEALTH + [state, bits]))["reasons"]
            level = logging.CRITICAL if state == FAILED else logging.WARNING
            log.log(
                level,
                "service %s: health %s -> %s (%s)%s",
                self.svc.name,
                STATES[self.state],
                STATES[state],
                ", ".join(reasons) or "no reasons left",
                "; new timers are refused" if state == FAILED else "",
            )
        self.state = state
        mem.header[L.W_HEALTH_REASONS] = bits
        mem.header[L.W_HEALTH] = state
