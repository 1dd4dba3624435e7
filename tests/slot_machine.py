"""The slot state machine without processes (run by tests/test_slot_machine.py, extended
by tests/test_ops_machine.py): a hypothesis stateful machine that drives the real tables,
rings and native code over a segment in this process's memory, playing clients, the
coordinator, the reaper and an executor in random orders, with cancels, crash repairs, a
client's death, an executor's and a reaper's — and checks ``verify()`` and the one-outcome
rule after every step.
"""

from __future__ import annotations

import os
import time
import types
from collections import defaultdict

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from local_segment import QuietClient, small_config

from shmwheel import Full
from shmwheel import _native as N
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from shmwheel.segment import payload as P
from shmwheel.segment import states as S
from shmwheel.segment.verify import firing_nowhere, verify
from shmwheel.service.caller import purgatory as purgatory_mod
from shmwheel.service.caller.client import Client, now_ms
from shmwheel.service.processes import context as ctx
from shmwheel.service.processes.executor import recover_rings

CAPACITY = 24
CLIENTS = 2
RUNS: list[tuple[int, int, object]] = []  # (timer id, run number, payload) of each task run


def record(payload: object) -> None:
    c = ctx.context()
    RUNS.append((c.id, c.attempt, payload))


def failing(payload: object) -> None:
    record(payload)
    raise RuntimeError("task failed on purpose")


