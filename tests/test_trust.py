"""Trust boundaries (issue 20, part A): what a neighbour on the host can do to a service.

A module planted in the working directory is never imported by a service process, at start
or at a restart; a segment of another user is refused by connect and status, and left alone
by the sweep, clean and salvage; entries in /dev/shm that are not a valid segment of this
user (garbage, another owner, an out-of-range owner pid, an odd name) break nothing and make
only their own name unavailable; names are matched whole. The tests run as root (they chown
what they plant to ``nobody``) and unlink everything they plant."""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import MINE, fake_service, read_log, wait_for

import shmwheel
from shmwheel import ShmwheelError, TimerService
from shmwheel.journal.recover.salvage import salvage_stale
from shmwheel.segment import layout as L
from shmwheel.segment import shm

TASKS = {"record": "shmwheel.examples.tasks:append_line", "boom": "shmwheel.examples.tasks:fail"}
NOBODY = 65534
HOLDER = r"user nobody \(uid 65534\)"
SHM = Path("/dev/shm")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or pwd.getpwuid(NOBODY).pw_name != "nobody",
    reason="needs root (to chown what it plants) and a user nobody with uid 65534",
)

# a planted module: records who imported it, then hands the importer the real module, so a
# service that imports it keeps working and only the marker file tells
PLANTED = """\
import importlib, os, sys
with open({marker!r}, "a") as f:
    f.write(f"{{__name__}} pid {{os.getpid()}} argv {{sys.argv[1:]}}\\n")
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules[__name__]
sys.modules[__name__] = importlib.import_module(__name__)
"""


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _garbage(name: str, uid: int, mode: int = 0o666) -> Path:
    """A 100-byte /dev/shm/shmwheel.NAME of `mode` owned by `uid`."""
    path = SHM / (shm.PREFIX + name)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
    try:
        os.write(fd, b"\x5a" * 100)
        os.fchmod(fd, mode)
        os.fchown(fd, uid, uid)
    finally:
        os.close(fd)
    return path


def _start_fails(name: str, match: str) -> None:
    """start() of `name` raises ShmwheelError matching `match` (and, were it to start
    after all, the service is stopped again)."""
    svc = TimerService(name, tasks=TASKS, capacity=100, executors=1)
    try:
        with pytest.raises(ShmwheelError, match=match):
            svc.start()
    finally:
        svc.stop()


def _unlink(*paths: Path) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


@pytest.mark.parametrize("empty_entry", [False, True], ids=["pytest-path", "with-cwd-entry"])
def test_planted_modules_in_the_working_directory_are_never_imported(
    tmp_path, monkeypatch, empty_entry
):
    """Started from a world-writable directory holding msgpack.py, numpy.py, posix_ipc.py
    and psutil.py, no service process imports them: at start, nor when an executor killed
    with SIGKILL is restarted; with or without '' (a `python -c` or REPL process) on the
    embedding process's sys.path."""
    world = tmp_path / "world"
    world.mkdir()
    world.chmod(0o1777)
    marker = tmp_path / "imported"
    for module in ("msgpack", "numpy", "posix_ipc", "psutil"):
        (world / f"{module}.py").write_text(PLANTED.format(marker=str(marker)))
    if empty_entry:  # these modules are all imported already: this process finds none
        monkeypatch.syspath_prepend("")
    log = tmp_path / "log"
    cwd = os.getcwd()
    os.chdir(world)
    try:
        with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc, svc.client() as c:
            first = svc.procs["exec0"].pid
            os.kill(first, signal.SIGKILL)
            wait_for(
                lambda: (
                    svc.restarts.get("exec0") == 1
                    and int(svc.mem.exec_table[0, L.X_PID]) == svc.procs["exec0"].pid != first
                ),
                what="the executor restarted",
            )
            c.schedule("record", {"path": str(log), "tag": "after"}, delay_ms=1)
            wait_for(lambda: svc.stats()["completed"] == 1, what="a run after the restart")
    finally:
        os.chdir(cwd)
    assert [r[0] for r in read_log(log)] == ["after"]
    assert not marker.exists(), "planted modules were imported:\n" + marker.read_text()


def test_a_python_c_task_module_in_the_working_directory_is_refused_at_the_call(tmp_path):
    """Service processes do not search the working directory ('' on sys.path): a task
    found only there is refused when the service is made, with the fix in the message."""
    (tmp_path / "cwd_tasks.py").write_text("def run(payload):\n    pass\n")
    code = textwrap.dedent("""
        import sys, shmwheel
        try:
            shmwheel.TimerService(tasks={"t": "cwd_tasks:run"}, capacity=100, executors=1)
        except ValueError as e:
            print(e)
        sys.path.insert(0, %r)  # on purpose: now it is the service's path too
        shmwheel.TimerService(tasks={"t": "cwd_tasks:run"}, capacity=100, executors=1)
        print("explicit ok")
    """) % str(tmp_path)
    root = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=root),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "working directory" in out.stdout and "sys.path" in out.stdout, out.stdout
    assert out.stdout.rstrip().endswith("explicit ok"), out.stdout


def test_a_segment_of_another_user_is_refused_by_connect_and_status(cli):
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
        path = SHM / (shm.PREFIX + svc.name)
        os.chown(path, NOBODY, NOBODY)
        try:
            with pytest.raises(ShmwheelError, match=HOLDER):
                shmwheel.connect(svc.name)
            code, _, err = cli("status", svc.name)
            assert code == 2 and re.search(HOLDER, err), err  # a refusal
        finally:
            os.chown(path, 0, 0)
        with svc.client() as c:  # its own user's again
            assert c.stats()["clients"] == 1


