"""The journal under disk faults (shmwheel/journal/write/writer.py, "Faults"): a write, sync,
truncation or file creation that fails costs no record and crashes nothing; the records
held through the fault reach the disk, in order and once, when it clears; a service refuses
new timers with JournalError meanwhile and keeps every accepted one exactly once and never
early, across a whole-service kill right after the fault clears. Faults are injected
through the writer's one seam (shmwheel/journal/write/disk.py); one test fills a real tmpfs."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import TASKS, assert_chain, read_ids, read_log, wait_for

from shmwheel import JournalError, TimerService, journal
from shmwheel.journal import format as F
from shmwheel.journal import reader
from shmwheel.journal.write import disk as D
from shmwheel.journal.write.writer import HOLD_BYTES, JournalOptions, SegmentWriter
from shmwheel.segment import layout as L

HERE = Path(__file__).resolve().parent
FAULTS = [  # (errno, the calls it fails)
    (errno.ENOSPC, D.OPS_ALL),
    (errno.EDQUOT, D.OPS_ALL),
    (errno.EROFS, D.OPS_ALL),
    (errno.EIO, D.OP_WRITE),
    (errno.EIO, D.OP_SYNC),  # a failed fdatasync: what it could not vouch for is rewritten
]


# -- the writer alone ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "code", "ops"),
    [  # with "none" nothing is synced, so a failing sync is no fault there
        (p, code, ops)
        for p in ("none", "interval", "always")
        for code, ops in FAULTS
        if not (p == "none" and ops == D.OP_SYNC)
    ],
)
def test_records_held_through_a_fault_reach_the_disk_in_order_once(tmp_path, policy, code, ops):
    words = np.zeros(3, np.int64)
    w = SegmentWriter(
        JournalOptions(str(tmp_path), policy, fsync_ms=5, segment_bytes=1 << 16),
        "reaper",
        "svc",
        ["t"],
        1,
        fault_words=words,
    )
    for i in range(20000):  # ~14 bytes a record: rotations before, during and after
        w.append(F.body(F.CANCELLED, i, 7))
        if i == 5000:
            w.disk.plan = (code, ops)
        if i % 25 == 0:
            w.flush()
        if i == 14000:
            time.sleep(0.02)  # the interval thread's sync meets the fault too
            assert w.fault is not None and w.fault.errno == code
            assert words[0] == code and words[2] == w.held > 0 and words[1] > 0
            w.disk.plan = None
            w._retry_at = 0.0  # no need to wait RETRY_S here
    w.close()
    assert w.fault is None and not words.any()
    ids, segs = read_ids(tmp_path)
    assert ids == list(range(20000))  # nothing lost, nothing twice, in order
    assert len(segs) > 2
    assert_chain(segs)


def test_a_writer_that_cannot_create_its_first_file_holds_until_it_can(tmp_path):
    disk = D.Disk("coordinator")
    disk.plan = (errno.EROFS, D.OP_OPEN)
    w = SegmentWriter(
        JournalOptions(str(tmp_path), "interval"),
        "coordinator",
        "svc",
        ["t"],
        1,
        fault_words=np.zeros(3, np.int64),
        disk=disk,
    )
    assert w.fault is not None and not os.listdir(tmp_path)
    w.append(F.body(F.CANCELLED, 1, 2))
    w.flush()
    disk.plan = None
    w._retry_at = 0.0
    w.append(F.body(F.CANCELLED, 2, 2))
    w.flush()
    assert w.fault is None
    w.close()
    ids, segs = read_ids(tmp_path)
    assert ids == [1, 2] and len(segs) == 1
    assert_chain(segs)


def test_a_rotation_that_cannot_create_a_file_goes_on_in_the_old_one(tmp_path):
    w = SegmentWriter(
        JournalOptions(str(tmp_path), "none", segment_bytes=1 << 16),
        "reaper",
        "svc",
        ["t"],
        1,
        fault_words=np.zeros(3, np.int64),
    )
    w.disk.plan = (errno.EROFS, D.OP_OPEN)  # a directory made read-only (chattr +i)
    for i in range(8000):
        w.append(F.body(F.CANCELLED, i, 7))
        w.flush()
    assert w.fault is None and len(os.listdir(tmp_path)) == 1  # no fault: still durable
    w.disk.plan = None
    w._rotate_at = 0.0
    w.append(F.body(F.CANCELLED, 8000, 7))
    w.flush()
    w.close()
    ids, segs = read_ids(tmp_path)
    assert ids == list(range(8001)) and len(segs) == 2
    assert_chain(segs)


class _HeldSync(D.Disk):
    """A disk whose next fdatasync, once armed, waits inside the call until released."""

    def __init__(self, role: str) -> None:
        super().__init__(role)
        self.armed = False
        self.entered, self.release = threading.Event(), threading.Event()

    def fdatasync(self, fd: int, path: str) -> None:
        if self.armed:
            self.armed = False
            self.entered.set()
            assert self.release.wait(30)
        super().fdatasync(fd, path)


def _hold_a_sync(
    tmp_path: Path, records: int, **opts: int
) -> tuple[SegmentWriter, _HeldSync, threading.Thread]:
    """A coordinator's writer (its own sync thread idle) with `records` CANCELLED records
    written, and a sync of them begun on another thread (returned), held inside the
    fdatasync."""
    disk = _HeldSync("coordinator")
    w = SegmentWriter(
        JournalOptions(str(tmp_path), "interval", fsync_ms=3_600_000, **opts),
        "coordinator",
        "svc",
        ["t"],
        1,
        fault_words=np.zeros(3, np.int64),
        disk=disk,
    )
    for i in range(records):
        w.append(F.body(F.CANCELLED, i, 2))
    w.flush()
    disk.armed = True
    syncer = threading.Thread(target=w.sync, daemon=True)
    syncer.start()
    assert disk.entered.wait(30)
    return w, disk, syncer


def _finish(disk: _HeldSync, syncer: threading.Thread) -> None:
    disk.release.set()
    syncer.join(30)
    assert not syncer.is_alive()


def test_a_flush_does_not_wait_for_a_sync_under_way(tmp_path):
    """The sync's fdatasync runs without the writer's lock, so the write before a batch is
    applied (flush) does not wait for the disk; the sync, released, vouches only for the
    bytes written before it began."""
    w, disk, syncer = _hold_a_sync(tmp_path, 1)
    synced_at, flushed = w._size, threading.Event()

    def batch() -> None:
        w.append(F.body(F.CANCELLED, 1, 2))
        w.flush()
        flushed.set()

    threading.Thread(target=batch, daemon=True).start()
    try:
        assert flushed.wait(10), "the flush waited for the sync"
    finally:
        _finish(disk, syncer)
    assert w._durable == synced_at < w._size and w._dirty
    w.sync()
    assert w._durable == w._size and not w._dirty
    w.close()
    assert read_ids(tmp_path)[0] == [0, 1]


def test_a_sync_overtaken_by_a_rotation_vouches_for_nothing_in_the_new_segment(tmp_path):
    """A sync of segment 1 still in its fdatasync when the writer moves to segment 2 (which
    it syncs itself: END, header) says nothing of segment 2's bytes written since."""
    w, disk, syncer = _hold_a_sync(tmp_path, 4000, segment_bytes=1 << 16)  # ~60 kB of seg. 1
    first, i = w.seq, 4000
    while w.seq == first:
        for _ in range(100):
            w.append(F.body(F.CANCELLED, i, 2))
            i += 1
        w.flush()
    header = w._durable  # segment 2's magic and header, synced by the rotation
    w.append(F.body(F.CANCELLED, i, 2))
    w.flush()
    _finish(disk, syncer)
    assert w._durable == header < w._size and w._dirty
    w.close()
    assert read_ids(tmp_path)[0] == list(range(i + 1))


