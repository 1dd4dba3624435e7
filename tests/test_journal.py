"""The journal: its format (round trip of every kind, byte-identical native and Python
encodings), what the reader rejects (torn tails, flipped bytes, bad versions, each with
its file and offset), rotation, retention, the directory lock, and recovery after a
clean stop (original ids, cancelled stays cancelled, repeating timers resume, due ones
run at once). The whole-service SIGKILL loop is tests/test_journal_crash.py."""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import msgpack
import numpy as np
import pytest
from helpers import TASKS, read_log, wait_for

from shmwheel import RecoveryError, TimerService, journal
from shmwheel import _native as N
from shmwheel.errors import JournalInUse
from shmwheel.journal import check, reader, scan
from shmwheel.journal import format as F
from shmwheel.journal.directory import claim
from shmwheel.journal.recover import recovery
from shmwheel.journal.write.writer import JournalOptions, SegmentWriter, _max_gen
from shmwheel.segment import contract as C

SAMPLES = {  # one record of every kind, as format.body takes them
    F.SCHEDULED: (0x1_0000_0005, 123456789, 5000, 1, 4242, F.FLAG_KEY, 0, 1, b"\x92\xa1k\x01"),
    F.CANCELLED: (0x2_0000_0007, 2**40),
    F.FIRED: (7, 99, 3, -5),
    F.OUTCOME: (7, 100, 3, 2, 70000, -1),
    # keys is the count; the blob is msgpack [keys, payload] (the native scanner decodes it)
    F.WATCHED: (9, 1, 2000, 2, 3, 0, 65535, msgpack.packb([["a", b"b", 3], None])),
    F.COMPLETED: (9, 3),
    F.EXPIRED: (10, 2**62),
}


def write_segment(directory: Path, bodies: list[bytes], epoch: int = 1, **opts: object) -> str:
    w = SegmentWriter(
        JournalOptions(str(directory), "none", epoch=epoch, **opts),  # type: ignore[arg-type]
        "recovery",
        "svc-test",
        ["record", "boom"],
        1,
    )
    for b in bodies:
        w.append(b)
    w.flush()
    w.close()
    return w.path


def frames(path: str) -> list[tuple[int, bytes]]:
    """(offset, body) of every record frame of a well-formed file."""
    data = Path(path).read_bytes()
    at, out = len(F.MAGIC), []
    while at < len(data):
        n, _ = struct.unpack_from("<II", data, at)
        out.append((at, data[at + 8 : at + 8 + n]))
        at += 8 + n
    return out


# -- the format ---------------------------------------------------------------------------
def test_every_kind_round_trips(tmp_path):
    bodies = [F.body(k, *fields) for k, fields in SAMPLES.items()]
    path = write_segment(tmp_path, bodies)
    seg = reader.read_segment(path)
    assert not seg.rejects
    assert seg.header is not None and seg.header["service"] == "svc-test"
    assert seg.header["role"] == F.ROLE_CODES["recovery"] and seg.header["pid"] == os.getpid()
    assert [r[0] for r in seg.records] == list(SAMPLES)
    for rec in seg.records:
        assert tuple(rec[1:]) == SAMPLES[rec[0]]
        assert set(F.as_dict(rec)) == {"kind", *F.FIELDS[rec[0]]}
    with pytest.raises(ValueError, match="fields"):
        F.body(F.FIRED, 1, 2)


