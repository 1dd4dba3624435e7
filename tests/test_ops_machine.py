"""The purgatory's state machine without processes: the slot machine of
tests/slot_machine.py, plus operations watched on a few keys, signalled from any client,
cancelled, and crash repairs that scramble the watch lists. After every step: verify()
(the watch lists included), and every operation that ended had exactly one outcome, the
right one: completed only once its keys' amounts reached `required` (and then at once),
expired only at or after its timeout and only while short of `required`, cancelled only
when cancel() said True; its task ran once (on_complete "record", on_expire "failing").
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from shmwheel import Full
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from tests.local_segment import QuietClient
from tests.slot_machine import RUNS, SlotMachine


class RacingClient(QuietClient):
    """Runs `before_submit` (once) between writing an operation and publishing it: a
    signal from another process that meets the operation still RESERVED."""

    before_submit = None

    def _wake_reaper(self) -> None:
        pass

    def watch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        """The Python path: its deadlines come from operations.time, which the machine
        makes the wheel's clock; the native path reads the real one (what it writes is the
        Python path's record: tests/test_watch_native.py). check_and_complete, which reads
        no clock, stays native."""
        return self._watch_slow(*args, **kwargs)

    def _submit(self, h: int, meta: int, word: int, deadline: int) -> bool:
        hook, self.before_submit = self.before_submit, None
        if hook is not None:
            hook()
        return super()._submit(h, meta, word, deadline)


KEYS = ["a", "b", "c"]


class OpsMachine(SlotMachine):
    def _connect(self, ring: int) -> RacingClient:
        self.mem.ring_table[ring, L.RT_STATE] = L.RING_CLAIMED
        return RacingClient(self.mem, ring)

    def _ops(self) -> dict[int, dict]:
        if not hasattr(self, "ops"):
            self.ops: dict[int, dict] = {}
            self.op_outcome: dict[int, int] = {}
        return self.ops

    # -- operations ---------------------------------------------------------------------
    @rule(
        c=st.integers(0, 1),
        keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
        required=st.integers(1, 3),
        timeout=st.integers(0, 40),
    )
    def watch(self, c: int, keys: list[str], required: int, timeout: int) -> None:
        try:
            op = self.clients[c].watch(
                keys, timeout, on_complete="record", on_expire="failing", required=required
            )
        except Full:
            return
        self._ops()[op.id] = {
            "keys": set(keys),
            "required": required,
            "deadline": op.deadline_ms,
            "signalled": 0,
            "cancel_won": False,
            "completed_at_signal": False,
            "signalled_at_fire": None,
        }

    def _state(self, h: int) -> int:
        slot = C.handle_slot(h)
        gs = int(self.mem.nodes()[slot, C.F_GS])
        return C.gs_state(gs) if C.gs_gen(gs) == C.handle_gen(h) else -1

    @rule(c=st.integers(0, 1), key=st.sampled_from(KEYS), amount=st.integers(1, 2))
    def signal(self, c: int, key: str, amount: int) -> None:
        expect = 0
        for h, o in self._ops().items():
            s = self._state(h)
            if key not in o["keys"] or s not in (C.ST_RESERVED, C.ST_SUBMITTED, C.ST_PENDING):
                continue
            o["signalled"] += amount
            if s in (C.ST_PENDING, C.ST_SUBMITTED) and o["signalled"] >= o["required"]:
                expect += 1
                o["completed_at_signal"] = True
        n = self.clients[c].check_and_complete(key, amount)
        assert n == expect, f"check_and_complete({key!r}) completed {n}, expected {expect}"

    @rule(c=st.integers(0, 1), key=st.sampled_from(KEYS), timeout=st.integers(0, 40))
    def watch_racing_a_signal(self, c: int, key: str, timeout: int) -> None:
        """Another client signals `key` while this watch is still RESERVED: the amount
        counts, and the coordinator completes the operation as it links it."""
        self.clients[c].before_submit = lambda: self.signal(1 - c, key, 1)
        try:
            op = self.clients[c].watch(
                [key], timeout, on_complete="record", on_expire="failing", required=1
            )
        except Full:
            self.clients[c].before_submit = None
            return
        self._ops()[op.id] = {
            "keys": {key},
            "required": 1,
            "deadline": op.deadline_ms,
            "signalled": 1,  # it counted while RESERVED
            "cancel_won": False,
            "completed_at_signal": False,
            "signalled_at_fire": None,
        }

    @precondition(lambda self: getattr(self, "ops", None))
    @rule(c=st.integers(0, 1), pick=st.integers(0, 10**6))
    def cancel_op(self, c: int, pick: int) -> None:
        ids = sorted(self.ops)
        h = ids[pick % len(ids)]
        before = self._state(h)
        won = self.clients[c].cancel(h)
        assert won == (before in (C.ST_SUBMITTED, C.ST_PENDING)), (
            f"{h:#x}: cancel returned {won} in state {before}"
        )
        if won:
            self.ops[h]["cancel_won"] = True

    @rule()
    def watch_lists_scrambled_by_a_dead_holder(self) -> None:
        """A lock holder died halfway through a watch-list update: the next holder's
        repair rebuilds every chain from the entries."""
        wt = self.mem.watch
        nb = int(wt[C.WT_NBUCKETS])
        wt[C.WT_HEADER : C.WT_HEADER + nb] = -1
        wt[C.WT_FREE] = -1
        self.mem.header[L.W_DIRTY] = 1
        with self.mem.locked():
            pass

    @rule()
    def purge(self) -> None:
        with self.mem.locked():
            self.tables.watch_purge(4)

    # -- the reaper, aware of operations -------------------------------------------------
    def _fired(self, h: int, t: int) -> None:
        o = self._ops().get(h)
        if o is None:
            return super()._fired(h, t)
        assert not o["cancel_won"], f"operation {h:#x} ran after a cancel won"
        meta = int(self.mem.side[C.handle_slot(h) * C.SIDE_WORDS + C.S_META])
        if C.meta_flags(meta) & C.FLAG_COMPLETED:
            assert o["signalled"] >= o["required"], f"{h:#x} completed short"
        else:  # an expiry: never early, never once its amounts were all in
            assert o["deadline"] <= t, f"operation {h:#x} expired early"
            assert o["signalled"] < o["required"], f"{h:#x} expired although due"
            o["signalled_at_fire"] = o["signalled"]
        self.fired_at[h].append(t)
        return None

    # -- the outcome of each operation, read from its freed slot as it ends -----------------
    @invariant()
    def operations_have_one_right_outcome(self) -> None:
        if not hasattr(self, "mem"):
            return
        runs: dict[int, int] = defaultdict(int)
        for t, _, _ in RUNS:
            runs[t] += 1
        for h, o in self._ops().items():
            ran = runs.get(h, 0)
            assert ran <= 1, f"operation {h:#x} ran {ran} times"
            if h in self.op_outcome or self._state(h) != -1:
                continue
            # what a late ask reads: the freed slot's payload word (until it is reserved
            # again, which no rule does between an operation's end and this check)
            _, w = self.mem.bind_tables().outcome_state(h, -1)
            assert C.out_gen(w) == C.handle_gen(h), f"operation {h:#x} ended with no outcome"
            code = C.out_code(w)
            self.op_outcome[h] = code
            task = code & C.OC_TASK_MASK
            if o["cancel_won"]:
                assert code == C.OC_CANCELLED, f"{h:#x}: cancel won, yet outcome {code:#x}"
                assert ran == 0, f"{h:#x}: cancel won, yet it ran"
            elif task == C.OUTCOME_CRASHED:
                assert h in self.crashed, f"{h:#x}: outcome crashed, yet no executor died"
            elif code & C.OC_COMPLETED:
                assert o["signalled"] >= o["required"], f"{h:#x} completed short of required"
                assert task in (C.OUTCOME_OK, C.OUTCOME_CRASHED), f"{h:#x}: {code:#x}"
            else:
                assert code & C.OC_EXPIRED, f"{h:#x}: outcome {code:#x} is neither"
                assert o["signalled_at_fire"] is not None, f"{h:#x} expired unseen"
                assert o["signalled_at_fire"] < o["required"], f"{h:#x} expired although due"
                assert task in (C.OUTCOME_ERROR, C.OUTCOME_CRASHED), f"{h:#x}: {code:#x}"


TestOpsMachine = OpsMachine.TestCase
TestOpsMachine.settings = settings(
    max_examples=200,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
