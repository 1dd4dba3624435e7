"""A journal directory is trusted like a segment (docs/operating.md, "Trust"): at start(),
in salvage and in `shmwheel journal check` / `repair` / `run`, the directory, its LOCK and
every segment file must be this user's and writable by no one else, or the refusal
(UntrustedPath; one line and exit 2 on the command line) names the path, its owner and its
mode, and nothing there is read, re-armed or deleted. Runs as root: what another user
planted is forged with chown to uid 4242."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import MINE

from shmwheel import TimerService, UntrustedPath
from shmwheel.journal import format as F
from shmwheel.journal.recover.salvage import salvage_stale
from shmwheel.segment import layout as L
from shmwheel.segment import shm

OTHER = 4242
TASKS = {"record": "shmwheel.examples.tasks:append_line"}
ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to chown what it forges)")


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Path:
    """A journal holding one timer pending (due in an hour) that writes to ran.log."""
    base = tmp_path_factory.mktemp("journal")
    directory = base / "j"
    with (
        TimerService(f"{MINE}tj", tasks=TASKS, capacity=100, executors=1, journal=directory) as svc,
        svc.client() as c,
    ):
        c.schedule("record", {"path": str(base / "ran.log"), "tag": "planted"}, delay_ms=3_600_000)
    assert F.segment_files(directory), "the service journaled its timer"
    return directory


def _copy(journal: Path, where: Path) -> Path:
    d = where / "j"
    shutil.copytree(journal, d)
    os.chmod(d, 0o700)
    return d


def snapshot(directory: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every entry under `directory`: owner, mode, mtime and bytes (the LOCK's too)."""
    out = {}
    for d, dirs, files in os.walk(directory):
        for n in [*dirs, *files]:
            p = os.path.join(d, n)
            st = os.lstat(p)
            data = Path(p).read_bytes() if os.path.isfile(p) else b""
            out[os.path.relpath(p, directory)] = (st.st_uid, st.st_mode, st.st_mtime_ns, data)
    return out


def _plant(d: Path, how: str) -> str:
    """Make `d` unsafe in one way; returns what the refusal must name."""
    seg, lock = F.segment_files(d)[0], d / "LOCK"
    if how == "LOCK a link":
        elsewhere = d.parent / "elsewhere"
        elsewhere.write_text("")
        os.unlink(lock)
        lock.symlink_to(elsewhere)
        return rf"lock {lock} is not a regular file"
    # (what, its new mode or None, whose it becomes: its own or all (the dir's) or None)
    path, mode, chown, must = {
        "directory of another user": (
            d,
            0o777,
            "all",
            rf"{d} belongs to uid {OTHER}.*owner uid {OTHER}, mode 0777",
        ),
        "directory writable by group": (d, 0o770, None, rf"{d} has mode 0770"),
        "directory world-writable and sticky": (d, 0o1777, None, rf"{d} has mode 1777"),
        "segment of another user": (
            seg,
            None,
            "own",
            rf"segment {seg} belongs to uid {OTHER}.*mode 0600",
        ),
        "segment writable by others": (seg, 0o666, None, rf"segment {seg} has mode 0666"),
        "LOCK of another user": (lock, None, "own", rf"lock {lock} belongs to uid {OTHER}"),
    }[how]
    if mode is not None:
        os.chmod(path, mode)
    for p in {"all": [d, *F.segment_files(d), lock], "own": [path], None: []}[chown]:
        os.chown(p, OTHER, OTHER)
    return must


UNSAFE = [
    "directory of another user",
    "directory writable by group",
    "directory world-writable and sticky",
    "segment of another user",
    "segment writable by others",
    "LOCK of another user",
    "LOCK a link",
]


@pytest.mark.parametrize("how", UNSAFE)
def test_start_refuses_an_unsafe_journal_and_touches_nothing(journal, tmp_path, how):
    """The issue's case first: a 0777 directory of another user whose segments are theirs
    (their own service wrote them) is refused by root's start, which re-arms nothing."""
    d = _copy(journal, tmp_path)
    must_name = _plant(d, how)
    before = snapshot(d)
    name = f"{MINE}untrusted"
    svc = TimerService(name, tasks=TASKS, capacity=100, executors=1, journal=d)
    try:
        with pytest.raises(UntrustedPath, match=must_name):
            svc.start()
    finally:
        svc.stop()
    assert snapshot(d) == before, "nothing in the directory changed"
    assert not shm.service_files(name), "no segment was made"
    assert svc.recovery == {} and not (journal.parent / "ran.log").exists()


