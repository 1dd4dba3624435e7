"""The command line against live services: `run` in a subprocess, then `status` (text and
JSON), `ls`, `top` driven on a pseudo-terminal; SIGTERM / SIGINT to `run` leaves nothing
behind; a config file; usage errors exit 2; a missing service exits 1; `clean` on a stale
segment (dry run first)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import secrets
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time

import pytest
from helpers import (
    CLI_ENV,
    MINE,
    ROOT,
    embedding_process,
    service_processes,
    start_run,
    stop_run,
    wait_for,
)

import shmwheel
from shmwheel.segment import shm

TASKS = ["record=shmwheel.examples.tasks:append_line", "boom=shmwheel.examples.tasks:fail"]
ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>78])")


def shmwheel_cmd(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shmwheel", *args],
        capture_output=True,
        text=True,
        env=CLI_ENV,
        cwd=ROOT,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A service run by `shmwheel run` (a name outside this suite's per-test check: it
    spans the module; its teardown checks cleanup itself), with 5 runs and 1 error."""
    tmp = tmp_path_factory.mktemp("cli")
    name = f"c{os.getpid()}-{secrets.token_hex(3)}"
    log_path = tmp / "run.log"
    p, line = start_run(
        [
            "--name",
            name,
            "--capacity",
            "1000",
            "--executors",
            "1",
            "--journal",
            str(tmp / "journal"),
            "--tasks",
            *TASKS,
        ],
        log_path,
    )
    try:
        assert line == f"service {name} running; connect with shmwheel.connect('{name}')\n"
        with shmwheel.connect(name) as c:
            for i in range(5):
                c.schedule("record", {"path": str(tmp / "ran"), "tag": f"t{i}"}, delay_ms=5)
            c.schedule("boom", None, delay_ms=5)
            wait_for(
                lambda: c.stats()["completed"] == 5 and c.stats()["task_errors"] == 1,
                what="six runs",
            )
        yield name, p
    finally:
        stop_run(p, name, signal.SIGINT, log_path)


def test_status_text_and_json(served):
    name, run = served
    r = shmwheel_cmd("status", name)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert f"service      {name}" in text and f"supervisor pid {run.pid}" in text
    for figure in ("completed    5", "task errors  1", "scheduled    6", "pending      0"):
        assert figure in text, text
    assert re.search(r"exec0\s+\d+\s+yes", text) and "journal" in text and "p99" in text
    r = shmwheel_cmd("status", name, "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["service"] == name and st["owner_pid"] == run.pid
    assert (st["scheduled"], st["fired"], st["completed"], st["task_errors"]) == (6, 6, 5, 1)
    assert st["pending"] == 0 and st["cancelled"] == 0
    assert set(st["lateness_ms"]) == {"p50", "p99", "p999", "max"}
    assert set(st["processes"]) == {"supervisor", "coordinator", "reaper", "exec0"}
    for row in st["processes"].values():
        assert row["alive"] and row["pid"] > 0 and row["rss_bytes"] > 0
        assert row["cpu_percent"] is not None
    assert st["processes"]["supervisor"]["restarts"] is None  # it counts the others'
    assert all(
        row["restarts"] == 0 for role, row in st["processes"].items() if role != "supervisor"
    )
    assert st["journal"]["segments"] >= 1 and st["journal"]["disk_bytes"] > 0
    assert st["config"]["tasks"] == {
        "record": "shmwheel.examples.tasks:append_line",
        "boom": "shmwheel.examples.tasks:fail",
    }


def test_ls_shows_the_service(served, cli):
    name, run = served
    code, out, _ = cli("ls")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(name + " "))
    assert row.split()[1:3] == [str(run.pid), "running"]
    code, out, _ = cli("ls", "--json")
    entry = next(s for s in json.loads(out) if s["name"] == name)
    assert entry["owner_pid"] == run.pid and entry["state"] == "running"
    assert entry["capacity"] == 1000 and entry["executors"] == 1


def _read_screen(fd: int, until, timeout: float) -> str:
    """Read the pty until `until(screen text)` holds; returns the text without escapes."""
    raw, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other side closed
                break
            raw += chunk
            if until(ANSI.sub("", raw.decode("utf-8", "replace"))):
                deadline = min(deadline, time.monotonic() + 0.3)  # the rest of that frame
    return ANSI.sub("", raw.decode("utf-8", "replace"))