def test_a_writer_without_fault_words_raises_journal_error(tmp_path):
    disk = D.Disk("recovery")
    disk.plan = (errno.ENOSPC, D.OP_WRITE)
    with pytest.raises(JournalError, match="No space left on device"):
        SegmentWriter(JournalOptions(str(tmp_path), "always"), "recovery", "s", ["t"], 1, disk=disk)


def test_a_writer_holding_hold_bytes_is_blocked(tmp_path, monkeypatch):
    import shmwheel.journal.write.writer as W

    monkeypatch.setattr(W, "HOLD_BYTES", 4096)
    w = SegmentWriter(
        JournalOptions(str(tmp_path), "none"),
        "reaper",
        "s",
        ["t"],
        1,
        fault_words=np.zeros(3, np.int64),
    )
    w.disk.plan = (errno.ENOSPC, D.OPS_ALL)
    while not w.blocked:
        w.append(F.body(F.CANCELLED, 1, 2))
        w.flush()
    assert w.held >= 4096
    w.disk.plan = None
    w._retry_at = 0.0
    w.flush()
    assert not w.blocked and w.held == 0
    w.close()
    assert HOLD_BYTES == 64 << 20  # the documented bound (docs/journal.md)


# -- a service, killed whole right after the fault clears ----------------------------------
def run_case(tmp_path: Path, role: str, code: int, ops: int) -> None:
    d, log = tmp_path / "j", tmp_path / "log"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "journal_fault_driver.py"),
            str(d),
            str(log),
            role,
            str(code),
            str(ops),
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, f"the driver died (exit {proc.wait()})"
        out = json.loads(line)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the embedding process and every service one
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
    wait_for(lambda: not _alive(proc.pid), what="the killed service to be gone")
    assert out["refusal_s"] < 2.0, out  # the client's usual bound
    assert "journal" in out["refusal"] and os.strerror(code) in out["refusal"]
    assert role in out["faults"] and out["faults"][role]["errno"] == code
    expected = set(out["accepted"]) - set(out["cancelled"])
    with TimerService(
        tasks=TASKS, capacity=20_000, executors=1, journal=d, journal_keep_hours=1e6
    ) as svc:
        assert svc.recovery["recovered"] == 100  # the b's, pending at the kill
        wait_for(lambda: expected <= {r[0] for r in read_log(log)}, what="every accepted timer")
        if not out["rep_cancelled"]:
            wait_for(lambda: svc.stats()["in_flight"] == 0, what="the last repeat run")
    rows = [r for r in read_log(log) if r[0] != "rep"]
    counts = Counter(r[0] for r in rows)
    assert set(counts) == expected, set(counts) ^ expected
    assert not [t for t, n in counts.items() if n > 1], "ran twice"
    assert not [r for r in rows if r[3] < r[2] * 1_000_000], "ran early"
    reps = [r[4] for r in read_log(log) if r[0] == "rep"]
    assert len(reps) == len(set(reps)), "a repeating run ran twice"
    # and what was held through the fault is on disk: every event of every timer
    kinds: dict[str, set[int]] = {"scheduled": set(), "fired": set(), "outcome": set()}
    kinds["cancelled"] = set()
    for rec in journal.records(d):
        if rec["kind"] in kinds:
            kinds[rec["kind"]].add(rec["id"])
    ids = out["ids"]
    assert {ids[t] for t in out["accepted"]} <= kinds["scheduled"]
    assert {ids[t] for t in expected} <= kinds["fired"] & kinds["outcome"]
    assert {ids[t] for t in out["cancelled"]} <= kinds["cancelled"]


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("role", ["coordinator", "reaper"])
@pytest.mark.parametrize(("code", "ops"), FAULTS)
def test_a_failing_disk_costs_no_accepted_timer(tmp_path, role, code, ops):
    run_case(tmp_path, role, code, ops)


