"""The journal's format versions: version 3 frames records with CRC-32C, computed by the
CPU's crc32 instruction where it has one and by a portable table otherwise (the two must
agree); a version 2 journal (zlib's CRC-32 frames, tests/fixtures/journal-v2, written by
the code before version 3) still reads, checks and recovers."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest
from helpers import TASKS, copy_v2_journal, wait_for

from shmwheel import TimerService, journal
from shmwheel import _native as N
from shmwheel.errors import RecoveryError
from shmwheel.journal import check, reader
from shmwheel.journal import format as F

# the timers the fixture's service left pending (its README.md)
V2_PENDING = {0, 1, 2, 3, 4, 0xC}


def crc32c_reference(data: bytes) -> int:
    """CRC-32C bit by bit (reflected polynomial 0x82F63B78), for checking the native ones."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32c_hardware_and_portable_agree():
    with open("/proc/cpuinfo") as f:
        sse42 = " sse4_2" in f.read()
    assert N.journal_crc32c_hardware() == (sse42 and os.uname().machine == "x86_64")
    assert N.journal_crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert N.journal_crc32c(b"123456789", True) == 0xE3069283
    rng = random.Random(33)
    buf = bytes(rng.getrandbits(8) for _ in range(4200))
    # every length a record's body has (and more), at every alignment of its start
    for n in [*range(70), 255, 256, 1023, 4097]:
        for off in range(8) if n < 70 else (0, 3):
            data = memoryview(buf)[off : off + n]
            hw, table = N.journal_crc32c(data), N.journal_crc32c(data, True)
            assert hw == table, (n, off)
            if n < 40:
                assert hw == crc32c_reference(bytes(data)), (n, off)
    assert N.journal_crc32c(b"") == 0


def test_version_3_frames_carry_crc32c(tmp_path):
    framed = F.frame(F.body(F.CANCELLED, 5, 6))
    body = framed[F.FRAME_BYTES :]
    assert int.from_bytes(framed[4:8], "little") == crc32c_reference(body)
    assert F.frame(body, 2)[4:8] == (N.journal_crc32(body)).to_bytes(4, "little")
    # a version 3 segment whose frame carries the old checksum is rejected
    seg = tmp_path / "000001-0000000000000001-recovery-1.shwj"
    header = F.body(F.HEADER, 3, 3, 1, "s", 1, 0, 0, 0, "", [], 0, 1, "")
    seg.write_bytes(F.MAGIC + F.frame(header) + F.frame(body, 2) + framed)
    got = reader.read_segment(str(seg))
    assert [r.reason for r in got.rejects] == ["bad CRC-32C"]
    assert [r[0] for r in got.records] == [F.CANCELLED]


def test_a_version_2_journal_reads_and_checks_intact(tmp_path):
    d = copy_v2_journal(tmp_path / "j")
    segs = list(journal.read(d))
    assert [s.data[7] for s in segs] == [2, 2] and all(s.header["version"] == 2 for s in segs)
    assert all(not s.rejects and s.end is not None for s in segs)
    rejects: list[reader.Reject] = []
    kinds = Counter(r["kind"] for r in journal.records(d, rejects))
    assert not rejects
    assert kinds == {"scheduled": 10, "fired": 6, "outcome": 6, "cancelled": 1}
    insp = check.inspect(str(d))
    assert not insp.problems
    assert set(insp.state.pending.ids) == V2_PENDING
    # its frames are checked with zlib's CRC-32: a flipped byte in one is caught
    path = segs[0].path
    data = bytearray(Path(path).read_bytes())
    at = int(segs[0].rows[2, 0])
    data[at + F.FRAME_BYTES + 1] ^= 0x10
    Path(path).write_bytes(bytes(data))
    assert [(r.offset, r.reason) for r in reader.read_segment(path).rejects] == [(at, "bad CRC-32")]


def _ran(d: Path, epoch: int) -> Counter[int]:
    """How many fired records each id has in the segments of `epoch`."""
    return Counter(
        r["id"]
        for s in journal.read(d)
        if s.header is not None and s.header["epoch"] == epoch
        for r in map(F.as_dict, s.records)
        if r["kind"] == "fired"
    )


def test_a_version_2_journal_recovers(tmp_path):
    """A start on the version 2 journal re-arms exactly its six pending timers. Their
    deadlines (an hour after the fixture was written, in wall time) have passed, so each
    runs at once: exactly those six run, none of its cancelled or finished ones, and what
    the new epoch wrote is version 3."""
    d = copy_v2_journal(tmp_path / "j")
    with TimerService(tasks=TASKS, capacity=1000, executors=1, journal=d) as svc:
        assert svc.recovery["recovered"] == len(V2_PENDING)
        assert svc.recovery["epoch"] == 2 and not svc.recovery["damage"]
        wait_for(lambda: set(_ran(d, 2)) >= V2_PENDING, what="the re-armed timers ran")
    ran = _ran(d, 2)
    assert set(ran) == V2_PENDING
    assert all(ran[i] == 1 for i in V2_PENDING - {0xC})  # 0xc repeats every 30 ms
    segs = list(journal.read(d))
    # the version 2 epoch was compacted into the new one and deleted; what remains is 3
    assert {s.data[7] for s in segs} == {3} and all(not s.rejects for s in segs)
    assert not check.inspect(str(d)).problems


def test_a_version_3_journal_reads_checks_and_recovers(tmp_path):
    """What this build writes (version 3) reads back clean and its pending timers come
    back at the next start, and a flipped byte in one of its frames is found."""
    d = tmp_path / "j"
    with TimerService(tasks=TASKS, capacity=1000, executors=1, journal=d) as svc:
        with svc.client() as c:
            later = {c.schedule("slow", 0, delay_ms=3_600_000).id for _ in range(3)}
            later.add(c.schedule("slow", 0, delay_ms=3_600_000, key="k").id)
            gone = c.schedule("slow", 0, delay_ms=3_600_000)
            assert gone.cancel()
    segs = list(journal.read(d))
    assert {s.data[7] for s in segs} == {3} and all(s.header["version"] == 3 for s in segs)
    assert all(not s.rejects for s in segs)
    insp = check.inspect(str(d))
    assert not insp.problems and set(insp.state.pending.ids) == later
    with TimerService(tasks=TASKS, capacity=1000, executors=1, journal=d) as svc:
        assert svc.recovery["recovered"] == len(later)
    assert set(check.inspect(str(d)).state.pending.ids) == later


def test_an_unknown_future_version_is_refused_clearly(tmp_path):
    """A segment of a version this build does not know (written by a newer shmwheel) is not
    guessed at: the reader rejects it whole, naming the version and those it reads, the
    check calls it damage and a start refuses the journal."""
    d = copy_v2_journal(tmp_path / "j")
    path = sorted(d.glob("*coordinator*.shwj"))[0]
    data = bytearray(path.read_bytes())
    data[7] = F.VERSION + 1
    path.write_bytes(bytes(data))
    seg = reader.read_segment(str(path))
    assert not seg.records
    want = f"unknown format version {F.VERSION + 1} (this shmwheel reads versions 1, 2, 3)"
    assert [(r.offset, r.reason) for r in seg.rejects] == [(7, want)]
    insp = check.inspect(str(d))
    assert [(p.offset, p.what, p.severity) for p in insp.problems] == [(7, want, check.DAMAGE)]
    with pytest.raises(RecoveryError, match=f"unknown format version {F.VERSION + 1}"):
        TimerService(tasks=TASKS, capacity=1000, executors=1, journal=d).start()
    assert path.read_bytes() == bytes(data)  # the refusal changed nothing