@pytest.mark.exclusive  # plants a stale segment any start would sweep
def test_sweep_clean_and_salvage_leave_another_users_dead_segment_alone(tmp_path, cli):
    """A dead segment of another user naming a root-only journal directory: neither a
    start's sweep, `clean` nor salvage_stale touches the segment or writes there; nor does
    a sweep write into a journal directory of another user named by our own dead segment."""
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    theirs_dir = tmp_path / "theirs"
    theirs_dir.mkdir(mode=0o700)
    os.chown(theirs_dir, NOBODY, NOBODY)
    foreign = fake_service(f"{MINE}foreign", _dead_pid(), root_only)
    ours = None
    try:
        os.chown(foreign, NOBODY, NOBODY)
        with TimerService(tasks=TASKS, capacity=100, executors=1):
            pass
        assert foreign.exists(), "the sweep left another user's segment alone"
        code, out, _ = cli("clean")
        assert code == 0 and foreign.name[len(shm.PREFIX) :] not in out
        salvage_stale(foreign.name[len(shm.PREFIX) :])
        assert foreign.exists() and not list(root_only.iterdir()), "nothing written"
        ours = fake_service(f"{MINE}theirs-journal", _dead_pid(), theirs_dir)
        with TimerService(tasks=TASKS, capacity=100, executors=1):
            pass
        assert not list(theirs_dir.iterdir()), "no salvage into another user's directory"
    finally:
        _unlink(foreign, *([ours] if ours else []))


@pytest.mark.exclusive  # plants a stale segment any start would sweep
def test_squatted_and_damaged_entries_break_nothing_but_their_own_name(cli):
    squat = f"{MINE}squat"
    junk = f"{MINE}junk"
    badpid = f"{MINE}badpid"
    small = f"{MINE}small"  # private, but 100 bytes: not a whole number of words
    planted = [_garbage(squat, NOBODY), _garbage(junk, 0), _garbage(f"{MINE}odd\n", 0)]
    planted.append(_garbage(small, 0, 0o600))
    try:
        planted.append(fake_service(badpid, 2**62))
        with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
            with shmwheel.connect(svc.name) as c:
                assert c.stats()["clients"] == 1
            code, out, _ = cli("ls")
            assert code == 0 and re.search(rf"^{svc.name}\s+\d+\s+running\b", out, re.M), out
            assert squat not in out and junk not in out and badpid not in out
            code, out, _ = cli("ls", "--all")
            assert code == 0 and re.search(rf"^{squat}\s.*\bforeign\b", out, re.M), out
            assert re.search(r"nobody", out) and re.search(rf"^{junk}\s.*\bdamaged\b", out, re.M)
            assert re.search(rf"^{badpid}\s.*\bdamaged\b", out, re.M), out
            code, out, _ = cli("ls", "--all", "--json")
            import json

            states = {e["name"]: e["state"] for e in json.loads(out)}
            assert states[squat] == "foreign" and states[junk] == states[badpid] == "damaged"
            assert states[f"{MINE}odd\n"] == states[small] == "damaged"
            assert states[svc.name] == "running"
            code, out, _ = cli("clean")
            assert code == 0 and all(p.exists() for p in planted), out
            code, _, err = cli("status", squat)
            assert code == 2 and re.search(HOLDER, err), err  # a refusal
        _start_fails(squat, HOLDER)
        with pytest.raises(ShmwheelError, match=HOLDER):
            shmwheel.connect(squat)
        with pytest.raises(ShmwheelError, match="100 bytes: not a shmwheel segment"):
            shmwheel.connect(small)
        _start_fails(junk, "exists already")
        assert all(p.exists() for p in planted), "nothing planted was removed"
    finally:
        _unlink(*planted)


def test_a_squatted_semaphore_makes_only_its_name_unavailable():
    """Another user's semaphore under a service's name: that start fails naming them, and
    neither its teardown nor a sweep (an orphan semaphore: no segment) removes the file."""
    import posix_ipc

    name = f"{MINE}semsquat"
    sem = SHM / f"sem.{shm.PREFIX}{name}.reaper"
    posix_ipc.Semaphore(f"/{shm.PREFIX}{name}.reaper", posix_ipc.O_CREX, mode=0o666).close()
    try:
        os.chown(sem, NOBODY, NOBODY)
        _start_fails(name, HOLDER)
        assert sem.exists(), "the failed start's teardown left another user's semaphore"
        with TimerService(tasks=TASKS, capacity=100, executors=1):
            assert sem.exists(), "the sweep left another user's semaphore"
    finally:
        _unlink(sem)


def test_pid_alive_takes_any_integer():
    for pid in (-1, 0, 2**31, 2**62, 2**63 - 1, -(2**63)):
        assert shm.pid_alive(pid) is False
    assert shm.pid_alive(os.getpid())


@pytest.mark.parametrize("name", ["x\n", "\nx", "x\r", "x y", "", "a" * 65, "a/b"])
def test_names_are_matched_whole(name):
    with pytest.raises(ValueError, match="service name"):
        shm.check_name(name)
    with pytest.raises(ValueError, match="service name"):
        TimerService(name, tasks=TASKS, capacity=100, executors=1)
    with pytest.raises(ValueError, match="service name"):
        shmwheel.connect(name)