# -- the real thing: a journal on a small tmpfs that fills up ------------------------------
def fill(path: Path) -> None:
    """Write zeros to `path` until the volume is full."""
    with open(path, "wb", buffering=0) as f:
        block = bytes(4096)
        try:
            while True:
                f.write(block)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def test_a_journal_on_a_full_tmpfs_refuses_then_recovers(tmp_path, cli):
    vol, log = tmp_path / "vol", tmp_path / "log"
    vol.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(vol)], check=True)
    try:
        accepted: list[str] = []
        with (
            TimerService(
                tasks=TASKS,
                capacity=20_000,
                executors=1,
                journal=vol / "j",
                journal_segment_bytes=1 << 16,
            ) as svc,
            svc.client() as c,
        ):

            def one(tag: str, delay: float) -> None:
                c.schedule("record", {"path": str(log), "tag": tag}, delay_ms=delay)
                accepted.append(tag)

            for i in range(200):
                one(f"a{i}", i * 3)
            fill(vol / "filler")
            t0, n = time.monotonic(), 0
            with pytest.raises(JournalError, match="No space left on device"):
                while time.monotonic() - t0 < 10:
                    one(f"d{n}", 50)
                    n += 1
                    time.sleep(0.001)
            assert svc.stats()["journal"]["faults"], "JournalError with no fault in stats()"
            code, out, _ = cli("status", svc.name)
            assert code == 0 and "FAULT" in out and "ENOSPC" in out, out
            os.unlink(vol / "filler")
            wait_for(lambda: not svc.stats()["journal"]["faults"], what="the repair")
            wait_for(lambda: not svc.mem.header[L.W_JREFUSE], what="the gate to open")
            for i in range(50):
                one(f"b{i}", 20)
            wait_for(lambda: set(accepted) <= {r[0] for r in read_log(log)}, what="all ran")
        rows = read_log(log)
        counts = Counter(r[0] for r in rows)
        assert set(counts) == set(accepted) and max(counts.values()) == 1
        assert not [r for r in rows if r[3] < r[2] * 1_000_000], "ran early"
        assert all(not reader.read_segment(p).rejects for p in F.segment_files(vol / "j"))
    finally:
        subprocess.run(["umount", str(vol)], check=False)
        if os.path.ismount(vol):
            subprocess.run(["umount", "-l", str(vol)], check=True)


