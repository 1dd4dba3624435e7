"""Every refusal of the ``shmwheel`` command is one line on stderr and exit status 2
(docs/operating.md, "Command line"; issue 31): bad arguments, a path that is missing, not
a directory, not a journal, not safe (another uid's, writable by others: segment/trust.py),
a damaged journal or segment, a journal or name in use, a user who may not read or write
what it names. Each case runs the real program in a subprocess and checks that stderr is
that one line (no traceback), stdout is empty, and nothing changed on disk or in /dev/shm.
A service that is not there is not a refusal but an answer: exit 1, one line too."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from helpers import KEPT, MINE, module_service, nobody_python, service_processes, shm_files

from shmwheel import TimerService
from shmwheel.journal import format as F

ROOT = Path(__file__).resolve().parent.parent
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
ENV.update(PYTHONPATH=str(ROOT))
# user nobody may not run this venv's interpreter (a pyenv Python under /root, say):
# test_install's fallback, the system's, finds the dependencies on PYTHONPATH
NOBODY_ENV = {k: v for k, v in ENV.items() if not k.startswith("PYTHON")}
NOBODY_ENV.update(
    PYTHONPATH=os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]),
    PYTHONNOUSERSITE="1",
)
TASK = "a=shmwheel.examples.tasks:noop"
NOPE = "a=shmwheel.examples.tasks:nope"  # a module that has no such function
ABSENT = f"{MINE}absent"
BUSY = f"{MINE}refusals"
DAMAGED = f"{MINE}damaged"  # /dev/shm/shmwheel.DAMAGED: a segment file of garbage
NEW = f"{MINE}new"  # the name a refused `run` would have started
OTHER_UID = 4242
RUN = ["run", "--name", NEW, "--tasks", TASK]

# (case id, the command's arguments ({key} fills in from the `places` fixture), status)
CASES = [
    ("no command", [], 2),
    ("unknown command", ["nope"], 2),
    ("status: no name", ["status"], 2),
    ("status: bad name", ["status", "bad/name"], 2),
    ("status: unknown flag", ["status", ABSENT, "--bogus"], 2),
    ("status: sample -1", ["status", ABSENT, "--sample", "-1"], 2),
    ("status: damaged segment", ["status", DAMAGED], 2),
    ("status: no such service", ["status", ABSENT], 1),
    ("top: no name", ["top"], 2),
    ("top: interval 0", ["top", ABSENT, "--interval", "0"], 2),
    ("top: damaged segment", ["top", DAMAGED], 2),
    ("top: no such service", ["top", ABSENT], 1),
    ("ls: unknown flag", ["ls", "--extra"], 2),
    ("clean: unknown flag", ["clean", "--what"], 2),
    ("run: no tasks", ["run", "--name", NEW], 2),
    ("run: capacity not a number", [*RUN, "--capacity", "x"], 2),
    ("run: capacity 0", [*RUN, "--capacity", "0"], 2),
    ("run: task without =", ["run", "--name", NEW, "--tasks", "noeq"], 2),
    ("run: task not importable", ["run", "--name", NEW, "--tasks", NOPE], 2),
    ("run: bad name", ["run", "--name", "bad/name", "--tasks", TASK], 2),
    ("run: config missing", [*RUN, "--config", "{missing}/c.toml"], 2),
    ("run: config a directory", [*RUN, "--config", "{empty}"], 2),
    ("run: config unknown option", [*RUN, "--config", "{bad_toml}"], 2),
    ("run: config not TOML", [*RUN, "--config", "{not_toml}"], 2),
    ("run: log level", [*RUN, "--log-level", "LOUD"], 2),
    ("run: metrics port", [*RUN, "--metrics-port", "70000"], 2),
    ("run: journal a file", [*RUN, "--journal", "{a_file}"], 2),
    ("run: journal writable by others", [*RUN, "--journal", "{open}"], 2),
    ("run: journal of another uid", [*RUN, "--journal", "{foreign}"], 2),
    ("run: journal damaged", [*RUN, "--journal", "{damaged}"], 2),
    ("run: journal in use", [*RUN, "--journal", "{busy}"], 2),
    ("run: name in use", ["run", "--name", BUSY, "--tasks", TASK], 2),
    ("journal: no action", ["journal"], 2),
    ("journal: unknown action", ["journal", "nope"], 2),
    ("journal check: no directory", ["journal", "check"], 2),
    ("journal check: unknown flag", ["journal", "check", "{empty}", "--bogus"], 2),
    ("journal check: missing", ["journal", "check", "{missing}"], 2),
    ("journal check: a file", ["journal", "check", "{a_file}"], 2),
    ("journal check: empty", ["journal", "check", "{empty}"], 2),
    ("journal check: writable by others", ["journal", "check", "{open}"], 2),
    ("journal check: another uid's", ["journal", "check", "{foreign}"], 2),
    ("journal repair: missing", ["journal", "repair", "{missing}"], 2),
    ("journal repair: a file", ["journal", "repair", "{a_file}"], 2),
    ("journal repair: empty", ["journal", "repair", "{empty}"], 2),
    ("journal repair: writable by others", ["journal", "repair", "{open}"], 2),
    ("journal repair: another uid's", ["journal", "repair", "{foreign}"], 2),
    ("journal repair: in use", ["journal", "repair", "{busy}"], 2),
]


def _shmwheel(
    args: list[str], prefix: list[str] | None = None, env: dict[str, str] = ENV
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or [sys.executable]), "-m", "shmwheel", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def _a_journal(path: Path) -> Path:
    """A journal directory with segments (a service started and stopped on it)."""
    TimerService(
        tasks={"a": "shmwheel.examples.tasks:noop"}, capacity=64, executors=1, journal=path
    ).start().stop()
    return path


def _chown_tree(path: Path, uid: int) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, uid)


def snapshot(base: Path, skip: Path | None = None) -> dict[str, object]:
    """What the cases may not change: every path under `base` (but the running service's
    journal `skip`, which it writes: only its entries' names) with its owner, mode and
    contents, this suite's /dev/shm entries and service processes."""
    seen: dict[str, object] = {}
    for p in sorted(base.rglob("*")):
        if skip is not None and (p == skip or skip in p.parents):
            continue
        st = p.lstat()
        if p.name == "LOCK":  # a start writes its pid there before it judges the journal
            seen[str(p)] = (st.st_uid, st.st_mode)  # (test_journal_damage's digest: the same)
            continue
        body = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        seen[str(p)] = (st.st_uid, st.st_mode, st.st_size, body)
    if skip is not None:
        st = skip.lstat()
        seen[str(skip)] = (st.st_uid, st.st_mode, sorted(q.name for q in skip.iterdir()))
    seen["/dev/shm"] = sorted(shm_files())
    seen["processes"] = sorted(p.pid for p in service_processes())
    return seen


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The paths the cases name, a damaged segment file in /dev/shm, and a service running
    on the journal {busy} as BUSY."""
    base = tmp_path_factory.mktemp("refusals")
    open_ = _a_journal(base / "open")
    os.chmod(open_, 0o777)  # writable by others: a start, check or repair refuses it
    foreign = _a_journal(base / "foreign")
    _chown_tree(foreign, OTHER_UID)  # another user's: refused, nothing read
    damaged = _a_journal(base / "damaged")
    _damage(damaged)
    (base / "empty").mkdir()
    (base / "a_file").write_text("not a journal\n")
    (base / "bad.toml").write_text('capcity = 5\n[tasks]\na = "shmwheel.examples.tasks:noop"\n')
    (base / "not.toml").write_text("this is [not toml\n")
    garbage = Path("/dev/shm") / f"shmwheel.{DAMAGED}"
    KEPT.add(DAMAGED)  # the check after each test leaves it alone until the module ends
    fd = os.open(garbage, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.write(fd, b"\x5a" * 8192)
    os.close(fd)
    busy = base / "busy"
    svc = TimerService(
        BUSY, tasks={"a": "shmwheel.examples.tasks:noop"}, capacity=64, executors=1, journal=busy
    )
    try:
        for _ in module_service(svc):
            yield (
                base,
                busy,
                {
                    "missing": str(base / "missing"),
                    "open": str(open_),
                    "foreign": str(foreign),
                    "damaged": str(damaged),
                    "empty": str(base / "empty"),
                    "a_file": str(base / "a_file"),
                    "bad_toml": str(base / "bad.toml"),
                    "not_toml": str(base / "not.toml"),
                    "busy": str(busy),
                },
            )
    finally:
        garbage.unlink(missing_ok=True)
        KEPT.discard(DAMAGED)


# what a start's sweep of /dev/shm says of other services' segments it skips (this host's
# other test runs, of another layout version, say; this module's DAMAGED): not the refusal
_SWEPT = re.compile(r"shmwheel\.segment WARNING: skipping /dev/shm/shmwheel\.(\S+) \(damaged\)")


def assert_refused(r: subprocess.CompletedProcess[str], status: int, what: object) -> None:
    """Exit `status`, and stderr is exactly one non-empty line, no traceback; no output.
    A `run`'s warnings about segments of other services (none of them the one it names)
    are left out: they say what the host holds, not why the command refused."""
    names = [a for a in (what if isinstance(what, list) else []) if a.startswith(MINE)]
    lines = [
        ln
        for ln in r.stderr.splitlines()
        if not ((m := _SWEPT.search(ln)) and m.group(1) not in names)
    ]
    assert r.returncode == status, (what, r.returncode, r.stderr)
    assert len(lines) == 1 and lines[0].strip(), (what, r.stderr)
    assert "Traceback" not in r.stderr, (what, r.stderr)
    assert r.stdout == "", (what, r.stdout)


@pytest.mark.parametrize(("args", "status"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_refusal_is_one_line_and_exit_2_and_changes_nothing(places, args, status):
    base, busy, paths = places
    argv = [a.format(**paths) for a in args]
    if os.geteuid() != 0 and any(a == paths["foreign"] for a in argv):
        pytest.skip("needs root (to chown a journal to another uid)")
    before = snapshot(base, busy)
    r = _shmwheel(argv)
    assert_refused(r, status, argv)
    assert snapshot(base, busy) == before, argv


@pytest.fixture
def as_nobody():
    """(the command prefix that runs Python as user nobody, a directory nobody can reach
    to make things in): root only, as it switches user with setpriv. The directory is
    made in /tmp itself, not under pytest's base directory (mode 0700, shared with other
    pytest runs of this user, which prune it)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to switch to user nobody)")
    where = Path(tempfile.mkdtemp(prefix=f"{MINE}nobody-"))
    try:
        os.chmod(where, 0o755)
        prefix, _ = nobody_python(NOBODY_ENV)
        yield prefix, where
    finally:
        for d, dirs, _ in os.walk(where):
            for x in dirs:
                os.chmod(os.path.join(d, x), 0o755)  # a 0000 one too, so rmtree can go in
        shutil.rmtree(where)


