"""The native fast paths of a Client and its Python paths agree: for the same inputs,
``schedule``, ``reset`` and ``watch`` give the same deadline (the one rule, producer.h's
``producer_due_ms``, checked here against the rule as docs/api.md states it), the same
error, the same slot record and the same journal record, whichever path took the call.
One client runs with the fast paths (the default), one with them off, as
``SHMWHEEL_CLIENT_SLOW_PATHS=1`` turns them off (service/caller/client_base.py); and the input
tests run whole in a process with that variable set.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from shmwheel import TimerService, journal
from shmwheel.segment import contract as C
from shmwheel.service.caller import client_base
from shmwheel.service.caller.client import Client

TASKS = {"record": "shmwheel.examples.tasks:append_line", "noop": "shmwheel.examples.tasks:noop"}
SLOW_HOOKS = ("_schedule_slow", "_schedule_checked", "_reset_slow", "_watch_slow")


def rule(now_ns: int, delay_ms: float) -> int:
    """The deadline rule: now plus the delay rounded up to the ns, rounded up to the ms."""
    return -(-(now_ns + math.ceil(delay_ms * 1e6)) // 1_000_000)


@pytest.fixture
def clients(tmp_path, monkeypatch):
    """A service with a journal; a client with the fast paths, one without; and a count
    of the calls each handed to Python (by hook and client)."""
    calls: Counter[tuple[str, str]] = Counter()
    for name in SLOW_HOOKS:
        original = getattr(Client, name)

        def counted(self, *a, _name=name, _f=original, **kw):  # type: ignore[no-untyped-def]
            calls[(_name, "fast" if self._fast_paths else "slow")] += 1
            return _f(self, *a, **kw)

        monkeypatch.setattr(Client, name, counted)
    with TimerService(tasks=TASKS, capacity=4000, executors=1, journal=tmp_path / "j") as svc:
        with svc.client() as fast:
            monkeypatch.setattr(client_base, "FAST_PATHS", False)
            with svc.client() as slow:
                monkeypatch.setattr(client_base, "FAST_PATHS", True)
                yield svc, fast, slow, calls


def timed(call, delay_ms: float):  # type: ignore[no-untyped-def]
    """call() (it makes a timer due `delay_ms` from now, and returns its handle), retried
    until the clock read just before and just after it give one deadline by the rule:
    (handle, that deadline)."""
    for _ in range(200):
        t0 = time.monotonic_ns()
        h = call()
        t1 = time.monotonic_ns()
        if rule(t0, delay_ms) == rule(t1, delay_ms):
            return h, rule(t0, delay_ms)
        h.cancel()
    raise AssertionError("never a call within one millisecond")


def slot_record(c: Client, h) -> tuple[int, bytes, int]:  # type: ignore[no-untyped-def]
    """(meta without its ring, payload bytes, deadline) of a handle's slot (while it is
    pending: a short delay's may be gone by the time it is read)."""
    slot = int(C.handle_slot(h.id))
    meta, word = (int(x) for x in c._mem.side.reshape(-1, C.SIDE_WORDS)[slot])
    n = int(C.meta_length(meta))
    if C.meta_flags(meta) & C.FLAG_ARENA:
        skip = C.OP_HEADER if C.meta_flags(meta) & C.FLAG_OP else 0
        data = bytes(c._mem.arena_block(int(C.meta_class(meta)), word)[: skip + n])
    else:
        data = word.to_bytes(8, "little", signed=True)[:n]
    ring = C.meta_make(0, 0, 0, 0, C.meta_ring(meta))
    return meta ^ ring, data, int(c._mem.nodes()[slot, C.F_DEADLINE])


DELAYS = [0, 0.25, 1, 1.5, 2.000001, 999.9994, 12_345, 59_999.99]
PAYLOADS = [None, 7, "short", b"x" * 30, {"a": [1, 2.5]}, "p" * 100]


def test_schedule_takes_the_same_deadline_and_record_on_both_paths(clients, tmp_path):
    svc, fast, slow, calls = clients
    limit = fast._max_delay
    pairs = []
    for d in [*DELAYS, limit - 1, limit - 0.001]:
        for p in PAYLOADS:
            got = []
            for c in (fast, slow):
                before = calls.copy()
                h, due = timed(lambda c=c: c.schedule("record", p, delay_ms=d), d)
                assert h.deadline_ms == due, (d, p, c._fast_paths)
                handed = calls - before
                if c is slow:  # every call, as given
                    assert handed[("_schedule_checked", "slow")] >= 1
                else:  # only what the native path does not take: a payload over 64 bytes
                    assert bool(handed) == (p == PAYLOADS[-1]), (d, p)
                got.append(h)
            if d >= 999:  # still pending: the slots hold what the journal says
                assert slot_record(fast, got[0])[:2] == slot_record(slow, got[1])[:2], (d, p)
            pairs.append(got)
    same_journal_records(svc, tmp_path, pairs, "scheduled")