def test_retention_reads_a_predecessors_segment_whole_and_keeps_a_damaged_one(tmp_path):
    from shmwheel.journal.write.retention import retire

    def segment(name: str) -> str:
        w = SegmentWriter(JournalOptions(str(tmp_path / name), "none"), "reaper", "s", ["t"], 1)
        for i in range(50):
            w.append(F.body(F.CANCELLED, i, 1))
        w.flush()
        w.close()
        return w.path

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    good, bad = segment("a"), segment("b")
    data = bytearray(Path(bad).read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the middle: a bad CRC
    Path(bad).write_bytes(bytes(data))
    (tmp_path / "w").mkdir()
    w = SegmentWriter(JournalOptions(str(tmp_path / "w"), "none"), "reaper", "s", ["t"], 1)
    gone = retire(w, [("good", good), ("bad", bad)], {good, bad})
    w.close()
    assert gone == ["good"] and not os.path.exists(good)
    assert Path(bad).read_bytes() == bytes(data)  # untouched
    retired = [reader.read_segment(p).retired for p in F.segment_files(tmp_path / "w")]
    assert retired == [[os.path.basename(good)]]


# -- a slow disk: the fired record is written before the run starts ------------------------
def test_a_run_starts_only_after_its_fired_record_is_written(tmp_path):
    """With every reaper write held up 300 ms (a slow disk, through the seam's delay), each
    run still finds its fired record in the journal as it starts: the reaper writes the
    records of the timers it won before it hands them to executors, so a whole-service
    kill can never leave a run that the journal says never fired."""
    d, log = tmp_path / "j", tmp_path / "seen"
    tasks = {"seen": "journal_tasks:fired_seen"}
    with TimerService(tasks=tasks, capacity=1000, executors=1, journal=d) as svc:
        svc.mem.header[L.W_JINJECT] = D.inject(0, D.OP_WRITE, D.ROLE_BITS["reaper"], 300)
        with svc.client() as c:
            one = [c.schedule("seen", [str(d), str(log)], delay_ms=20 + i) for i in range(3)]
            rep = c.schedule("seen", [str(d), str(log)], delay_ms=20, every_ms=50)
            wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 6)
            rep.cancel()
        svc.mem.header[L.W_JINJECT] = 0
    rows = [line.split() for line in log.read_text().splitlines()]
    ran = {(int(i), int(a)) for _, i, a, _ in rows}
    assert {(h.id, 1) for h in one} | {(rep.id, 1), (rep.id, 2)} <= ran, rows
    assert [r for r in rows if r[3] != "1"] == [], f"runs with no fired record on disk: {rows}"