def _damage(jdir: Path) -> None:
    """Flip a bit of the magic of the journal's first segment: a start refuses it
    (journal_on_damage="refuse"), a repair would move it to DIR/damaged/."""
    seg = Path(F.segment_files(str(jdir))[0])
    data = bytearray(seg.read_bytes())
    data[2] ^= 0x40
    seg.write_bytes(bytes(data))


def _nobodys_journal(where: Path, mode: int, damaged: bool = False) -> Path:
    jdir = _a_journal(where / "j")
    if damaged:
        _damage(jdir)
    _chown_tree(jdir, 65534)
    os.chmod(jdir, mode)
    return jdir


def test_journal_repair_by_a_user_who_cannot_write_it_is_refused(as_nobody):
    """User nobody repairs its own damaged journal directory whose mode (0555) does not
    let it write the new segment nor move the damaged one: one line, exit 2, no
    PermissionError traceback (issue 31), nothing changed. (An intact one in such a
    directory needs no write: "nothing to repair", exit 0.)"""
    prefix, where = as_nobody
    jdir = _nobodys_journal(where, 0o555, damaged=True)
    before = snapshot(where)
    r = _shmwheel(["journal", "repair", str(jdir)], prefix, NOBODY_ENV)
    assert_refused(r, 2, "repair as nobody")
    assert "permission denied" in r.stderr.lower(), r.stderr
    assert snapshot(where) == before


@pytest.mark.parametrize("action", ["check", "repair"])
def test_a_journal_its_user_cannot_read_is_refused(as_nobody, action):
    """User nobody's own journal directory of mode 0000: check and repair refuse it in
    one line, exit 2."""
    prefix, where = as_nobody
    jdir = _nobodys_journal(where, 0o000)
    before = snapshot(where)
    r = _shmwheel(["journal", action, str(jdir)], prefix, NOBODY_ENV)
    assert_refused(r, 2, f"{action} as nobody")
    assert "permission denied" in r.stderr.lower() or "cannot read" in r.stderr, r.stderr
    assert snapshot(where) == before


@pytest.mark.parametrize("command", ["status", "top"])
def test_another_users_service_is_refused(places, as_nobody, command):
    """User nobody asks about root's running service: its segment is refused (not
    nobody's), one line, exit 2."""
    prefix, _ = as_nobody
    r = _shmwheel([command, BUSY], prefix, NOBODY_ENV)
    assert_refused(r, 2, f"{command} as nobody")
    assert "not by this process's user nobody" in r.stderr, r.stderr
