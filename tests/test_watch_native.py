"""The purgatory's native hot path (shmwheel/native/watch.c): a key's id is the hash of its
msgpack encoding; the native watch writes exactly what the Python path writes; whatever it
does not cover goes to the Python path; and the segment lock it takes in C is the same lock
as the Python one (a thread holding it, a holder that died mid-update)."""

from __future__ import annotations

import threading
import time

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from local_segment import QuietClient, local_memory, small_config

from shmwheel import TimerService
from shmwheel import _native as N
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L
from shmwheel.service.caller import purgatory as ops
from shmwheel.service.caller.client import Client

TASKS = {"noop": "shmwheel.examples.tasks:noop"}
M64 = (1 << 64) - 1


def reference_id(key: object) -> int:
    """The documented id, from msgpack-python's own encoding: FNV-1a, then murmur3's
    finaliser, as a signed 64-bit int."""
    h = 0xCBF29CE484222325
    for b in msgpack.packb(key):
        h = ((h ^ b) * 0x100000001B3) & M64
    for mul in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        h = ((h ^ (h >> 33)) * mul) & M64
    h ^= h >> 33
    return h - (1 << 64) if h >> 63 else h


EDGE_INTS = [
    *(s * v for v in (0, 1, 31, 32, 33, 127, 128, 129, 255, 256, 32767, 32768, 32769)
      for s in (1, -1)),
    65535, 65536, 2**31 - 1, -(2**31), -(2**31) - 1, 2**32 - 1, 2**32,
    2**63 - 1, 2**63, M64, -(2**63),
]  # fmt: skip
EDGE_LENGTHS = [0, 1, 31, 32, 255, 256, 65535, 65536]


def test_key_ids_are_the_hash_of_msgpack_encoding_at_every_boundary():
    keys: list[object] = list(EDGE_INTS)
    for n in EDGE_LENGTHS:
        keys += ["x" * n, b"y" * n, "é" * n]
    for k in keys:
        assert N.key_id(k) == reference_id(k), repr(k)[:40]


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.integers(-(2**63), M64), st.text(), st.binary()))
def test_key_ids_are_the_hash_of_msgpack_encoding(key):
    assert N.key_id(key) == reference_id(key)


def test_what_is_not_a_key_is_refused_as_msgpack_would():
    for bad in (True, 1.5, None, [1], bytearray(b"a")):
        with pytest.raises(TypeError, match="a key must be a str, bytes or int"):
            N.key_id(bad)
    for big in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match="does not fit in 64 bits"):
            N.key_id(big)
    with pytest.raises(UnicodeEncodeError):
        N.key_id("\ud800")


@pytest.fixture
def svc_client():
    with TimerService(tasks=TASKS, capacity=500, executors=1, watch_capacity=256) as svc:
        with svc.client() as c:
            yield svc, c


@pytest.fixture
def slow_calls(monkeypatch):
    """How often the native watch / check_and_complete handed a call to Python."""
    calls = {"watch": 0, "cac": 0}
    watch_slow, cac_slow = Client._watch_slow, Client._check_and_complete_slow

    def counted_watch(self, *a, **kw):
        calls["watch"] += 1
        return watch_slow(self, *a, **kw)

    def counted_cac(self, *a, **kw):
        calls["cac"] += 1
        return cac_slow(self, *a, **kw)

    monkeypatch.setattr(Client, "_watch_slow", counted_watch)
    monkeypatch.setattr(Client, "_check_and_complete_slow", counted_cac)
    return calls


def python_watch(
    c: Client, keys, timeout_ms, *, on_complete=None, on_expire=None, payload=None, required=1
):
    """The Python path itself (the fixture counts calls of Client._watch_slow, not of its
    definition in PurgatoryCalls)."""
    return ops.PurgatoryCalls._watch_slow(
        c,
        keys,
        timeout_ms,
        on_complete=on_complete,
        on_expire=on_expire,
        payload=payload,
        required=required,
    )


def _record(c: Client, op) -> tuple[int, bytes]:
    """An operation's side record: its meta word and its block's bytes (OP_HEADER, then
    msgpack [keys, payload])."""
    mem = c._mem
    slot = int(C.handle_slot(op.id))
    meta, word = (int(x) for x in mem.side.reshape(-1, C.SIDE_WORDS)[slot])
    length = int(C.meta_length(meta)) + C.OP_HEADER
    return meta, bytes(mem.arena_block(int(C.meta_class(meta)), word)[:length])


