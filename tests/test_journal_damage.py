"""A damaged or incomplete journal (shmwheel/journal/check.py, docs/journal.md "Damage"):
refused by default, changing no byte; salvaged on request (every timer the intact records
prove pending re-armed, the damaged segments moved to DIR/damaged/ byte-identical);
checked and repaired offline by ``shmwheel journal check|repair``. The journals are real:
a service with small segments, 600 far timers and churn, killed whole."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import struct
import time
from pathlib import Path

import msgpack
import pytest
from helpers import TASKS, settle, wait_for

from shmwheel import RecoveryError, TimerService, journal
from shmwheel.cli import main
from shmwheel.journal import check, verdict
from shmwheel.journal import format as F
from shmwheel.segment import contract as C

TASKS2 = {**TASKS, "noop": "shmwheel.examples.tasks:noop"}
SEG = 1 << 16  # the smallest segment: multi-segment chains from a few thousand records


def service(d: Path, **kw: object) -> TimerService:
    return TimerService(
        tasks=TASKS2, capacity=20_000, executors=1, journal=d, journal_segment_bytes=SEG, **kw
    )  # type: ignore[arg-type]


def build(d: Path, churn: int, linger: float = 0.0) -> None:
    """A journal of a service killed whole: 2 x 300 far timers, `churn` x 2000 done; with
    `linger`, one more run that long after the start (both writers record it)."""
    svc = service(d).start()
    try:
        with svc.client() as c:
            c.schedule_many("noop", [600_000] * 300)
            for k in range(churn):
                c.schedule_many("noop", [1] * 2000)
                wait_for(lambda k=k: svc.stats()["completed"] >= 2000 * (k + 1), what="churn")
            c.schedule_many("noop", [600_000] * 300)
            # linked, so journaled: "pending" counts a timer still in its client's ring
            # too, and a whole-service kill loses those (never journaled); a kill then left
            # a newest coordinator segment with no record in it
            wait_for(lambda: svc.stats()["pending"] == 600 and not submitted(svc),
                     what="600 pending, none left in a ring")  # fmt: skip
            if linger:
                time.sleep(linger)
                c.schedule("noop", None, delay_ms=1).result(10)
        kill(svc)
    finally:
        svc.stop()


def submitted(svc: TimerService) -> int:
    """Timers still in a client's ring: SUBMITTED, not yet linked (nor journaled)."""
    assert svc.mem is not None
    return int((C.gs_state(svc.mem.nodes()[:, C.F_GS]) == C.ST_SUBMITTED).sum())


def kill(svc: TimerService) -> None:
    """Every process of `svc` dies at once, as in a whole-service crash (no restarts)."""
    svc._stop.set()
    assert svc._monitor is not None
    svc._monitor.join()
    for p in svc.procs.values():
        p.kill()
        p.wait()


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("golden") / "j"
    build(d, 4)
    assert len(segs(d, "coordinator")) >= 3 and len(segs(d, "reaper")) >= 3
    # the cases damage the newest coordinator segment's middle and its last 40 records
    assert len(frame_offsets(segs(d, "coordinator")[-1])) > 80
    assert not check.inspect(str(d)).problems
    return d


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another service's journal: one coordinator and one reaper segment, written over
    more than START_GRACE_S (a chain missing from a shorter one reads as a start killed
    before that writer began: a warning)."""
    d = tmp_path_factory.mktemp("small") / "j"
    build(d, 0, verdict.START_GRACE_S + 0.5)
    assert len(segs(d, "coordinator")) == 1 and len(segs(d, "reaper")) == 1
    return d


@pytest.fixture(scope="module")
def restarted(golden: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden journal started once more (epoch 2: its compaction holds the 600) and
    killed whole."""
    d = tmp_path_factory.mktemp("restarted") / "j"
    shutil.copytree(golden, d)
    svc = service(d).start()
    try:
        # the kill must find its writers past their first bytes: one killed between
        # creating its file and writing the magic leaves a torn tail (rightly a warning),
        # which a busy machine makes likely right after start
        settle(lambda: not check.inspect(str(d)).problems, 20, pause=0.05)
        kill(svc)
    finally:
        svc.stop()
    assert len(segs(d, "recovery")) >= 1 and not check.inspect(str(d)).problems
    return d


