"""A full /dev/shm (issue 31): a start that /dev/shm cannot hold raises SharedMemoryFull
naming the bytes it needed and the bytes free, and leaves nothing behind; a service that
started keeps working on the memory it holds when /dev/shm fills up. Never a SIGBUS.

Each test runs tests/shm_full_child.py as the embedding process, a child in a private
mount namespace whose /dev/shm is a tmpfs of the test's size (``unshare -m --propagation
private``, then ``mount -t tmpfs``): the host's /dev/shm is never filled, and the mount and
the namespace end with the child's processes. The child's return code tells a signal from
an exception (a SIGBUS is -7); its last stdout line says what happened. These tests need
root (to mount) and util-linux's unshare, and are skipped, saying which, only where either
is missing or the kernel refuses the namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import MINE, service_processes, settle
from shm_full_child import service

from shmwheel.segment import layout as L

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).with_name("shm_full_child.py")
PAGE = os.sysconf("SC_PAGE_SIZE")
CHILD_WAIT_S = 240.0  # the child waits at most 60 s for its outcomes (shm_full_child.py)


def _refused() -> str | None:
    """Why a private mount namespace with its own tmpfs cannot be made here (None: it can)."""
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    if os.geteuid() != 0:
        return "mounting a tmpfs in a private mount namespace needs root"
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        return f"this host refuses a private mount namespace with a tmpfs: {r.stderr.strip()}"
    return None


REFUSED = _refused()
pytestmark = pytest.mark.skipif(REFUSED is not None, reason=REFUSED or "")


def segment_bytes(capacity: int) -> int:
    """The size of the segment the child's service of `capacity` makes."""
    return L.segment_layout(service("x", capacity).config)["total"] * 8


def run_child(tmp_path: Path, shm_bytes: int, mode: str, capacity: int) -> dict[str, Any]:
    """Run the child in `mode` with a /dev/shm of `shm_bytes`; its report. Fails the test,
    with its return code (a signal is negative) and stderr, unless it exited 0. Its output
    goes to files, not pipes, so service processes it left after a crash (waited for, then
    killed) cannot hold the wait up."""
    name = f"{MINE}shmfull"
    script = 'mount -t tmpfs -o size="$1" tmpfs /dev/shm && shift && exec "$@"'
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(shm_bytes)]
    cmd += [sys.executable, str(CHILD), mode, name, str(tmp_path), str(capacity)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(CHILD.parent)])}
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        child = subprocess.Popen(cmd, stdout=o, stderr=e, env=env, cwd=ROOT)
    try:
        code = child.wait(timeout=CHILD_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        code = child.wait()
    finally:
        # orphans exit once they see their owner gone
        settle(lambda: not service_processes(name), 10, pause=0.05)
        for p in service_processes(name):
            p.kill()
    what = f"signal {signal.Signals(-code).name}" if code < 0 else code
    assert code == 0, f"the child ended with {what}: {err.read_text()[-3000:]}"
    report: dict[str, Any] = json.loads(out.read_text().strip().splitlines()[-1])
    return report


def test_a_start_that_dev_shm_cannot_hold_raises_and_leaves_nothing(tmp_path):
    """The issue's case: capacity 400 000 (a 33 MiB segment) in a 12 MiB /dev/shm."""
    needed = segment_bytes(400_000)
    out = run_child(tmp_path, 12 << 20, "start", 400_000)
    assert out["error"] == "SharedMemoryFull", out
    assert out["needed"] == needed and out["free"] == 12 << 20, out
    assert f"needs {needed} bytes" in out["message"], out["message"]
    assert f"has {12 << 20} bytes (12.0 MiB) free" in out["message"], out["message"]
    assert out["shm"] == [] and out["children"] == [], out


def test_a_start_whose_semaphores_do_not_fit_raises_and_leaves_nothing(tmp_path):
    """The segment fits and one semaphore's page after it; the second semaphore does not:
    the same error, and the teardown removes the segment and the first semaphore."""
    size = -(-segment_bytes(20_000) // PAGE) * PAGE + PAGE
    out = run_child(tmp_path, size, "start", 20_000)
    assert out["error"] == "SharedMemoryFull", out
    assert "no room for the semaphore" in out["message"] and out["needed"] == PAGE, out
    assert out["shm"] == [] and out["children"] == [], out


def test_a_service_keeps_working_when_dev_shm_fills_up(tmp_path):
    """Started in a 64 MiB /dev/shm, which a file then fills to the last page: new clients,
    schedule_many with payloads in every arena class, schedule, a failing task, an
    operation completed by another client all work, every timer runs once, stop is clean."""
    out = run_child(tmp_path, 64 << 20, "full", 200_000)
    assert out["free_when_full"] == 0 and out["free_before_stop"] == 0, out
    assert out["completed_by_other"] == 1, out
    assert out["outcomes"] == {"ok": 4040, "error": 5, "completed": 1}, out
    assert out["runs"] == out["distinct"] == 4041 and out["missing"] == [], out
    assert out["shm"] == [] and out["children"] == [], out