class SlotMachine(RuleBasedStateMachine):
    @initialize(align=st.integers(0, (1 << 20) - 1))
    def setup(self, align: int) -> None:
        RUNS.clear()
        self.waits = Client.RING_WAIT_S, Client.FREE_WAIT_S
        # no coordinator runs here: a full ring or wheel refuses at once
        Client.RING_WAIT_S = Client.FREE_WAIT_S = 0.0
        # The machine's only clock is the wheel's: a deadline read from the real clock
        # would make which rules are enabled depend on how fast this machine runs (and
        # hypothesis refuses a strategy that is not a function of its draws).
        purgatory_mod.time = types.SimpleNamespace(
            monotonic_ns=lambda: self.now() * 1_000_000, monotonic=time.monotonic
        )
        cfg = small_config(
            capacity=CAPACITY,
            max_clients=CLIENTS,
            arena_blocks=(6, 3, 1, 1),
            tasks=(("record", "t:record"), ("failing", "t:failing")),
            watch_capacity=12,  # small: the purgatory's machine fills it (test_ops_machine)
        )
        # The wheel's clock starts at a drawn offset from a round time: where its buckets fall
        # (which level, which index) is then part of the example, and replays with it.
        start = (now_ms() >> 20 << 20) + align
        self.mem = L.ServiceMemory.create("machine", cfg, os.getpid(), start, local=True)
        self.tables = self.mem.bind_tables()
        self.clients = [self._connect(r) for r in range(CLIENTS)]
        self.exec = N.Executor(
            self.mem.wheel,
            self.mem.side,
            self.mem.arena,
            self.mem.arena_words,
            self.mem.dispatch[0].words,
            self.mem.results[0].words,
            self.mem.exec_table[0][L.X_STARTED : L.X_STARTED + 1],
            self.mem.counters[L.FIXED_ROWS],
            self.mem.hist[0],
            [record, failing],
            P.unpack,
            lambda h, t, e: None,
            lambda: False,
        )
        self.backlog = np.empty(0, np.int64)
        self.deadline: dict[int, int] = {}  # timer id -> deadline of its current run
        self.every: dict[int, int] = {}  # repeating timers: id -> period
        self.cancelled_true: set[int] = set()  # cancel() returned True
        self.stopped: set[int] = set()  # a repeating timer cancelled mid-run
        self.crashed: set[int] = set()  # its run died with the executor
        self.fired_at: dict[int, list[int]] = defaultdict(list)  # wheel time of each fire
        # every move of a state word from here on is traced, and checked against
        # contract.h's transition table (moves_follow_the_table)
        N.trace_start(1 << 16)
        self.words = self.mem.nodes()[:, C.F_GS].copy()
        self.seen_moves: set[str] = set()
        self.held: tuple[int, int, int, int] | None = None  # a reset between its halves

    def _connect(self, ring: int) -> Client:
        self.mem.ring_table[ring, L.RT_STATE] = L.RING_CLAIMED
        return QuietClient(self.mem, ring)

    @staticmethod
    def _drop(client: Client) -> None:
        """Let go of a client without closing the shared memory it was given."""
        client._release()
        client._closed = True

    def teardown(self) -> None:
        purgatory_mod.time = time  # type: ignore[assignment]
        if not hasattr(self, "mem"):
            return
        if self.held is not None:
            self.reset_resumes()
        for t in sorted(self.every):  # stop every repeating timer, then run everything out
            self.cancel(0, sorted(self.deadline).index(t))
        for _ in range(200):
            self.drain_all()
            self._advance(10_000)
            while (
                len(self.backlog) or self.mem.dispatch[0].pending() or self.mem.results[0].pending()
            ):
                self.dispatch(8)
                self.execute()
                self.settle()
            if (
                not any(r.pending() for r in self.mem.producer)
                and int(self.mem.wheel[C.H_PENDING]) == 0
            ):
                break
        for c in self.clients:  # a closed client's cached slots go back
            self.kill_client_ring(c.ring, reconnect=False)
        with self.mem.locked():
            verify(self.mem, backlog=self.backlog, quiescent=True)
        self.check_outcomes(final=True)
        self.moves_follow_the_table()
        N.trace_stop()
        MOVES_SEEN.update(self.seen_moves)
        for c in self.clients:
            self._drop(c)
        self.exec.close()
        self.mem.close()
        Client.RING_WAIT_S, Client.FREE_WAIT_S = self.waits

    # -- clients ------------------------------------------------------------------------
    @rule(
        c=st.integers(0, CLIENTS - 1),
        delay=st.integers(0, 40),
        payload=st.sampled_from([None, 7, "x" * 30, {"a": 1, "b": [1, 2]}, "y" * 300]),
        task=st.sampled_from(["record", "record", "failing"]),
    )
    def schedule(self, c: int, delay: int, payload: object, task: str) -> None:
        try:
            h = self.clients[c].schedule(task, payload, deadline_ms=self.now() + delay)
        except Full:  # the only refusal these arguments can meet
            return
        self.deadline[h.id] = h.deadline_ms

    @rule(c=st.integers(0, CLIENTS - 1), every=st.integers(1, 30))
    def schedule_repeating(self, c: int, every: int) -> None:
        try:
            h = self.clients[c].schedule(
                "record", "r", deadline_ms=int(self.now()) + every, every_ms=every
            )
        except Full:
            return
        self.deadline[h.id] = h.deadline_ms
        self.every[h.id] = every

    @precondition(lambda self: self.deadline)
    @rule(c=st.integers(0, CLIENTS - 1), pick=st.integers(0, 10**6))
    def cancel(self, c: int, pick: int) -> None:
        ids = sorted(self.deadline)
        t = ids[pick % len(ids)]
        won = self.clients[c].cancel(t)
        if won:
            assert t not in self.cancelled_true, f"{t:#x}: a second cancel won"
            self.cancelled_true.add(t)
        elif t in self.every and t not in self.cancelled_true:
            self.stopped.add(t)  # either it was firing (STOPPING) or it ended already

    @precondition(lambda self: self.deadline)
    @rule(c=st.integers(0, CLIENTS - 1), pick=st.integers(0, 10**6), delay=st.integers(0, 40))
    def reset(self, c: int, pick: int, delay: int) -> None:
        # (not the timer a stalled reset holds: this one would wait 2 s for it, then raise
        # TimeoutError; test_reset.py has that case)
        ids = [t for t in sorted(self.deadline) if self.held is None or t != self.held[0]]
        if not ids:
            return
        t = ids[pick % len(ids)]
        d = self.now() + delay
        try:
            won = self.clients[c].reset(t, deadline_ms=d)
        except Full:  # its ring is full (no coordinator runs here): nothing changed
            return
        self._reset_done(t, won, d)

    def _reset_done(self, t: int, won: bool, d: int) -> None:
        if won:
            assert t not in self.cancelled_true, f"{t:#x}: a reset won after a cancel won"
            self.deadline[t] = d  # never early is now judged against this deadline

    @precondition(lambda self: self.deadline and self.held is None)
    @rule(c=st.integers(0, CLIENTS - 1), pick=st.integers(0, 10**6), delay=st.integers(0, 40))
    def reset_stalls_holding(self, c: int, pick: int, delay: int) -> None:
        """A reset's first half (its client then descheduled): the slot is held RESETTING
        with the new deadline written, while other rules run (link, fire, cancel, reclaim,
        repair, another reset)."""
        t = sorted(self.deadline)[pick % len(self.deadline)]
        d = self.now() + delay
        code, held = self.tables._reset_hold(t, d, c)
        if code == C.RESET_WON:
            self.held = (t, c, held, d)

    @precondition(lambda self: self.held is not None)
    @rule()
    def reset_resumes(self) -> None:
        """The stalled reset's second half, then its record, as reset.c publishes it."""
        assert self.held is not None
        t, c, held, d = self.held
        self.held = None
        won = self.tables._reset_put_back(t, c, held) == C.RESET_WON
        if won:
            ring = self.mem.producer[c]
            if ring.pending() >= ring.capacity:  # reset.c makes room before it holds
                self._drain(c)
            assert self.clients[c]._push(t, C.CHECK_RESET)
        self._reset_done(t, won, d)

    @rule(c=st.integers(0, CLIENTS - 1))
    def drain(self, c: int) -> None:
        self._drain(c)

    def _drain(self, r: int) -> None:
        ring = self.mem.producer[r]
        recs = np.empty((ring.capacity, C.PRODUCER_RECORD), np.int64)
        _, n = ring.peek(recs)
        res = np.zeros(C.LINK_RESULT_WORDS, np.int64)
        res[C.LR_EARLIEST] = C.NEVER
        with self.mem.locked():
            self.tables.link_records(recs, n, r, res)
        ring.consume(n)
        self.mem.counters[L.ROW_COORDINATOR, C.C_RETIRED] += res[C.LR_RETIRED]
        assert res[C.LR_GARBAGE] == 0, "a well-behaved client's record was taken for garbage"

    def drain_all(self) -> None:
        for r in range(CLIENTS):
            self._drain(r)

    @rule(c=st.integers(0, CLIENTS - 1))
    def kill_client(self, c: int) -> None:
        """The client's process died: the coordinator drains its ring, reclaims its slots,
        and the ring is claimed again."""
        self.kill_client_ring(c, reconnect=True)

    def kill_client_ring(self, c: int, reconnect: bool) -> None:
        if self.held is not None and self.held[1] == c:
            # its reset died holding the slot: the reclaim puts it back, with the deadline
            # the reset wrote (no caller saw the reset return): either deadline is right
            t, _, _, d = self.held
            self.held = None
            self.deadline[t] = min(self.deadline[t], d)
        self._drain(c)
        with self.mem.locked():
            self.tables.reclaim(c, int(self.mem.ring_table[c, L.RT_PID]))
        self.mem.ring_table[c, L.RT_STATE] = L.RING_FREE
        self._drop(self.clients[c])
        if reconnect:
            self.clients[c] = self._connect(c)

    # -- the reaper -----------------------------------------------------------------------
    def now(self) -> int:
        return int(self.mem.wheel[C.H_NOW])

    @rule(step=st.integers(0, 60))
    def advance(self, step: int) -> None:
        self._advance(step)

    def _advance(self, step: int) -> None:
        t = self.now() + step
        out = np.empty(CAPACITY, np.int64)
        while True:
            with self.mem.locked():
                n = self.tables.advance(t, out)
                self.tables.cascade_step(4)
                self.mem.counters[L.ROW_REAPER, C.C_RETIRED] += self.tables.take_retired()
            self.mem.counters[L.ROW_REAPER, C.C_FIRED] += n
            for h in out[:n].tolist():
                self._fired(h, t)
            self.backlog = np.concatenate([self.backlog, out[:n]])
            if n < len(out):
                break

    def _fired(self, h: int, t: int) -> None:
        """Advance to wheel time t won slot h (test_ops_machine adds operations)."""
        assert h not in self.cancelled_true, f"{h:#x} fired after a cancel won"
        assert self.deadline[h] <= t, f"{h:#x} fired early: due {self.deadline[h]}, now {t}"
        self.fired_at[h].append(t)

    @rule(k=st.integers(1, 8))
    def dispatch(self, k: int) -> None:
        chunk = self.backlog[:k]
        recs = np.stack([chunk, np.zeros(len(chunk), np.int64)], axis=1)
        pushed = self.mem.dispatch[0].push(recs)
        self.backlog = self.backlog[pushed:]

    @rule()
    def execute(self) -> None:
        if self.exec.run() < 0:  # the result ring stayed full: the executor gave up, and
            self.settle()  # its replacement reports the last run crashed
            h = recover_rings(self.mem, 0)
            assert h is not None
            self.crashed.add(h)

    @rule()
    def settle(self) -> None:
        ring = self.mem.results[0]
        buf = np.empty((ring.capacity, C.RESULT_RECORD), np.int64)
        _, n = ring.peek(buf)
        res = np.zeros(C.SETTLE_RESULT_WORDS, np.int64)
        with self.mem.locked():
            self.tables.settle(buf, n, self.now(), res)  # the machine's only clock
        ring.consume(n)
        for h, outcome in buf[:n, [C.RR_HANDLE, C.RR_OUTCOME]].tolist():
            if outcome == C.OUTCOME_CRASHED:
                self.crashed.add(h)
        for h in self.every:  # a re-armed timer's next deadline
            slot = C.handle_slot(h)
            gs = int(self.mem.nodes()[slot, C.F_GS])
            if C.gs_handle(gs, slot) == h:
                self.deadline[h] = int(self.mem.nodes()[slot, C.F_DEADLINE])

    # -- crashes ------------------------------------------------------------------------
    @rule()
    def repair_after_a_lock_holder_died(self) -> None:
        """A lock holder died mid-update, leaving bucket links scrambled: the next holder
        rebuilds from the slot states."""
        w = self.mem.wheel
        w[int(w[C.H_OFF_BITS]) : int(w[C.H_OFF_NODES])] = 0
        self.mem.header[L.W_DIRTY] = 1
        with self.mem.locked():
            pass

    @precondition(lambda self: self.mem.dispatch[0].pending() > 0)
    @rule()
    def executor_dies_mid_task(self) -> None:
        """The executor died while running the first record of its ring (its task may or
        may not have had effects): the replacement reports it crashed, runs none twice."""
        ring, results = self.mem.dispatch[0], self.mem.results[0]
        last = int(results.record_at(results.head - 1)[C.RR_SEQ]) if results.head else -1
        seq = max(ring.tail, last + 1)
        self.mem.exec_table[0, L.X_STARTED] = seq
        if seq >= ring.head:
            return
        # it claimed the record before running it (executor.c, ring.h): a record only
        # `started`, not claimed, never ran, and its replacement runs it
        rec = ring.data[seq & ring.mask]
        rec[C.DR_FIRED_NS] |= C.DR_CLAIM_RUN << C.DR_CLAIM_SHIFT
        h = recover_rings(self.mem, 0)
        assert h is not None
        self.crashed.add(h)

    @rule()
    def reaper_dies(self) -> None:
        """The reaper died holding its backlog: the new one finds exactly those slots."""
        with self.mem.locked():
            orphans = firing_nowhere(self.mem)
        assert sorted(orphans.tolist()) == sorted(self.backlog.tolist())
        self.backlog = orphans

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def tables_verify(self) -> None:
        if hasattr(self, "mem"):
            with self.mem.locked():
                verify(self.mem, backlog=self.backlog)

    @invariant()
    def moves_follow_the_table(self) -> None:
        """Every move of a state word since the last check is a row of contract.h's
        SLOT_TRANSITIONS, and the moves of each slot chain from the word it had to the word
        it has: a write that bypassed slot_move breaks the chain."""
        if not hasattr(self, "mem"):
            return
        now = self.mem.nodes()[:, C.F_GS].copy()
        word = {s: int(w) for s, w in enumerate(self.words.tolist())}
        for slot, seen, want, tr in N.trace_take(self.mem.wheel):
            name = S.TRANSITIONS[tr].name
            assert S.allows(tr, seen, want), (
                f"slot {slot}: {name} moved {_word(seen)} -> {_word(want)}, which the "
                f"table does not allow"
            )
            assert word[slot] == seen, (
                f"slot {slot}: {name} moved from {_word(seen)}, but the slot held "
                f"{_word(word[slot])}: a state write bypassed slot_move"
            )
            word[slot] = want
            self.seen_moves.add(name)
        for slot, w in enumerate(now.tolist()):
            assert word[slot] == w, (
                f"slot {slot} holds {_word(w)}, but its last traced move left "
                f"{_word(word[slot])}: a state write bypassed slot_move"
            )
        self.words = now

    @invariant()
    def one_outcome(self) -> None:
        if hasattr(self, "mem"):
            self.check_outcomes(final=False)

    def check_outcomes(self, final: bool) -> None:
        runs: dict[int, list[int]] = defaultdict(list)
        for t, attempt, _ in RUNS:
            runs[t].append(attempt)
        for t, attempts in runs.items():
            assert t not in self.cancelled_true or t in self.every, (
                f"{t:#x} ran although cancel() returned True"
            )
            assert attempts == list(range(1, len(attempts) + 1)), (
                f"{t:#x}: runs {attempts} (each run once, in order)"
            )
            assert len(attempts) <= len(self.fired_at[t]), f"{t:#x} ran more often than fired"
        if final:
            for t in self.deadline:
                if t in self.every:
                    continue
                ran = len(runs.get(t, []))
                outcomes = ran + (t in self.cancelled_true) + (t in self.crashed and ran == 0)
                assert outcomes == 1, (
                    f"{t:#x}: ran {ran}, cancelled {t in self.cancelled_true},"
                    f" crashed {t in self.crashed}: not exactly one outcome"
                )


def _word(w: int) -> str:
    """A state word for a failure message: STATE@generation, then its reset bits."""
    text = f"{S.NAMES.get(C.gs_state(w), S.BAD)}@{C.gs_gen(w)}"
    return text + (f" from {C.gs_from(w)} aux {C.gs_aux(w)}" if C.gs_from(w) or C.gs_aux(w) else "")


MOVES_SEEN: set[str] = set()  # the transitions the machines made (reported, not asserted)
