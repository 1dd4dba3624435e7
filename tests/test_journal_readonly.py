"""A journal disk that goes read-only mid-load and comes back only through an unmount (ext4
``errors=remount-ro``, forced with ``trigger_fs_error``): stop() keeps what the disk did
not take in /dev/shm (shmwheel/journal/write/spill.py) and says where; after an unmount, fsck
and a read-write mount, the next start on the journal runs each accepted timer exactly
once, none early. Needs root, loop devices and ext4's ``trigger_fs_error`` (skipped
without them)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from descendant_tasks import TASKS, assert_each_ran_once_none_early, runs
from helpers import assert_chain, read_ids, stop_all, wait_for

from shmwheel import JournalError, RecoveryError, TimerService
from shmwheel.journal import format as F
from shmwheel.journal.write import disk as D
from shmwheel.journal.write import spill
from shmwheel.journal.write.writer import JournalOptions, SegmentWriter


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def loop_ext4(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(mount point, loop device) of a 64 MiB ext4 mounted errors=remount-ro; the
    mount, the loop device and the image are gone afterwards, whatever happened."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("losetup"):
        pytest.skip("needs root, mkfs.ext4 and losetup")
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    dev = ""
    try:
        with open(image, "wb") as f:
            f.truncate(64 << 20)
        _run("mkfs.ext4", "-q", "-F", str(image))
        try:
            dev = _run("losetup", "-f", "--show", str(image))
        except subprocess.CalledProcessError as e:
            pytest.skip(f"no loop device: {e.stderr}")
        _run("mount", "-o", "errors=remount-ro", dev, str(mnt))
        yield mnt, dev
    finally:
        if os.path.ismount(mnt) and subprocess.run(["umount", str(mnt)], check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        if dev:
            subprocess.run(["losetup", "-d", dev], check=False)
        image.unlink(missing_ok=True)


def test_a_stop_while_the_disk_is_read_only_loses_nothing_and_runs_nothing_twice(
    tmp_path, monkeypatch, caplog
):
    marks = tmp_path / "runs"
    marks.mkdir()
    monkeypatch.setenv("DESC_RUNS", str(marks))
    svc = svc2 = None
    with loop_ext4(tmp_path) as (mnt, dev):
        trigger = Path("/sys/fs/ext4") / Path(dev).name / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip(f"this kernel has no {trigger}")
        jdir = mnt / "journal"
        try:
            svc = TimerService(tasks=TASKS, capacity=1 << 16, executors=2, journal=jdir)
            svc.start()
            accepted: list[int] = []
            refused = 0
            with svc.client() as c:
                t_end = time.monotonic() + 3.0
                broke = False
                while time.monotonic() < t_end:
                    if not broke and time.monotonic() > t_end - 2.0:
                        trigger.write_text("1")  # the volume turns read-only, mid-load
                        broke = True
                    try:
                        # due from now to 4 s on: some run before the fault, some through
                        # it, some only after the restart
                        first = len(accepted) % 4000
                        hs = c.schedule_many("record", [first + i for i in range(50)])
                        accepted += [int(i) for i in hs.ids]
                    except JournalError:
                        refused += 1
                    time.sleep(0.005)
            assert refused, "the read-only journal refused no schedule"
            assert svc.stats()["journal"]["faults"], "no writer saw the fault"
            with caplog.at_level(logging.WARNING, logger="shmwheel"):
                svc.stop()
            held = spill.pending(str(jdir))
            assert held, "stop() kept nothing of what the disk did not take"
            assert any(h in r.getMessage() for r in caplog.records for h in held), (
                "stop() did not say where it kept them"
            )
            _run("umount", str(mnt))
            subprocess.run(["e2fsck", "-fy", dev], capture_output=True, check=False)
            _run("mount", "-o", "errors=remount-ro", dev, str(mnt))
            svc2 = TimerService(tasks=TASKS, capacity=1 << 16, executors=2, journal=jdir)
            svc2.start()
            assert not spill.pending(str(jdir)), "the start left the held files"
            wait_for(
                lambda: len({r[0] for r in runs(marks)}) >= len(accepted),
                timeout=60,
                what="every accepted timer to run",
            )
            svc2.stop()
            assert_each_ran_once_none_early(marks, accepted)
        finally:
            stop_all(svc, svc2)
            for h in spill.pending(str(jdir)):
                os.unlink(h)


# -- the held files alone (no root, no loop device) -------------------------------------
def _writer(directory: Path, policy: str = "interval") -> SegmentWriter:
    return SegmentWriter(
        JournalOptions(str(directory), policy, fsync_ms=5),
        "reaper",
        "svc",
        ["t"],
        1,
        fault_words=np.zeros(3, np.int64),
    )


@pytest.mark.parametrize("policy", ["none", "interval", "always"])
def test_a_writer_closing_through_a_fault_keeps_its_records_for_the_next_claim(tmp_path, policy):
    w = _writer(tmp_path, policy)
    held: list[str] = []
    synced = [os.path.getsize(w.path)]  # the file's length at its last successful sync
    real_sync = w.disk.fdatasync

    def fdatasync(fd: int, path: str) -> None:
        real_sync(fd, path)
        synced[0] = os.fstat(fd).st_size

    w.disk.fdatasync = fdatasync  # type: ignore[method-assign]
    try:
        for i in range(3000):
            w.append(F.body(F.CANCELLED, i, 7))
            if i == 1000:
                w.disk.plan = (errno.EROFS, D.OPS_ALL)  # for good: it closes read-only
            if i % 25 == 0:
                w.flush()
        w.close()
        held = spill.pending(str(tmp_path))
        assert len(held) == 1 and os.stat(held[0]).st_mode & 0o777 == 0o600
        ids, _ = read_ids(tmp_path)
        assert 0 < len(ids) <= 1000 and ids == list(range(len(ids)))  # what the disk took
        if policy != "none":  # the disk drops what was never synced (ext4 gone read-only)
            seg = F.segment_files(tmp_path)[-1]
            os.truncate(seg, synced[0])
        assert spill.restore(str(tmp_path)) > 0
        assert not spill.pending(str(tmp_path))
        ids, segs = read_ids(tmp_path)
        assert ids == list(range(3000))  # nothing lost, nothing twice, in order
        assert_chain(segs)  # and closed with its END
    finally:
        for h in held:
            Path(h).unlink(missing_ok=True)


def test_held_files_are_read_only_when_this_user_owns_them_alone(tmp_path, caplog):
    if os.geteuid() != 0:
        pytest.skip("needs root (chown)")
    seg = tmp_path / F.SegmentName(1, 1, "reaper", 1).filename()
    seg.write_bytes(b"x" * 10)
    path = spill.keep(str(tmp_path), str(seg), 10, b"planted", "reaper")
    try:
        os.chown(path, 4242, 4242)
        with caplog.at_level(logging.WARNING, logger="shmwheel"):
            assert spill.restore(str(tmp_path)) == 0
        assert "not read" in caplog.text and os.path.exists(path)
        assert seg.read_bytes() == b"x" * 10  # untouched
        os.chown(path, 0, 0)
        os.chmod(path, 0o666)
        assert spill.restore(str(tmp_path)) == 0 and seg.read_bytes() == b"x" * 10
    finally:
        Path(path).unlink(missing_ok=True)


def test_a_segment_shorter_than_what_was_synced_is_refused(tmp_path):
    seg = tmp_path / F.SegmentName(1, 1, "reaper", 1).filename()
    seg.write_bytes(b"x" * 10)
    path = spill.keep(str(tmp_path), str(seg), 100, b"more", "reaper")
    try:
        with pytest.raises(RecoveryError, match="disk lost some"):
            spill.restore(str(tmp_path))
        assert os.path.exists(path) and seg.read_bytes() == b"x" * 10
    finally:
        Path(path).unlink(missing_ok=True)
