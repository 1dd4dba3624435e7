"""Trust boundaries of a client's calls (issue 20, part B): a handle is bound to the service
instance that made it, and every input is decided at the call.

- A handle (TimerHandle, Operation, TimerHandles) given to a client of another service, or
  of another run of a service of the same name, is refused with ValueError naming both,
  and nothing changes in either (the same id there is another timer).
- Deadlines outside the wheel's range, negative ones, NaN and infinite delays are refused
  with ValueError on every path (the native schedule, the Python one, schedule_many,
  every_ms, watch's timeout_ms), and a refusal never costs a slot.
- A payload the executor could not decode (a dict key that is not a str or bytes, at any
  depth: it decodes with msgpack's strict_map_key) is refused at the call with TypeError
  on every path; one with str and bytes keys is delivered.
"""

from __future__ import annotations

import math
from collections import UserList
from pathlib import Path

import pytest
from helpers import MINE, wait_for

from shmwheel import Full, TimerService

TASKS = {"record": "shmwheel.examples.tasks:append_line"}
FOREIGN = "was made by"  # the refusal's message (handles.check_owner)


def tags(path: Path) -> list[str]:
    """The tags shmwheel.examples.tasks:append_line wrote, in order."""
    if not path.exists():
        return []
    return [line.split(" ")[4] for line in path.read_text().splitlines()]


def small(**kw):
    return TimerService(tasks=TASKS, capacity=kw.pop("capacity", 64), executors=1, **kw)


# -- handles are bound to their service ---------------------------------------------------
def test_a_handle_of_another_service_is_refused_and_changes_nothing(tmp_path):
    log_a, log_b = tmp_path / "a", tmp_path / "b"
    with small() as a, small() as b, a.client() as ca, b.client() as cb:
        ha = ca.schedule("record", {"path": str(log_a), "tag": "a"}, delay_ms=400)
        hb = cb.schedule("record", {"path": str(log_b), "tag": "b"}, delay_ms=400)
        assert ha.id == hb.id, "fresh services hand out the same first id"
        assert ha != hb and hb != ha, "handles of two services are not equal"
        many_a = ca.schedule_many("record", [400, 400], [{"path": str(log_a), "tag": "m"}] * 2)
        many_b = cb.schedule_many("record", [400, 400], [{"path": str(log_b), "tag": "m"}] * 2)
        assert list(many_a.ids) == list(many_b.ids)
        for call in (
            lambda: cb.cancel(ha),
            lambda: cb.cancel_many([ha]),
            lambda: cb.cancel_many([hb.id, ha]),  # refused whole: hb is not cancelled either
            lambda: cb.cancel_many(many_a),
            lambda: cb.cancel_many(list(many_a)),
            lambda: ca.cancel(hb),
        ):
            with pytest.raises(ValueError, match=FOREIGN) as e:
                call()
            assert a.name in str(e.value) and b.name in str(e.value), "names both services"
        with a.client() as other:  # another client of the same service may cancel
            extra = ca.schedule("record", {"path": str(log_a), "tag": "x"}, delay_ms=60_000)
            assert other.cancel(extra) and not extra.cancel()
        wait_for(lambda: len(tags(log_a)) == 3 and len(tags(log_b)) == 3, what="every run")
    assert sorted(tags(log_a)) == ["a", "m", "m"] and sorted(tags(log_b)) == ["b", "m", "m"]


def test_an_operation_of_another_service_is_refused_and_changes_nothing():
    with small() as a, small() as b, a.client() as ca, b.client() as cb:
        op_a = ca.watch(["k"], 60_000)
        op_b = cb.watch(["k"], 60_000)
        assert op_a.id == op_b.id and op_a != op_b
        with pytest.raises(ValueError, match=FOREIGN) as e:
            cb.cancel(op_a)
        assert a.name in str(e.value) and b.name in str(e.value)
        with pytest.raises(ValueError, match=FOREIGN):
            cb.cancel_many([op_a])
        assert not op_a.done() and not op_b.done()
        assert cb.check_and_complete("k") == 1 and ca.check_and_complete("k") == 1
        assert op_a.result(timeout=10) == op_b.result(timeout=10) == "completed"