def test_native_crc_and_encoding_match_zlib_and_msgpack(tmp_path):
    for data in (b"", b"a", os.urandom(3), os.urandom(4097)):
        assert N.journal_crc32(data) == zlib.crc32(data)
    # the native encoder's records (written by a service) are byte-for-byte what
    # msgpack-python packs for the same values, framed with their CRC-32C
    # (test_journal_versions.py checks the CRC-32C functions)
    d = tmp_path / "j"
    with TimerService(tasks=TASKS, capacity=1000, executors=1, journal=d) as svc:
        with svc.client() as c:
            for i, v in enumerate([None, 1, -1, 300, -40000, 2**33, "x" * 300, b"y" * 70]):
                c.schedule(
                    "record",
                    {"path": str(tmp_path / "log"), "tag": str(v)},
                    delay_ms=i,
                    key=i if i % 2 else None,
                )
            c.schedule(
                "record", {"path": str(tmp_path / "log"), "tag": "r"}, delay_ms=1, every_ms=20
            ).cancel()
            c.schedule("boom", None, delay_ms=1)
            wait_for(lambda: svc.stats()["completed"] + svc.stats()["task_errors"] >= 9)
    kinds = Counter()
    for path in F.segment_files(d):
        data = Path(path).read_bytes()
        for at, body in frames(path):
            assert data[at + 4 : at + 8] == N.journal_crc32c(body).to_bytes(4, "little")
            rec = msgpack.unpackb(body)
            kinds[rec[0]] += 1
            assert msgpack.packb(rec) == body, f"{path} at {at}: not msgpack's encoding"
    assert {F.HEADER, F.SCHEDULED, F.CANCELLED, F.FIRED, F.OUTCOME} <= set(kinds)


def test_torn_and_corrupt_records_are_reported_with_file_and_offset(tmp_path):
    bodies = [F.body(F.CANCELLED, i, i) for i in range(10)]
    path = write_segment(tmp_path, bodies)
    fr = frames(path)
    data = Path(path).read_bytes()

    # a byte flipped inside record 3's body: that record is rejected, the rest read
    bad = bytearray(data)
    bad[fr[4][0] + 8] ^= 0x40  # frames[0] is the header
    Path(path).write_bytes(bytes(bad))
    seg = reader.read_segment(path)
    assert [r[1] for r in seg.records] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert [(r.file, r.offset, r.reason) for r in seg.rejects] == [(path, fr[4][0], "bad CRC-32C")]

    # a torn tail: the writer died mid-record (the last frame is the END its close wrote)
    last = fr[-2][0]
    assert seg.end is not None and fr[-1][0] > last
    Path(path).write_bytes(data[: last + 5])
    seg = reader.read_segment(path)
    assert len(seg.records) == 9 and seg.rejects[0].offset == last and seg.end is None
    assert "torn" in seg.rejects[0].reason
    Path(path).write_bytes(data[: last + 10])  # its frame whole, its body not
    seg = reader.read_segment(path)
    assert len(seg.records) == 9 and "torn" in seg.rejects[0].reason
    assert str(seg.rejects[0]).startswith(f"{path} at byte {last}")
    Path(path).write_bytes(data[: len(F.MAGIC)])  # nothing after the magic
    seg = reader.read_segment(path)
    assert not seg.records and seg.rejects[0].reason == "torn: the file ends before its header"

    # a length that cannot be right ends the file
    bad = bytearray(data)
    bad[fr[2][0] : fr[2][0] + 4] = struct.pack("<I", F.MAX_BODY + 1)
    Path(path).write_bytes(bytes(bad))
    seg = reader.read_segment(path)
    assert len(seg.records) == 1 and "bad frame length" in seg.rejects[0].reason

    # an unknown version, a foreign file
    Path(path).write_bytes(F.MAGIC[:7] + bytes([F.VERSION + 1]) + data[8:])
    seg = reader.read_segment(path)
    assert not seg.records and seg.rejects[0].offset == 7
    assert "unknown format version" in seg.rejects[0].reason
    Path(path).write_bytes(b"PK\x03\x04" + data[4:])
    assert "bad magic" in reader.read_segment(path).rejects[0].reason

    # a well-framed body of an unknown kind or the wrong arity
    odd = write_segment(tmp_path, [msgpack.packb([99, 1]), msgpack.packb([F.FIRED, 1])])
    assert [r.reason for r in reader.read_segment(odd).rejects] == [
        "not a record of a known kind and arity"
    ] * 2

    rejects: list[journal.Reject] = []
    list(journal.records(tmp_path, rejects))
    assert len(rejects) == 3  # the foreign file and the two odd records