def test_a_reaper_killed_before_its_fired_records_are_written_gets_them_written(tmp_path):
    """The reaper is SIGKILLed while it writes the FIRED records of timers it has just won
    (every reaper write held up 3 s, so the kill lands before a byte is written): the
    restarted reaper finds them FIRING in no place, with W_REAPER_JOPEN still set, records
    them and runs them. Each run then has exactly one fired record and one outcome."""
    d, log = tmp_path / "j", tmp_path / "log"
    with (
        TimerService(
            tasks=TASKS, capacity=1000, executors=1, journal=d, journal_keep_hours=1e6
        ) as svc,
        svc.client() as c,
    ):
        wait_for(lambda: svc.stats()["processes"]["reaper"]["alive"])
        svc.mem.header[L.W_JINJECT] = D.inject(0, D.OP_WRITE, D.ROLE_BITS["reaper"], 3000)
        hs = list(  # one deadline: won in one advance
            c.schedule_many(
                "record", [50] * 5, [{"path": str(log), "tag": f"t{i}"} for i in range(5)]
            )
        )
        assert len({h.deadline_ms for h in hs}) == 1
        # won (FIRING: running() is True from then) in one advance, whose write is held
        wait_for(lambda: all(h.running() for h in hs), timeout=2.5, what="all five won")
        assert svc.mem.header[L.W_REAPER_JOPEN] == 1
        assert not any(r["kind"] == "fired" for r in journal.records(d))
        os.kill(svc.procs["reaper"].pid, signal.SIGKILL)
        svc.mem.header[L.W_JINJECT] = 0
        wait_for(lambda: len(read_log(log)) == 5, what="the five runs")
        wait_for(lambda: svc.stats()["in_flight"] == 0, what="their outcomes settled")
        assert svc.restarts["reaper"] == 1
    kinds = Counter((r["kind"], r["id"]) for r in journal.records(d))
    for h in hs:
        assert (kinds[("fired", h.id)], kinds[("outcome", h.id)]) == (1, 1), (h, kinds)
    assert Counter(r[0] for r in read_log(log)) == Counter(f"t{i}" for i in range(5))


def test_a_reaper_killed_with_a_backlog_does_not_record_its_fires_twice(tmp_path):
    """The other side: killed while timers it won and recorded wait for room in a full
    dispatch ring (its backlog, FIRING in no shared place), the reaper leaves
    W_REAPER_JOPEN clear, and its successor dispatches them without a second fired
    record."""
    d = tmp_path / "j"
    tasks = TASKS | {"nap": "shmwheel.examples.tasks:sleep_ms"}
    with TimerService(
        tasks=tasks, capacity=1000, executors=1, dispatch_capacity=8, journal=d,
        journal_keep_hours=1e6,
    ) as svc, svc.client() as c:  # fmt: skip
        hs = list(c.schedule_many("nap", [30] * 40, [25] * 40))
        wait_for(lambda: all(h.running() for h in hs), what="all forty won")
        assert svc.mem.header[L.W_REAPER_JOPEN] == 0
        os.kill(svc.procs["reaper"].pid, signal.SIGKILL)
        wait_for(lambda: svc.stats()["completed"] == 40, what="the forty runs")
        assert svc.restarts["reaper"] == 1
        st = svc.stats()
    kinds = Counter((r["kind"], r["id"]) for r in journal.records(d))
    assert st["completed"] == 40 and st["crashed"] == 0, st
    assert [h for h in hs if kinds[("fired", h.id)] != 1] == [], kinds