def same_journal_records(svc, tmp_path, pairs, kind):  # type: ignore[no-untyped-def]
    """The service stopped, each pair's records of `kind` in the journal are the same but
    for their ids and times, and each has its handle's deadline."""
    svc.stop()
    recs = {r["id"]: r for r in journal.records(tmp_path / "j") if r["kind"] == kind}
    for a, b in pairs:
        ra, rb = recs.pop(a.id), recs.pop(b.id)
        assert (ra["deadline_ms"], rb["deadline_ms"]) == (a.deadline_ms, b.deadline_ms)
        for r in (ra, rb):
            del r["id"], r["t_us"], r["deadline_ms"]
        assert ra == rb


def test_reset_and_watch_take_the_same_deadline_on_both_paths(clients, tmp_path):
    svc, fast, slow, calls = clients
    watched = []
    for d in [*DELAYS, fast._max_delay - 1]:
        for c in (fast, slow):

            def reset(c=c):  # type: ignore[no-untyped-def]
                h = c.schedule("record", None, delay_ms=60_000)
                assert c.reset(h, d)
                return h

            h, due = timed(reset, d)
            assert h.deadline_ms == due, (d, c._fast_paths)
            if d >= 999:
                assert slot_record(c, h)[2] == due
            h.cancel()
        ops = [
            timed(lambda c=c: c.watch(["k", 1], d, on_expire="noop", payload=[d]), d)
            for c in (fast, slow)
        ]
        for op, due in ops:
            assert op.deadline_ms == due
        if d >= 999:
            assert slot_record(fast, ops[0][0])[:2] == slot_record(slow, ops[1][0])[:2]
        watched.append([op for op, _ in ops])
    assert calls[("_reset_slow", "fast")] == calls[("_watch_slow", "fast")] == 0
    assert calls[("_reset_slow", "slow")] >= len(DELAYS) + 1
    assert calls[("_watch_slow", "slow")] >= len(DELAYS) + 1
    same_journal_records(svc, tmp_path, watched, "watched")


BAD_SCHEDULES = [
    (("record",), {"delay_ms": -1}),
    (("record",), {"delay_ms": float("nan")}),
    (("record",), {"delay_ms": float("inf")}),
    (("record",), {"delay_ms": 10**30}),
    (("record",), {"delay_ms": "5"}),
    (("record",), {"delay_ms": True}),
    (("record",), {}),
    (("record",), {"delay_ms": 5, "deadline_ms": 5}),
    (("record",), {"deadline_ms": -5}),
    (("nope",), {"delay_ms": 5}),
    ((5,), {"delay_ms": 5}),
    (("record", object()), {"delay_ms": 5}),
    (("record", {1: 2}), {"delay_ms": 5}),
    (("record",), {"delay_ms": 5, "every_ms": 0}),
    (("record",), {"delay_ms": 5, "color": 1}),
]


def refusal(call) -> tuple[type, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception) as e:
        call()
    return type(e.value), str(e.value)


def test_bad_calls_get_the_same_error_on_both_paths(clients):
    _, fast, slow, _ = clients
    limit = fast._max_delay
    for args, kwargs in [*BAD_SCHEDULES, (("record",), {"delay_ms": limit})]:
        want = refusal(lambda: slow.schedule(*args, **kwargs))
        assert refusal(lambda: fast.schedule(*args, **kwargs)) == want, (args, kwargs)
    hf, hs = (c.schedule("record", None, delay_ms=60_000) for c in (fast, slow))
    for bad in (-1, float("nan"), "x", limit, 10**30, None):
        want = refusal(lambda: slow.reset(hs, bad))
        assert refusal(lambda: fast.reset(hf, bad)) == want, bad
    for args, kwargs in [
        ((["a"], -1), {}),
        ((["a"], float("nan")), {}),
        ((["a"], limit), {}),
        ((["a"], "x"), {}),
        (("a", 5), {}),
        (([], 5), {}),
        ((["a"], 5), {"required": 0}),
        ((["a"], 5), {"on_complete": "nope"}),
        ((["a"], 5), {"payload": {1: 2}}),
    ]:
        want = refusal(lambda: slow.watch(*args, **kwargs))
        assert refusal(lambda: fast.watch(*args, **kwargs)) == want, (args, kwargs)


@pytest.mark.system  # runs test_inputs.py again in a child pytest
def test_the_input_tests_pass_with_the_fast_paths_off():
    """The client's input tests (every refusal at the call, on every path) run whole with
    SHMWHEEL_CLIENT_SLOW_PATHS=1: each call takes its Python path."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, SHMWHEEL_CLIENT_SLOW_PATHS="1")
    check = [
        sys.executable,
        "-c",
        "from shmwheel.service.caller import client_base as b; assert not b.FAST_PATHS",
    ]
    assert subprocess.run(check, env=env, timeout=60).returncode == 0
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_inputs.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
