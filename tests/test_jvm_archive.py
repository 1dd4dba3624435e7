"""The embedded driver's class archive (``shmwheel/pipeline/run/jvm_archive.py``): which
archive a session maps, when one is written, what is never trusted, and a full disk.

The plan and the finishing step are tested without a JVM (a shell stands in for it where
a process is needed); one test runs the audit command with a real JVM, which writes the
archive, then starts a session that maps it. (The suite itself runs with the archive off:
conftest.py.)"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shmwheel.pipeline.run import jvm_archive as J

JAVA, VERSION = "/usr/bin/java", 'openjdk version "17.0.15"'
OPTIONS = "-XX:TieredStopAtLevel=1 -Xmx1g"


@pytest.fixture
def home(tmp_path: Path) -> str:
    """A stand-in Spark home: two jars."""
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("a.jar", "b.jar"):
        (jars / name).write_bytes(b"jar " + name.encode())
    return str(tmp_path / "spark")


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache" / "jvm"
    monkeypatch.setenv(J.ENV, str(d))
    return d


def plan(home: str, write: bool = True) -> J.Plan:
    return J.plan(JAVA, VERSION, home, OPTIONS, write)


def put_archive(p: J.Plan, content: bytes = b"an archive") -> None:
    """The pair finish() leaves: the archive and its digest."""
    assert p.path is not None
    Path(p.path).write_bytes(content)
    Path(p.path + ".sha256").write_text(J.sha256_of(p.path) + "\n")


def test_none_yet_the_command_writes_one_a_reader_does_not(where, home):
    p = plan(home, write=False)
    assert p.options == "" and not p.writes and not where.exists()  # nothing created
    p = plan(home)
    assert p.writes and p.tmp is not None and p.path is not None
    assert f"-XX:ArchiveClassesAtExit={p.tmp}" in p.options and J.QUIET in p.options
    assert os.path.dirname(p.tmp) == os.path.dirname(p.path) == str(where)
    assert os.stat(where).st_mode & 0o777 == 0o700


def test_a_sound_archive_is_mapped(where, home):
    put_archive(plan(home))
    p = plan(home)
    assert p.options == f"-XX:SharedArchiveFile={p.path} {J.QUIET}" and not p.writes
    assert plan(home, write=False).options == p.options


@pytest.mark.parametrize("damage", ["flipped byte", "no digest", "truncated"])
def test_a_damaged_archive_is_never_mapped_and_is_rewritten(where, home, damage, caplog):
    first = plan(home)
    put_archive(first, b"x" * 4096)
    assert first.path is not None
    if damage == "flipped byte":
        with open(first.path, "r+b") as f:
            f.seek(100)
            f.write(b"y")
    elif damage == "no digest":
        os.unlink(first.path + ".sha256")
    else:
        os.truncate(first.path, 1000)
    with caplog.at_level(logging.WARNING, "shmwheel.pipeline"):
        p = plan(home)
        assert "SharedArchiveFile" not in p.options and p.writes  # rewritten at exit
        assert "SharedArchiveFile" not in plan(home, write=False).options
    assert "damaged" in caplog.text


def test_the_key_follows_java_spark_and_the_options(home):
    k = J.key(JAVA, VERSION, home, OPTIONS)
    assert J.key(JAVA, VERSION, home, OPTIONS) == k
    assert J.key(JAVA, VERSION + " (build 2)", home, OPTIONS) != k
    assert J.key(JAVA, VERSION, home, OPTIONS.replace("1g", "2g")) != k
    jar = Path(home, "jars", "a.jar")
    jar.write_bytes(jar.read_bytes() + b"!")  # a new Spark: the jar's size differs
    assert J.key(JAVA, VERSION, home, OPTIONS) != k


@pytest.mark.parametrize("what", ["group-writable file", "link", "others' directory", "uid"])
def test_what_is_not_this_users_is_never_trusted_nor_removed(where, home, what, caplog):
    p = plan(home)
    put_archive(p)
    assert p.path is not None
    if what == "group-writable file":
        os.chmod(p.path, 0o664)
    elif what == "link":
        os.rename(p.path, p.path + ".real")
        os.symlink(p.path + ".real", p.path)
    elif what == "others' directory":
        os.chmod(where, 0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(p.path, 12345, 12345)
    before = sorted(os.listdir(where))
    with caplog.at_level(logging.WARNING, "shmwheel.pipeline"):
        got = plan(home)
    assert got == J.OFF and "off for this run" in caplog.text
    assert sorted(os.listdir(where)) == before  # never deleted, never replaced


def test_turned_off_by_the_environment(monkeypatch, home, tmp_path):
    for off in ("off", "0", "none"):
        monkeypatch.setenv(J.ENV, off)
        assert plan(home) == J.OFF
    monkeypatch.delenv(J.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert J.directory() == str(tmp_path / "xdg" / "shmwheel" / "jvm")


def jvm_stand_in(script: str) -> subprocess.Popen[bytes]:
    """A process that, like the gateway's JVM, runs until its stdin closes, then does
    `script` (with $TMP) and exits."""
    return subprocess.Popen(["sh", "-c", f"cat >/dev/null; {script}"], stdin=subprocess.PIPE)


def test_finish_moves_the_archive_and_its_digest_into_place(where, home):
    p = plan(home)
    assert p.tmp and p.path
    proc = jvm_stand_in(f"head -c 100000 /dev/urandom > {p.tmp}")
    lines: list[str] = []
    assert J.finish(p, proc, lines.append)
    assert proc.returncode == 0 and J.check(p.path) == "ok"
    name = os.path.basename(p.path)
    assert sorted(os.listdir(where)) == [name, name + ".sha256"]
    assert "written" in lines[-1]
    assert "SharedArchiveFile" in plan(home).options


def test_a_failed_dump_leaves_a_note_and_no_file_and_is_not_retried_for_a_day(where, home):
    p = plan(home)
    assert p.tmp and p.path
    # the JVM's way on a full disk (measured): a partial file, then exit 1 ("Unable to use
    # shared archive"); the partial file must not stay
    proc = jvm_stand_in(f"printf partial > {p.tmp}; exit 1")
    lines: list[str] = []
    assert not J.finish(p, proc, lines.append)
    assert "not written" in lines[-1] and "exited 1" in lines[-1]
    assert sorted(os.listdir(where)) == [os.path.basename(p.path) + ".failed"]
    again = plan(home)
    assert not again.writes and "failed" in again.note
    old = time.time() - J.RETRY_AFTER_S - 60
    os.utime(p.path + ".failed", (old, old))
    assert plan(home).writes  # a day on, tried again


def test_a_jvm_that_does_not_exit_is_killed_and_leaves_nothing(where, home, monkeypatch):
    p = plan(home)
    assert p.tmp and p.path
    monkeypatch.setattr(J, "DUMP_TIMEOUT_S", 0.5)
    proc = jvm_stand_in(f"printf partial > {p.tmp}; exec sleep 60")  # wedged mid-dump
    lines: list[str] = []
    t = time.monotonic()
    assert not J.finish(p, proc, lines.append)
    assert time.monotonic() - t < 10 and proc.returncode is not None  # killed, reaped
    assert "did not exit within" in lines[-1]
    assert sorted(os.listdir(where)) == [os.path.basename(p.path) + ".failed"]


def test_a_command_killed_while_its_jvm_wrote_leaves_nothing_for_long(where, home):
    p = plan(home)
    assert p.tmp
    stale = os.path.join(where, f".spark-0123456789abcdef.jsa.{_dead_pid()}.tmp")
    Path(stale).write_bytes(b"half")
    mine = Path(p.tmp)
    mine.write_bytes(b"being written")  # this process is alive: its file stays
    plan(home)
    assert not os.path.exists(stale) and mine.exists()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_finish_on_a_full_tmpfs(tmp_path, home, monkeypatch):
    """The real thing: the archive's directory on a 64 KiB tmpfs; the dump (here a
    stand-in writing 1 MiB) fills it. The command reports it, keeps no partial file."""
    vol = tmp_path / "vol"
    vol.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(vol)], check=True)
    try:
        monkeypatch.setenv(J.ENV, str(vol / "jvm"))
        p = plan(home)
        assert p.tmp
        proc = jvm_stand_in(f"head -c 1048576 /dev/zero > {p.tmp}")
        lines: list[str] = []
        assert not J.finish(p, proc, lines.append)
        assert "not written" in lines[-1]
        left = os.listdir(vol / "jvm")
        assert not [n for n in left if n.endswith(".tmp") or n.endswith(".jsa")], left
    finally:
        subprocess.run(["umount", str(vol)], check=False)


@pytest.mark.system  # starts a JVM (Spark)
def test_the_audit_command_writes_the_archive_then_a_session_maps_it(tmp_path):
    """The real thing: the audit command with a real JVM writes the archive as its JVM
    exits, after its verdict, and says so; a session started next maps it and works."""
    from shmwheel.pipeline.demo import write_demo_journal

    journal = tmp_path / "journal"
    write_demo_journal(str(journal), one_shots=300, repeating=1, operations=5, seed=3)
    env = dict(os.environ, **{J.ENV: str(tmp_path / "archive")})
    cmd = [sys.executable, "-m", "shmwheel.pipeline", "audit", str(journal),
           str(tmp_path / "out"), "--master", "local[1]", "--json"]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert got.returncode == 0 and json.loads(got.stdout)["clean"], got.stderr[-3000:]
    assert "JVM class archive: written to" in got.stderr
    assert "[archive] the JVM's class archive written" in got.stderr
    path = next(iter((tmp_path / "archive").glob("spark-*.jsa")))
    assert J.check(str(path)) == "ok"
    assert not [n for n in os.listdir(tmp_path / "archive") if n.endswith(".tmp")]
    # a session (not the command: it only reads the archive) started from it
    code = (
        "from shmwheel.pipeline.run.session import archive_plan, spark_session\n"
        "s = spark_session('local[1]', data_source=False)\n"
        "print(archive_plan().note)\nprint(s.range(5).count())\ns.stop()\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.split() == ["used", str(path), "5"]