def test_records_shorter_than_the_scanners_guess_are_all_read(tmp_path):
    """The scanner's rows array is sized for records of usual length and grows when they
    are shorter (here 12-byte cancels, half the guess): every record is read, in order,
    and a bad one past the first growth is still rejected alone."""
    bodies = [F.body(F.CANCELLED, i, i) for i in range(3000)]
    path = write_segment(tmp_path, bodies)
    size = os.path.getsize(path)
    assert size // reader._ROW_GUESS_BYTES < len(bodies)  # so the rows array must grow
    seg = reader.read_segment(path)
    assert [r[1] for r in seg.records] == list(range(3000)) and not seg.rejects
    fr = frames(path)
    bad = bytearray(Path(path).read_bytes())
    bad[fr[2500][0] + 8] ^= 0x40  # frames[0] is the header: record 2499
    Path(path).write_bytes(bytes(bad))
    seg = reader.read_segment(path)
    assert [r[1] for r in seg.records] == [i for i in range(3000) if i != 2499]
    assert [r.reason for r in seg.rejects] == ["bad CRC-32C"]


def test_the_clock_pair_is_read_as_one_instant(monkeypatch):
    """A preemption between the monotonic and the wall clock read skews their difference,
    which a recovery on another boot adds to every deadline (a CI run saw 5 ms): the pair
    is the tightest of three bracketed reads."""
    mono = iter([0, 5_000_000, 5_010_000, 5_012_000, 6_000_000, 9_000_000])  # ns
    wall = iter([10**15 + 1_000, 10**15 + 5_011_000, 10**15 + 7_000_000])
    monkeypatch.setattr(F.time, "monotonic_ns", lambda: next(mono))
    monkeypatch.setattr(F.time, "time_ns", lambda: next(wall))
    # tries: [0, 5 ms] preempted, [5.010, 5.012 ms] tight, [6, 9 ms] preempted
    assert F.clock_pair_us() == (5_011, (10**15 + 5_011_000) // 1000)


def test_a_new_segments_next_gen_is_the_highest_slot_generation():
    """next_gen, taken at every new segment, is the highest generation of any slot (a
    recovery issues ids above it), whatever a state word's lower fields hold: a reset
    sequence, a RESETTING word's origin and ring, the state."""
    rng = np.random.default_rng(7)
    n = 5000
    gens = rng.integers(0, C.GS_GEN_MASK, n)
    words = C.gs_make(gens, C.ST_PENDING, rng.integers(0, C.GS_AUX_MASK + 1, n))
    words[::7] = [C.gs_make_hold(int(g), C.ST_PENDING, 5) for g in gens[::7]]
    top = int(gens.max()) + 1
    words[3] = C.gs_make(top, 0)  # the highest generation, every lower field 0 ...
    words[4] = C.gs_make(top - 1, 0xFF, C.GS_AUX_MASK)  # ... above one just below, all set
    nodes = np.zeros((n, C.NODE_WORDS), np.int64)
    nodes[:, C.F_GS] = words
    mem = SimpleNamespace(nodes=lambda: nodes)
    assert _max_gen(mem) == top == int(C.gs_gen(words).max())  # type: ignore[arg-type]
    nodes[3, C.F_GS] = C.gs_make(C.GS_GEN_MASK, C.ST_CANCELLED)  # the largest there is
    assert _max_gen(mem) == C.GS_GEN_MASK  # type: ignore[arg-type]


def test_segments_rotate_and_sort_by_creation(tmp_path):
    w = SegmentWriter(
        JournalOptions(str(tmp_path), "always", segment_bytes=1 << 16),
        "coordinator",
        "svc-test",
        ["record"],
        1,
    )
    for i in range(20000):
        w.append(F.body(F.CANCELLED, i, i))
        if i % 100 == 99:
            w.flush()
    w.close()
    files = F.segment_files(tmp_path)
    assert len(files) >= 3
    segs = [reader.read_segment(p) for p in files]
    assert [s.header["seq"] for s in segs] == list(range(1, len(segs) + 1))  # type: ignore[index]
    assert [r[1] for s in segs for r in s.records] == list(range(20000))
    # bounded: a segment ends at the first flush past segment_bytes
    assert all(s.size < (1 << 16) + 100 * 20 for s in segs)


def test_retention_deletes_or_keeps_earlier_epochs(tmp_path):
    """A start deletes the earlier epochs' segments older than keep_hours, their names
    first recorded (RETIRED) in its own segment, and only those read whole and intact."""
    old = write_segment(tmp_path, [F.body(F.CANCELLED, 1, 1)], epoch=1)
    bad = write_segment(tmp_path, [F.body(F.CANCELLED, 3, 3)], epoch=1)
    data = bytearray(Path(bad).read_bytes())
    data[frames(bad)[1][0] + 8] ^= 0x40  # its record fails its CRC
    Path(bad).write_bytes(bytes(data))
    w = SegmentWriter(
        JournalOptions(str(tmp_path), "none", epoch=2, keep_hours=1.0), "recovery", "s", [], 1
    )
    intact = check.inspect(str(tmp_path)).intact()
    assert old in intact and bad not in intact
    assert recovery.retire_epochs(w, intact) == 0
    assert os.path.exists(old)
    for path in (old, bad):
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    assert recovery.retire_epochs(w, intact) == 1
    w.close()
    assert not os.path.exists(old) and os.path.exists(bad) and os.path.exists(w.path)
    assert reader.read_segment(w.path).retired == [os.path.basename(old)]


def test_a_second_service_on_a_journal_gets_a_clear_error(tmp_path):
    fd = claim(str(tmp_path), "first")
    try:
        with pytest.raises(JournalInUse, match="service first"):
            claim(str(tmp_path), "second")
        with pytest.raises(JournalInUse, match="another service"):
            TimerService(tasks=TASKS, journal=tmp_path).start()
    finally:
        os.close(fd)
    claim_again = claim(str(tmp_path), "third")  # free once the holder is gone
    os.close(claim_again)


# -- recovery after a clean stop ------------------------------------------------------------
def test_restart_rearms_pending_timers_with_their_ids(tmp_path):
    log, d = tmp_path / "log", tmp_path / "j"

    def payload(tag: str) -> dict[str, str]:
        return {"path": str(log), "tag": tag}

    with TimerService(tasks=TASKS, capacity=5000, executors=1, journal=d) as svc:
        with svc.client() as c:
            ran = c.schedule("record", payload("ran"), delay_ms=1)
            due = c.schedule("record", payload("due"), delay_ms=300)  # due while stopped
            later = [
                c.schedule(
                    "record",
                    payload(f"later{i}") | {"pad": "p" * (i * 40)},
                    delay_ms=1500,
                    key=f"k{i}",
                )
                for i in range(4)
            ]
            gone = c.schedule("record", payload("gone"), delay_ms=400)
            rep = c.schedule("record", payload("rep"), delay_ms=1, every_ms=100)
            assert gone.cancel()
            wait_for(lambda: sum(r[0] == "rep" for r in read_log(log)) >= 2, what="2 runs")
    runs_before = [r[4] for r in read_log(log) if r[0] == "rep"]
    time.sleep(0.4)
    with TimerService(tasks=TASKS, capacity=5000, executors=1, journal=d) as svc:
        t_start = time.monotonic()  # (how long a start takes is not this test's business)
        assert svc.recovery["recovered"] == 6  # due, 4 later, rep
        assert svc.stats()["journal"]["recovered"] == 6
        wait_for(lambda: {"due", "later3"} <= {r[0] for r in read_log(log)}, what="re-armed")
        wait_for(
            lambda: sum(r[0] == "rep" for r in read_log(log)) >= len(runs_before) + 2,
            what="the repeating timer resumed",
        )
        with svc.client() as c:  # a handle of the first epoch, cancelled by its id
            c.cancel(rep.id)  # (False if it caught a run in flight: then no further runs)
    rows = read_log(log)
    by_tag = {r[0]: r for r in rows}
    assert Counter(r[0] for r in rows if r[0] != "rep") == Counter(
        ["ran", "due", "later0", "later1", "later2", "later3"]
    )
    assert "gone" not in by_tag
    assert by_tag["due"][1] == due.id and by_tag["ran"][1] == ran.id
    for i, h in enumerate(later):
        _, hid, deadline, run_ns, _, key = by_tag[f"later{i}"]
        assert (hid, deadline, key) == (h.id, h.deadline_ms, f"k{i}")
        assert run_ns >= deadline * 1_000_000  # never early
    # the due one ran at once on restart (not a period later)
    assert by_tag["due"][3] / 1e9 - t_start < 1.5
    reps = [r for r in rows if r[0] == "rep"]
    assert {r[1] for r in reps} == {rep.id}
    attempts = [r[4] for r in reps]
    assert attempts == sorted(attempts) and attempts[len(runs_before)] > runs_before[-1]
    # nothing left to recover: one-shots ran, the repeating one was cancelled
    with TimerService(tasks=TASKS, capacity=5000, executors=1, journal=d) as svc:
        assert svc.recovery["recovered"] == 0
        new = svc.client().schedule("record", payload("new"), delay_ms=1)
        assert new.id not in {r[1] for r in rows}  # ids stay unique across epochs


def test_recovery_refuses_a_service_that_cannot_hold_the_journal(tmp_path):
    d = tmp_path / "j"
    with TimerService(tasks=TASKS, capacity=5000, executors=1, journal=d) as svc:
        with svc.client() as c:
            hs = c.schedule_many("record", [60_000] * 3000)
            wait_for(lambda: svc.stats()["pending"] == 3000)
    top = max(h.id & 0xFFFFFFFF for h in hs)
    with pytest.raises(RecoveryError, match=f"capacity >= {top + 1}"):
        TimerService(tasks=TASKS, capacity=100, executors=1, journal=d).start()
    with pytest.raises(RecoveryError, match="'record'"):
        TimerService(tasks={"other": TASKS["boom"]}, capacity=5000, executors=1, journal=d).start()
    with TimerService(tasks=TASKS, capacity=5000, executors=1, journal=d) as svc:
        assert svc.recovery["recovered"] == 3000


def test_segments_no_timer_needs_are_deleted_while_running(tmp_path):
    """With small segments and timers that end quickly, the coordinator retires the
    segments behind it (carrying the few long-lived timers forward); a restart then still
    re-arms exactly the live timers, ids kept, and nothing that ended runs again."""
    log, d = tmp_path / "log", tmp_path / "j"

    def payload(tag: str) -> dict[str, str]:
        return {"path": str(log), "tag": tag}

    seg_bytes = 1 << 16
    with TimerService(
        tasks=TASKS, capacity=20_000, executors=1, journal=d, journal_segment_bytes=seg_bytes
    ) as svc:
        with svc.client() as c:
            long = [c.schedule("record", payload(f"long{i}"), delay_ms=60_000) for i in range(5)]
            rep = c.schedule("record", payload("rep"), delay_ms=1, every_ms=50)
            for k in range(12):  # ~20 segments of short timers that complete
                c.schedule_many("record", [1] * 2000, [payload(f"s{k}-{i}") for i in range(2000)])
                wait_for(
                    lambda k=k: svc.stats()["completed"] >= 2000 * (k + 1),
                    what="the short ones ran",
                )
            st = svc.stats()["journal"]
            wait_for(
                lambda: svc.stats()["journal"]["disk_bytes"] < 8 * seg_bytes,
                what="old segments deleted",
                timeout=10,
            )
            assert st["bytes_written"] > 16 * seg_bytes  # so most of it was deleted
    written = svc.recovery  # (empty: the first start)
    assert written == {} or written["recovered"] == 0
    runs = sum(r[0] == "rep" for r in read_log(log))
    with TimerService(tasks=TASKS, capacity=20_000, executors=1, journal=d) as svc:
        assert svc.recovery["recovered"] == 6  # the five long ones and the repeating one
        wait_for(lambda: sum(r[0] == "rep" for r in read_log(log)) > runs, what="rep resumed")
        with svc.client() as c:
            c.cancel(rep.id)
            assert all(c.cancel(h.id) for h in long)  # by their first-epoch ids
    rows = read_log(log)
    assert not any(r[0].startswith("long") for r in rows)
    shorts = Counter(r[0] for r in rows if r[0].startswith("s"))
    assert len(shorts) == 12 * 2000 and max(shorts.values()) == 1  # none ran twice


def test_fsync_always_and_a_new_boot(tmp_path, monkeypatch):
    """fsync "always" syncs every batch and recovers like the default; a journal written
    under another boot has its deadlines moved by the wall clocks' difference."""
    d = tmp_path / "j"
    with TimerService(
        tasks=TASKS, capacity=1000, executors=1, journal=d, journal_fsync="always"
    ) as svc:
        with svc.client() as c:
            h = c.schedule("record", {"path": str(tmp_path / "log"), "tag": "x"}, delay_ms=600_000)
            wait_for(lambda: svc.stats()["journal"]["syncs"] >= 1, what="a sync")
    st = recovery.scan(str(d))
    assert st.pending.ids.tolist() == [h.id] and st.pending.deadlines.tolist() == [h.deadline_ms]
    # the same journal read after a "reboot": monotonic clocks restarted
    monkeypatch.setattr(F, "boot_id", lambda: "another-boot")
    shift = scan.clock_offset_ms(reader.read_segment(F.segment_files(d)[0]).header, "another-boot")
    st = recovery.scan(str(d))
    assert abs(int(st.pending.deadlines[0]) - (h.deadline_ms + shift)) <= 1  # ms rounding
    header = reader.read_segment(F.segment_files(d)[0]).header
    wall_deadline = h.deadline_ms - header["mono_us"] // 1000 + header["wall_us"] // 1000
    now_wall_minus_mono = (time.time_ns() - time.monotonic_ns()) // 1_000_000
    assert abs(st.pending.deadlines[0] + now_wall_minus_mono - wall_deadline) <= 2


def test_restart_rearms_pending_operations_with_their_ids(tmp_path):
    """A pending operation comes back with its id, timeout, tasks and keys, watched again;
    completed, expired and cancelled ones do not."""
    d = tmp_path / "j"
    tasks = {**TASKS, "noop": "shmwheel.examples.tasks:noop"}
    with TimerService(tasks=tasks, capacity=1000, executors=1, journal=d) as svc:
        with svc.client() as c:
            keep = c.watch(["a", 7], 60_000, on_complete="noop", payload={"x": 1}, required=2)
            done = c.watch(["b"], 60_000, on_complete="noop")
            gone = c.watch(["c"], 60_000)
            short = c.watch(["d"], 1, on_expire="noop")
            assert c.check_and_complete("b") == 1 and done.result(5) == "completed"
            assert gone.cancel() and short.result(5) == "expired"
    with TimerService(tasks=tasks, capacity=1000, executors=1, journal=d) as svc:
        assert svc.recovery["recovered"] == 1
        with svc.client() as c:
            op = c.operation(keep.id)
            assert op.deadline_ms == keep.deadline_ms, "its timeout is kept"
            assert c.check_and_complete("b") == 0 and c.check_and_complete("c") == 0
            assert c.check_and_complete("a") == 0, "required=2: amounts restart from zero"
            assert c.check_and_complete(7) == 1 and op.result(5) == "completed"
    kinds = Counter(r["kind"] for r in journal.records(d) if r.get("id") == keep.id)
    assert kinds["watched"] >= 1 and kinds["completed"] == 1 and kinds["outcome"] == 1