COMMON = [
    ((["a"], 60_000), {}),
    (
        (["a", "b", "a"], 60_000.5),
        {"payload": {"x": 1}, "required": 3, "on_complete": "noop", "on_expire": None},
    ),
    (([1, b"k", "é", -40, 2**63], 60_000), {"payload": [1, 2.5, None], "on_expire": "noop"}),
    ((tuple(f"k{i}" for i in range(16)), 60_000), {"payload": "p" * 300}),
]


def test_native_watch_writes_what_the_python_path_writes(svc_client, slow_calls):
    svc, c = svc_client
    for args, kwargs in COMMON:
        start = time.monotonic()
        fast = c.watch(*args, **kwargs)
        assert slow_calls["watch"] == 0, f"{args!r} went to the Python path"
        slow = python_watch(c, *args, **kwargs)
        apart_ms = (time.monotonic() - start) * 1000  # a loaded machine may pause between
        assert type(fast) is type(slow)
        assert abs(fast.deadline_ms - slow.deadline_ms) <= 5 + apart_ms
        assert _record(c, fast) == _record(c, slow), args
        keys, payload = msgpack.unpackb(_record(c, fast)[1][C.OP_HEADER :])
        assert keys == list(dict.fromkeys(args[0])) and payload == kwargs.get("payload")
    for key in ("a", "b", 1, "k15"):
        c.check_and_complete(key, 3)
    assert slow_calls["cac"] == 0
    stats = svc.stats()["operations"]
    assert stats["watched"] == 2 * len(COMMON)  # every one, of both paths
    assert stats["completed"] == 2 * len(COMMON)


def test_what_the_native_path_does_not_cover_goes_to_python(svc_client, slow_calls):
    svc, c = svc_client

    class Keys(list):
        pass

    unusual = [
        ((Keys(["a"]), 60_000), {}),  # a list subclass
        (([f"k{i}" for i in range(17)], 60_000), {}),  # more keys than the fast path takes
        ((["a"], 60_000), {"required": np.int64(2)}),  # not an exact int
        ((["a"],), {"timeout_ms": 60_000}),  # a keyword the native path does not parse
    ]
    for i, (args, kwargs) in enumerate(unusual, 1):
        op = c.watch(*args, **kwargs)
        assert slow_calls["watch"] == i and type(op).__name__ == "Operation"
    assert c.check_and_complete(key="a", amount=np.int64(2)) == 3  # all but the 17-key one
    assert slow_calls["cac"] == 1
    assert c.check_and_complete("k16") == 1 and slow_calls["cac"] == 1
    assert svc.stats()["operations"]["completed"] == 3 + 1


def test_a_thread_holding_the_lock_holds_off_the_native_path(svc_client):
    """The native path takes the segment lock's thread half too: flock alone cannot keep
    out a thread of the same process (it shares the lock's file)."""
    _, c = svc_client
    released = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        with c._mem.locked():
            holding.set()
            time.sleep(0.2)
            released.set()

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(5)
    c.watch(["held"], 60_000)
    assert released.is_set(), "watch ran while another thread held the segment lock"
    t.join()
    released.clear()
    holding.clear()
    t = threading.Thread(target=hold)
    t.start()
    holding.wait(5)
    assert c.check_and_complete("held") == 1
    assert released.is_set(), "check_and_complete ran inside another thread's lock"
    t.join()


@pytest.fixture
def local_client():
    """A client over a segment in this process's memory: no coordinator to race."""
    cfg = small_config(capacity=64, arena_blocks=(6, 3, 1, 1), tasks=(("noop", "t:noop"),),
                       watch_capacity=12)  # fmt: skip
    mem = local_memory("native", cfg)
    c = QuietClient(mem, 0)
    yield mem, c
    c._closed = True
    c._release()
    mem.close()


def test_a_dirty_lock_is_repaired_before_the_native_path_uses_it(local_client):
    """A holder that died mid-update leaves the dirty word set: the call goes to the Python
    path, which repairs first, then does the work."""
    mem, c = local_client
    for call in (lambda: c.watch(["d"], 60_000), lambda: c.check_and_complete("d")):
        mem.header[L.W_DIRTY] = 1  # as if a holder died here
        repairs = int(mem.header[L.W_REPAIRS])
        call()
        assert mem.header[L.W_REPAIRS] == repairs + 1 and mem.header[L.W_DIRTY] == 0
    assert mem.counters[:, C.C_OPS_COMPLETED].sum() == 1