def test_a_handle_of_an_earlier_run_of_the_same_name_is_refused(tmp_path):
    log = tmp_path / "log"
    name = f"{MINE}again"
    with small(name=name) as first, first.client() as c1:
        old = c1.schedule("record", {"path": str(log), "tag": "old"}, delay_ms=60_000)
        old_many = c1.schedule_many("record", [60_000])
    with small(name=name) as second, second.client() as c2:
        new = c2.schedule("record", {"path": str(log), "tag": "new"}, delay_ms=300)
        assert new.id == old.id and new != old
        for call in (
            lambda: c2.cancel(old),
            lambda: c2.cancel_many([old]),
            lambda: c2.cancel_many(old_many),
        ):
            with pytest.raises(ValueError, match=f"another instance of service '{name}'"):
                call()
        wait_for(lambda: tags(log) == ["new"], what="the new run's timer")
        assert second.stats()["cancelled"] == 0


# -- deadlines and delays -------------------------------------------------------------------
BAD_DEADLINES = (-1, -(2**63), -(2**70), 2**63, 2**70)
BAD_DELAYS = (math.nan, math.inf, -math.inf, -1, -(2**70), 2**63, 2**70, 10**400)


def test_bad_deadline_costs_no_slot_and_leaves_the_service_whole():
    with small(capacity=8) as svc, svc.client() as c:
        for _ in range(20):
            with pytest.raises(ValueError, match="deadline_ms"):
                c.schedule("record", {"tag": "x"}, deadline_ms=-(2**70))
        hs = [c.schedule("record", {"tag": "x"}, delay_ms=60_000) for _ in range(8)]
        with pytest.raises(Full):
            c.schedule("record", {"tag": "x"}, delay_ms=60_000)
        assert len({h.id for h in hs}) == 8 and svc.stats()["scheduled"] == 8


def test_out_of_range_times_are_refused_on_every_path():
    with small(capacity=8) as svc, svc.client() as c:
        calls = []
        for d in BAD_DEADLINES:
            calls.append(lambda d=d: c.schedule("record", deadline_ms=d))
            calls.append(lambda d=d: c.schedule("record", key="k", deadline_ms=d))
        for d in BAD_DELAYS:
            calls.append(lambda d=d: c.schedule("record", delay_ms=d))  # the native path
            calls.append(lambda d=d: c.schedule("record", key="k", delay_ms=d))  # Python's
            calls.append(lambda d=d: c.schedule("record", delay_ms=5, every_ms=d))
            calls.append(lambda d=d: c.schedule_many("record", [5, d]))
            calls.append(lambda d=d: c.watch(["k"], d))  # the native path
            calls.append(lambda d=d: c.watch(UserList(["k"]), d))  # Python's
        for call in calls:
            with pytest.raises(ValueError):
                call()
        st = svc.stats()
        assert st["scheduled"] == 0 and st["pending"] == 0
        hs = c.schedule_many("record", [60_000] * 8)  # every slot still free
        assert len(hs) == 8


# -- payloads ---------------------------------------------------------------------------------
UNDECODABLE = (
    {1: "a"},
    {"a": {2: "b"}},
    [{None: 1}],
    {(1, 2): "x"},
    {"k": [{"deep": {1.5: 0}}]},
    {True: 1},
    {1: "x" * 100},  # too long for the native path's inline or small block
)


def test_a_payload_the_executor_cannot_decode_is_refused_at_the_call(tmp_path):
    log = tmp_path / "log"
    with small() as svc, svc.client() as c:
        for p in UNDECODABLE:
            for call in (
                lambda p=p: c.schedule("record", p, delay_ms=1),  # the native path
                lambda p=p: c.schedule("record", p, delay_ms=1, key="k"),  # Python's
                lambda p=p: c.schedule("record", p, delay_ms=1, every_ms=50),
                lambda p=p: c.schedule_many("record", [1, 1], [{"ok": 1}, p]),
                lambda p=p: c.watch(["k"], 1, on_expire="record", payload=p),  # native
                lambda p=p: c.watch(UserList(["k"]), 1, on_expire="record", payload=p),
            ):
                with pytest.raises(TypeError, match="dict keys must be str or bytes"):
                    call()
        st = svc.stats()
        assert st["scheduled"] == 0 and st["pending"] == 0
        good = {"path": str(log), "tag": "g", b"raw": {"n": [1, {b"x": b"y"}], "s": {}}}
        c.schedule("record", good, delay_ms=1)
        c.schedule("record", good, delay_ms=1, key="k")
        c.schedule_many("record", [1], [good])
        c.watch(["k"], 1, on_expire="record", payload=good)
        wait_for(lambda: len(tags(log)) == 4, what="the good payloads' runs")
        assert svc.stats()["task_errors"] == 0