@pytest.mark.exclusive  # timed: run alone
def test_top_on_a_pty_shows_the_figures_and_quits_on_q(served):
    name, run = served
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    p = subprocess.Popen(
        [sys.executable, "-m", "shmwheel", "top", name],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=CLI_ENV,
        cwd=ROOT,
        start_new_session=True,
    )
    os.close(slave)
    try:
        # two redraws, a second apart: the second one has rates
        screen = _read_screen(
            master,
            lambda s: (
                s.count("shmwheel top") >= 2 and "dispatch exec0" in s[s.rindex("shmwheel top") :]
            ),
            20,
        )
        assert screen.count("shmwheel top") >= 2, screen[-3000:]
        last = screen[screen.rindex("shmwheel top") :]
        assert name in last and f"supervisor pid {run.pid}" in last
        assert re.search(r"completed\W+5\W+0\.0\b", last), last  # total, rate per second
        assert re.search(r"task errors\W+1\W", last) and re.search(r"pending\W+0\W", last)
        assert re.search(r"in flight\W+0\W", last), last
        assert "p99" in last and "dispatch exec0" in last and "0/8192" in last
        assert re.search(r"exec0\W+\d+\W+yes", last)
        assert re.search(rf"supervisor\W+{run.pid}\W+yes\W+\d+\.\d\W+[\d.]+ MiB", last), last
        os.write(master, b"q")
        assert p.wait(10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


def test_run_with_a_config_file_then_sigterm_leaves_nothing(tmp_path):
    name = f"{MINE}cfg"
    cfg = tmp_path / "svc.toml"
    cfg.write_text(
        textwrap.dedent(f"""\
        name = "{name}"
        capacity = 500
        executors = 1
        journal = "j"
        journal_fsync = "none"
        log-level = "WARNING"
        [tasks]
        record = "shmwheel.examples.tasks:append_line"
    """)
    )
    log_path = tmp_path / "run.log"
    p, line = start_run(
        [
            "--config",
            str(cfg),
            "--capacity",
            "600",
            "--log-level",
            "INFO",
            "--tasks",
            "boom=shmwheel.examples.tasks:fail",
        ],
        log_path,
    )
    try:
        assert line.startswith(f"service {name} running")
        st = json.loads(shmwheel_cmd("status", name, "--json", "--sample", "0").stdout)
        assert st["config"]["capacity"] == 600  # the flag overrides the file
        assert st["config"]["tasks"] == {
            "record": "shmwheel.examples.tasks:append_line",
            "boom": "shmwheel.examples.tasks:fail",
        }
        assert st["config"]["journal"] == str(tmp_path / "j")  # beside the config file
        assert st["journal"]["fsync"] == "none"
        assert "started" in log_path.read_text()  # --log-level INFO beat the file's WARNING
    finally:
        stop_run(p, name, signal.SIGTERM, log_path)


def test_wrong_arguments_exit_2_with_usage(cli, tmp_path):
    for args in (
        [],
        ["nope"],
        ["status"],
        ["status", "bad/name"],
        ["top"],
        ["run", "--tasks", "no-equals-sign"],
        ["run", "--capacity", "x"],
        ["run", "--tasks", "a=shmwheel.examples.tasks:noop", "--log-level", "LOUD"],
        ["ls", "--extra"],
        ["clean", "--what"],
    ):
        code, _, err = cli(*args)
        assert code == 2, args
        assert "usage: shmwheel" in err, (args, err)
    code, _, err = cli("run")  # no tasks anywhere
    assert code == 2 and "usage: shmwheel run" in err and "no tasks" in err
    bad = tmp_path / "bad.toml"
    bad.write_text('capcity = 5\n[tasks]\na = "shmwheel.examples.tasks:noop"\n')
    code, _, err = cli("run", "--config", str(bad))
    assert code == 2 and "unknown option 'capcity'" in err
    code, _, err = cli(
        "run", "--tasks", "a=shmwheel.examples.tasks:no_such_function", "--name", "x1"
    )
    assert code == 2 and "cannot import" in err
    r = shmwheel_cmd("status")  # the real exit status of the real program
    assert r.returncode == 2 and r.stderr.startswith("shmwheel status: error: ")
    assert len(r.stderr.splitlines()) == 1 and "(usage: shmwheel status " in r.stderr
    r = shmwheel_cmd("--help")
    assert r.returncode == 0 and "examples:" in r.stdout
    for command in ("run", "status", "top", "ls", "clean"):
        code, out, _ = cli(command, "--help")
        assert code == 0 and "examples:" in out and f"shmwheel {command}" in out


def test_status_and_top_of_a_missing_service_exit_1(cli):
    r = shmwheel_cmd("status", f"{MINE}absent")
    assert r.returncode == 1
    assert f"no service '{MINE}absent' on this host" in r.stderr
    code, _, err = cli("top", f"{MINE}absent")
    assert code == 1 and "no service" in err


def _stale_service(name: str) -> None:
    """Start a service in a child process in its own session, then SIGKILL the whole
    group: nobody is left to unlink the segment."""
    p, started = embedding_process(name, capacity=100)
    assert started == name
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    wait_for(lambda: not service_processes(name), timeout=10, what="the group to die")
    assert shm.service_files(name)


@pytest.mark.exclusive  # plants a stale segment any start would sweep
def test_clean_dry_run_lists_a_stale_segment_and_clean_removes_it(cli):
    # Any service start on this machine sweeps every stale segment of this user: another
    # test run's too. A segment still there after the dry run was there all along (its
    # name is new), so `ls`, `status` and the dry run each saw it; one swept meanwhile is
    # planted again under a new name. A dry run that removed it fails every attempt.
    for attempt in range(5):
        name = f"{MINE}stale{attempt}"
        _stale_service(name)
        ls, status, dry = cli("ls"), cli("status", name), cli("clean", "--dry-run")
        if (shm.SHM_DIR / (shm.PREFIX + name)).exists():
            break
    else:
        pytest.fail("the stale segment was gone after each of 5 dry runs: a dry run removes it")
    code, out, _ = ls
    assert code == 0 and re.search(rf"^{name}\s+\d+\s+stale\b", out, re.M), out
    code, _, err = status
    assert code == 1 and "is not running" in err and "shmwheel clean" in err
    code, out, _ = dry
    assert code == 0 and re.search(rf"^would remove {name} \(owner pid \d+ is gone", out, re.M)
    code, out, _ = cli("clean")
    assert code == 0 and f"removed {name}\n" in out
    assert not shm.service_files(name)