def test_a_sticky_shared_parent_is_fine(journal, tmp_path):
    """The journal in a directory of its own inside a shared sticky one (as in /tmp): its
    start re-arms the pending timer."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    os.chown(shared, OTHER, OTHER)
    d = _copy(journal, shared)
    with TimerService(f"{MINE}sticky", tasks=TASKS, capacity=100, executors=1, journal=d) as svc:
        assert svc.recovery["recovered"] == 1


def _dead_service(name: str, directory: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cfg = L.ServiceConfig(
        capacity=64, tick_ms=1, wheel_size=8, executors=1, max_clients=2, ring_capacity=8,
        dispatch_capacity=8, arena_blocks=(4, 2, 1, 1), tasks=(("noop", "m:f"),),
        journal_dir=str(directory), journal_epoch=1,
    )  # fmt: skip
    L.ServiceMemory.create(name, cfg, dead.pid, 0).close()


@pytest.mark.parametrize("how", ["directory writable by group", "segment of another user"])
def test_salvage_keeps_a_dead_segment_whose_journal_is_unsafe(journal, tmp_path, how, caplog):
    """Our own dead service naming a journal others could have written: the sweep's
    salvage writes nothing there and keeps the segment (the journal's owner decides)."""
    d = _copy(journal, tmp_path)
    _plant(d, how)
    before = snapshot(d)
    name = f"{MINE}deadsalv"
    _dead_service(name, d)
    try:
        assert salvage_stale(name) is False
        assert shm.service_files(name), "the segment is kept"
        assert snapshot(d) == before, "nothing written into the directory"
        assert "not salvaging the dead service" in caplog.text
    finally:
        shm.unlink_service(name)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [["journal", "check"], ["journal", "repair"], ["journal", "repair", "--dry-run"], ["run"]],
)
def test_commands_refuse_an_unsafe_journal_in_one_line_exit_2(journal, tmp_path, cli, command):
    d = _copy(journal, tmp_path)
    _plant(d, "directory of another user")
    before = snapshot(d)
    if command == ["run"]:  # a subprocess: were it to start, it is killed at the timeout
        args = ["run", "--name", f"{MINE}clirun", "--journal", str(d), "--tasks"]
        args += [f"{k}={v}" for k, v in TASKS.items()]
        code, err = _shmwheel(*args)
    else:
        code, _, err = cli(*command, str(d))
    line = _one_line(err)
    assert code == 2 and str(d) in line and f"uid {OTHER}" in line and "0777" in line, err
    assert "usage" not in err and "Traceback" not in err
    assert snapshot(d) == before


@pytest.fixture
def shared_tmp() -> Path:
    """A directory another user may enter (pytest's tmp_path is root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="shmwheel-trust-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def _shmwheel(*args: str, prefix: tuple[str, ...] = ()) -> tuple[int, str]:
    """`shmwheel ARGS` in a subprocess (run through `prefix`): (exit status, stderr). One
    still running after 60 s is stopped with SIGINT (then killed) and fails the test."""
    p = subprocess.Popen(
        [*prefix, sys.executable, "-m", "shmwheel", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd="/",
    )
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        try:
            p.communicate(timeout=30)
        finally:
            p.kill()
            p.wait()
        raise AssertionError(f"`shmwheel {' '.join(args)}` still ran after 60 s") from None
    return p.returncode, err


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
@pytest.mark.parametrize("whose", ["root's", "own, read-only"])
def test_journal_repair_by_a_user_who_cannot_write_it_is_one_line_exit_2(
    journal, shared_tmp, whose
):
    """`shmwheel journal repair` by uid 4242 on a journal it can read but not write: one
    line on stderr and exit 2, never a PermissionError traceback."""
    d = _copy(journal, shared_tmp)
    for p in F.segment_files(d):
        os.chmod(p, 0o644)
    os.chmod(d, 0o755)
    if whose == "own, read-only":  # its own (trusted), but it cannot create its LOCK
        os.unlink(d / "LOCK")
        for p in [d, *F.segment_files(d)]:
            os.chown(p, OTHER, OTHER)
        os.chmod(d, 0o555)
    before = snapshot(d)
    as_other = ("setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups")
    code, err = _shmwheel("journal", "repair", str(d), prefix=as_other)
    line = _one_line(err)
    assert code == 2 and "Traceback" not in err and str(d) in line, err
    assert ("belongs to user root (uid 0)" if whose == "root's" else "ermission denied") in line
    assert snapshot(d) == before
