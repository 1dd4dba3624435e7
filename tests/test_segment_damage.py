"""Every open of a damaged segment raises a ShmwheelError naming the damage (issue 31):
``ServiceMemory.attach`` (every service process, salvage, ``shmwheel status``) and
``connect`` refuse a forged header, config, wheel header, arena class table, watch or waiter
table size, and a file with pages not reserved (a full /dev/shm would make touching them a
SIGBUS); ``connect`` also a dead or impossible owner pid and a missing semaphore; the census
reads each header-level damage as ``damaged``. Never posix_ipc's errors, a ValueError or a
crash. The damage is forged into small formatted segments of this user with no processes
(and into one live test service), each removed in a ``finally``."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
from helpers import MINE, fake_service

import shmwheel
from shmwheel import LayoutError, ShmwheelError, TimerService
from shmwheel.segment import census, shm
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L

TASKS = {"record": "shmwheel.examples.tasks:append_line"}
SHM = Path("/dev/shm")
META = L.HEADER_WORDS * 8  # where the config blob starts


def fake(name: str, owner_pid: int) -> None:
    """A small formatted service segment with no processes and no semaphores."""
    fake_service(name, owner_pid)


def write_config(mem: L.ServiceMemory, blob: bytes, total: int | None = None) -> None:
    mem.seg.bytes[META : META + len(blob)] = list(blob)
    mem.header[L.W_META_LEN] = len(blob)
    if total is not None:
        mem.header[L.W_TOTAL] = total


def forge(mem: L.ServiceMemory, what: str) -> None:
    """Write the damage `what` into an attached segment."""
    h, cfg = mem.header, mem.config
    if what == "magic":
        h[L.W_MAGIC] = 0x1234
    elif what == "version":
        h[L.W_VERSION] = L.LAYOUT_VERSION + 1
    elif what == "meta-length":
        h[L.W_META_LEN] = 10**9
    elif what == "config-bytes":  # 0xc1 is the one byte msgpack never uses
        mem.seg.bytes[META : META + int(h[L.W_META_LEN])] = 0xC1
    elif what == "config-negative":  # and a size word that agrees with it
        bad = dataclasses.replace(cfg, executors=-1)
        write_config(mem, bad.meta_blob(), L.segment_layout(bad)["total"] * 8)
    elif what == "config-sizes":  # a valid config of smaller rings, the size word its
        bad = dataclasses.replace(cfg, ring_capacity=8)
        write_config(mem, bad.meta_blob(), L.segment_layout(bad)["total"] * 8)
    elif what == "size-word":
        h[L.W_TOTAL] += 8
    elif what == "wheel-capacity":
        mem.wheel[C.H_CAPACITY] += 1
    elif what == "wheel-levels":
        mem.wheel[C.H_LEVELS] = 2**40
    elif what == "wheel-offset":
        mem.wheel[C.H_OFF_NODES] += 8
    elif what == "arena-table":
        mem.arena[2 * C.A_CLASS_WORDS + C.A_DATA] += 1
    elif what == "watch-table":
        mem.watch[C.WT_CAPACITY] = 10**9
    elif what == "waiter-table":
        mem.waiters[C.WA_NBUCKETS] = 1 << 20
    else:
        raise AssertionError(what)


HEADER_DAMAGE = {
    "magic": "is not a shmwheel service",
    "version": "has layout version",
    "meta-length": r"corrupt header \(meta length",
    "config-bytes": "unreadable config",
    "config-negative": "unreadable config: its executors is -1",
    "size-word": "header size .* does not match",
}
TABLE_DAMAGE = {  # the census reads only the header: these it lists as running
    "config-sizes": "damaged: its wheel header's sizes are not its config's",
    "wheel-capacity": "damaged: its wheel header's sizes are not its config's",
    "wheel-levels": "damaged: its wheel header's sizes are not its config's",
    "wheel-offset": "damaged: wheel header sizes are inconsistent",
    "arena-table": "damaged: its arena class table is",
    "watch-table": r"damaged: its watch table has \(buckets, capacity\)",
    "waiter-table": "damaged: its waiter table has 1048576 buckets",
}


@pytest.mark.exclusive  # a stale-looking segment: another worker's start must not sweep it
@pytest.mark.parametrize("what", [*HEADER_DAMAGE, *TABLE_DAMAGE])
def test_every_open_of_a_forged_segment_raises_a_layout_error(what):
    name = f"{MINE}dmg-{what}"
    try:
        fake(name, os.getpid())
        mem = L.ServiceMemory.attach(name)  # intact: it opens
        forge(mem, what)
        mem.close()
        match = {**HEADER_DAMAGE, **TABLE_DAMAGE}[what]
        with pytest.raises(LayoutError, match=match):
            L.ServiceMemory.attach(name)
        with pytest.raises(LayoutError, match=match):
            shmwheel.connect(name)
        entry = census.classify(SHM / (shm.PREFIX + name))
        assert entry is not None
        if what in HEADER_DAMAGE:
            assert entry.state == "damaged" and re.search(match, entry.problem or ""), entry
    finally:
        shm.unlink_service(name)


@pytest.mark.exclusive
@pytest.mark.parametrize("owner", ["dead", 0, -1, 2**62])
def test_connect_refuses_a_segment_whose_owner_is_gone_or_impossible(owner):
    name = f"{MINE}dmg-owner"
    try:
        fake(name, os.getpid())
        mem = L.ServiceMemory.attach(name)
        if owner == "dead":
            import subprocess

            p = subprocess.Popen(["true"])
            p.wait()
            owner = p.pid
        mem.header[L.W_OWNER] = owner
        mem.close()
        with pytest.raises(ShmwheelError, match=rf"is not running: .* \(pid {owner}\) is gone"):
            shmwheel.connect(name)
    finally:
        shm.unlink_service(name)


def test_connect_refuses_a_segment_without_its_semaphores():
    """A formatted segment whose owner is alive but which no service made (no semaphores):
    posix_ipc.ExistentialError before; a LayoutError naming the semaphore now."""
    name = f"{MINE}dmg-nosem"
    try:
        fake(name, os.getpid())
        with pytest.raises(LayoutError, match=r"has no usable coordinator semaphore"):
            shmwheel.connect(name)
    finally:
        shm.unlink_service(name)


def test_a_live_service_whose_semaphore_was_removed_refuses_connect_and_stops():
    with TimerService(tasks=TASKS, capacity=100, executors=1) as svc:
        name = svc.name
        os.unlink(SHM / f"sem.{shm.PREFIX}{name}.coordinator")
        with pytest.raises(LayoutError, match="has no usable coordinator semaphore"):
            shmwheel.connect(name)
    assert not list(SHM.glob(f"*{shm.PREFIX}{name}*"))


@pytest.mark.exclusive
def test_a_segment_with_pages_not_reserved_is_refused_at_every_open():
    """A copy of a formatted segment written sparse (only its non-zero pages): its holes
    would be allocated when first touched, a SIGBUS on a full /dev/shm."""
    name, src = f"{MINE}dmg-sparse", f"{MINE}dmg-source"
    path = SHM / (shm.PREFIX + name)
    try:
        fake(src, os.getpid())
        data = (SHM / (shm.PREFIX + src)).read_bytes()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, len(data))
            page = os.sysconf("SC_PAGE_SIZE")
            for at in range(0, len(data), page):
                if any(data[at : at + page]):
                    os.pwrite(fd, data[at : at + page], at)
            assert os.fstat(fd).st_blocks * 512 < len(data), "the copy is not sparse"
        finally:
            os.close(fd)
        match = rf"has {len(data)} bytes but only \d+ of them reserved"
        with pytest.raises(LayoutError, match=match):
            L.ServiceMemory.attach(name)
        with pytest.raises(LayoutError, match=match):
            shmwheel.connect(name)
        entry = census.classify(path)
        assert entry is not None and entry.state == "damaged", entry
        assert re.search(match, entry.problem or ""), entry
        assert path.exists(), "a damaged segment is never removed"
    finally:
        shm.unlink_service(name)
        shm.unlink_service(src)