def segs(d: Path, role: str) -> list[Path]:
    return [Path(p) for p in F.segment_files(d) if f"-{role}-" in p]


def frame_offsets(path: Path) -> list[int]:
    data, at, out = path.read_bytes(), len(F.MAGIC), []
    while at + 8 <= len(data):
        out.append(at)
        at += 8 + struct.unpack_from("<I", data, at)[0]
    return out


def flip(path: Path, at: int, bit: int = 0x40) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= bit
    path.write_bytes(bytes(data))


def cut(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def digest(d: Path) -> dict[str, str]:
    """Every file (DIR/damaged/ too) but the lock, by name: its SHA-256."""
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in d.rglob("*")
        if p.is_file() and p.name != "LOCK"
    }


def provable(d: Path, skip: tuple[str, ...] = ()) -> set[int]:
    """The test's own reading of what the intact records prove pending: scheduled and
    not ended; of two in one slot, the newer generation."""
    sched, done = set(), set()
    for seg in journal.read(d):
        if os.path.basename(seg.path) in skip:
            continue
        for rec in seg.records:
            if rec[0] == F.SCHEDULED:
                sched.add(rec[1])
            elif rec[0] in (F.CANCELLED, F.COMPLETED, F.EXPIRED) or (
                rec[0] == F.OUTCOME and rec[6] == -1
            ):
                done.add(rec[1])
    newest: dict[int, int] = {}
    for h in sched - done:
        newest[h & 0xFFFFFFFF] = max(newest.get(h & 0xFFFFFFFF, -1), h)
    return set(newest.values())


def rearmed(d: Path, epoch: int) -> set[int]:
    """The ids a start of `epoch` recorded in its compaction segments."""
    ids: set[int] = set()
    for seg in journal.read(d):
        if seg.header and seg.header["epoch"] == epoch and seg.header["role"] == 3:
            ids |= {r[1] for r in seg.records if r[0] == F.SCHEDULED}
    return ids


# name -> (the journal it damages, what it does: returns (a text the error names, the
# damaged file names a salvage moves, foreign file names whose records are not ours))
def _header(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
    p = segs(d, "coordinator")[0]
    flip(p, len(F.MAGIC) + 8 + 3)
    return p.name, [p.name], ()


def _magic(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
    p = segs(d, "reaper")[1]
    flip(p, 2)
    return p.name, [p.name], ()


def _body(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
    p = segs(d, "coordinator")[0]
    fr = frame_offsets(p)
    flip(p, fr[len(fr) // 2] + 8 + 2)
    return f"{p.name} at byte {fr[len(fr) // 2]}: bad CRC-32C", [p.name], ()


def _length(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
    p = segs(d, "coordinator")[-1]  # the newest, of a killed writer: no END
    fr = frame_offsets(p)
    flip(p, fr[len(fr) // 2] + 2, 0x01)  # 64 KiB more than the file holds
    return f"{p.name} at byte {fr[len(fr) // 2]}", [p.name], ()


def _cut(role: str, i: int, where: str) -> object:
    def damage(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
        p = segs(d, role)[i]
        fr = frame_offsets(p)
        at = {"8": 8, "half": p.stat().st_size // 2, "boundary": fr[len(fr) // 2]}[where]
        cut(p, at)
        return f"{p.name} at byte ", [p.name], ()

    return damage


def _removed(role: str, i: int) -> object:
    def damage(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
        p = segs(d, role)[i]
        p.unlink()
        return f"segment {p.name} is missing", [], ()

    return damage


def _foreign(small: Path) -> object:
    def damage(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
        src = segs(small, "coordinator")[0]
        shutil.copy(src, d / src.name)
        return f"{src.name} at byte 8: a segment of another service", [src.name], (src.name,)

    return damage


def _only(role: str) -> object:
    def damage(d: Path) -> tuple[str, list[str], tuple[str, ...]]:
        segs(d, role)[0].unlink()
        what = "compaction segment" if role == "recovery" else f"no {role} segment"
        return what, [], ()

    return damage


CASES = {
    "header byte": ("golden", _header),
    "magic byte": ("golden", _magic),
    "body byte": ("golden", _body),
    "length word": ("golden", _length),
    "cut to 8 bytes": ("golden", _cut("coordinator", 1, "8")),
    "cut to half": ("golden", _cut("coordinator", 0, "half")),
    "cut at a record boundary": ("golden", _cut("reaper", 1, "boundary")),
    "first coordinator removed": ("golden", _removed("coordinator", 0)),
    "middle coordinator removed": ("golden", _removed("coordinator", 1)),
    "last coordinator removed": ("golden", _removed("coordinator", -1)),
    "first reaper removed": ("golden", _removed("reaper", 0)),
    "middle reaper removed": ("golden", _removed("reaper", 2)),
    "last reaper removed": ("golden", _removed("reaper", -1)),
    "another service's segment": ("golden", None),
    "the only reaper segment removed": ("small", _only("reaper")),
    "the only coordinator segment removed": ("small", _only("coordinator")),
    "the compaction segment removed": ("restarted", _only("recovery")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_damage_is_refused_unchanged_then_salvaged(case, golden, small, restarted, tmp_path):
    source, damage = CASES[case]
    d = tmp_path / "j"
    shutil.copytree({"golden": golden, "small": small, "restarted": restarted}[source], d)
    if damage is None:
        damage = _foreign(small)
    named, moved, foreign = damage(d)  # type: ignore[operator]
    before, names = digest(d), set(os.listdir(d))
    expected = provable(d, foreign)

    svc = service(d)
    try:
        with pytest.raises(RecoveryError) as e:  # refuse (the default): no byte changes
            svc.start()
    finally:
        svc.stop()  # had it started after all, it must not outlive the test
    assert named in str(e.value) and "journal_on_damage='salvage'" in str(e.value)
    assert digest(d) == before and set(os.listdir(d)) == names
    assert main(["journal", "check", str(d)]) == 1

    with service(d, journal_on_damage="salvage") as svc:
        got = svc.recovery
    assert got["recovered"] == len(expected) and got["damage"] >= 1
    assert sorted(os.path.basename(p) for p in got["quarantined"]) == sorted(moved)
    epoch = max(F.SegmentName.parse(n).epoch for n in names if n.endswith(F.SUFFIX))  # type: ignore[union-attr]
    assert rearmed(d, epoch + 1) == expected
    for name in moved:  # moved untouched, nothing else deleted that was not read whole
        assert digest(d)[f"damaged/{name}"] == before[name]
    assert main(["journal", "check", str(d)]) == 0  # the new epoch supersedes the damage


def test_a_dead_writers_torn_tail_starts_with_a_warning(golden, tmp_path, caplog, capsys):
    d = tmp_path / "j"
    shutil.copytree(golden, d)
    p = segs(d, "coordinator")[-1]  # the newest of a killed writer: no END
    fr = frame_offsets(p)
    cut(p, fr[-40] + 11)  # 40 records lost with the writer, mid-record
    expected = provable(d)
    assert len(expected) == 600 - 40
    shutil.copytree(d, tmp_path / "copy")
    with caplog.at_level(logging.WARNING, "shmwheel.journal"), service(d) as svc:
        assert svc.recovery["recovered"] == len(expected) and svc.recovery["torn"] == 1
    assert f"{p.name} at byte {fr[-40]}: torn tail" in caplog.text
    assert rearmed(d, 2) == expected
    assert main(["journal", "check", str(tmp_path / "copy")]) == 0
    assert "torn tail" in capsys.readouterr().out


def test_check_exit_codes_and_output(golden, tmp_path, capsys):
    assert main(["journal", "check", str(tmp_path / "nothing")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["journal", "check", str(tmp_path / "empty")]) == 2
    d = tmp_path / "j"
    shutil.copytree(golden, d)
    capsys.readouterr()
    assert main(["journal", "check", str(d), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "intact" in out and "600 timers" in out and out.count("  timer 0x") == 600
    p = segs(d, "reaper")[1]
    flip(p, frame_offsets(p)[7] + 9)
    assert main(["journal", "check", str(d)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and f"{p.name}" in out and "bad CRC-32" in out
    assert main(["journal", "check", str(d), "--json"]) == 1
    rep = __import__("json").loads(capsys.readouterr().out)
    assert rep["status"] == "damaged" and rep["pending"]["timers"] == len(provable(d))
    bad = [s for s in rep["segments"] if s["problems"]]
    assert [s["file"] for s in bad] == [p.name]
    assert bad[0]["problems"][0]["offset"] == frame_offsets(p)[7]


def test_repair_then_check_and_a_refusing_start(golden, tmp_path):
    d = tmp_path / "j"
    shutil.copytree(golden, d)
    body = segs(d, "coordinator")[0]
    flip(body, frame_offsets(body)[100] + 12)
    segs(d, "reaper")[1].unlink()
    expected, before = provable(d), digest(d)
    assert main(["journal", "repair", str(d), "--dry-run"]) == 0
    assert digest(d) == before
    assert main(["journal", "repair", str(d)]) == 0
    assert digest(d)[f"damaged/{body.name}"] == before[body.name]
    assert {k for k in before if k != body.name} <= set(digest(d))  # nothing deleted
    assert main(["journal", "check", str(d)]) == 0
    assert main(["journal", "repair", str(d)]) == 0  # nothing left to repair
    with service(d) as svc:  # refuse, the default
        assert svc.recovery["recovered"] == len(expected)
    assert rearmed(d, 3) == expected


def test_version_1_segments_are_unchained_and_options_are_checked(tmp_path):
    """A version 1 segment (no prev, no END) is read, without chain checks."""
    for role, pid in (("coordinator", 7), ("reaper", 8)):
        code = F.ROLE_CODES[role]
        buf = F.frame(
            msgpack.packb([F.HEADER, 1, code, pid, "old", 1, 1, 0, 0, "", ["noop"], 0, 1]), 1
        )
        if role == "coordinator":
            buf += F.frame(msgpack.packb([F.SCHEDULED, 5, 0, 1 << 40, 0, 0, 0, 0, 1, b""]), 1)
        name = F.SegmentName(1, 10 + pid, role, pid).filename()
        (tmp_path / name).write_bytes(F.MAGIC[:7] + b"\x01" + buf)  # (version 1: CRC-32)
    insp = check.inspect(str(tmp_path))
    assert [r.version for r in insp.reports] == [1, 1]
    assert not insp.problems and insp.state.pending.ids.tolist() == [5]
    with pytest.raises(ValueError, match="journal_on_damage"):
        service(tmp_path, journal_on_damage="ignore")


def test_a_start_killed_before_its_reaper_began_is_not_damage(restarted, tmp_path, capsys):
    """Epoch 2 of `restarted` lived well under START_GRACE_S: without its reaper segment it
    reads as a start killed before the reaper began (a warning), and starts."""
    d = tmp_path / "j"
    shutil.copytree(restarted, d)
    expected = provable(d)
    segs(d, "reaper")[-1].unlink()
    assert main(["journal", "check", str(d)]) == 0
    assert "killed while starting" in capsys.readouterr().out
    with service(d) as svc:
        assert svc.recovery["recovered"] == len(expected) == 600
