"""The fork server (shmwheel/service/processes/zygote.py): every role is forked by the service's
zygote, first and on restart; the zygote exits with the service (after stop(), and when
the embedding process is killed: test_service's orphan tests); a dead zygote is replaced
at the next restart while the running roles carry on; service processes run one thread
(no library thread pool); a role's descriptors are only those its request passed."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import TASKS, assert_once_never_early, read_log, service_processes, wait_for

from shmwheel import TimerService
from shmwheel.segment import layout as L
from shmwheel.segment import shm
from shmwheel.service import forkserver as F


@pytest.fixture
def svc():
    with TimerService(tasks=TASKS, capacity=1000, executors=2) as s:
        yield s


def test_roles_are_forked_by_the_zygote_which_exits_with_the_service(tmp_path):
    svc = TimerService(tasks=TASKS, capacity=1000, executors=2).start()
    try:
        zygote = svc._zygote
        assert zygote is not None
        for role, p in svc.procs.items():
            assert psutil.Process(p.pid).ppid() == zygote.proc.pid, role
            # the zygote's command line, as service_processes() and tools look for it, and
            # the role's name
            assert psutil.Process(p.pid).cmdline()[3:5] == ["zygote", svc.name]
            short = {"coordinator": "coord"}.get(role, role)
            assert psutil.Process(p.pid).name() == f"shmwheel-{short}", role
        with svc.client() as c:
            c.schedule("record", {"path": str(tmp_path / "log"), "tag": "a"}, delay_ms=1)
            wait_for(lambda: svc.stats()["completed"] == 1, what="a run")
    finally:
        svc.stop()
    assert zygote.proc.poll() == 0, "the zygote exited, cleanly, within stop()"
    assert not psutil.pid_exists(zygote.proc.pid)


def test_service_processes_run_one_thread(svc):
    """No OpenBLAS (or other library) pool in processes that never call it."""
    assert svc._zygote is not None
    pids = {"zygote": svc._zygote.proc.pid} | {role: p.pid for role, p in svc.procs.items()}
    for role, pid in pids.items():  # a zygote with threads would fork unsafely
        assert len(os.listdir(f"/proc/{pid}/task")) == 1, role
        env = psutil.Process(pid).environ()
        assert env.get("OPENBLAS_NUM_THREADS") == os.environ.get("OPENBLAS_NUM_THREADS", "1")


def test_a_killed_executor_is_forked_again_and_runs_timers(svc, tmp_path):
    log = tmp_path / "log"
    zygote = svc._zygote
    with svc.client() as c:
        for n in range(3):
            old = svc.procs["exec0"]
            os.kill(old.pid, signal.SIGKILL)
            wait_for(lambda old=old: svc.procs["exec0"] is not old, what="a new exec0")
            assert old.wait(5) == -signal.SIGKILL, "the zygote reported the signal"
            wait_for(lambda: int(svc.mem.exec_table[0, L.X_PID]) == svc.procs["exec0"].pid)
            assert psutil.Process(svc.procs["exec0"].pid).ppid() == zygote.proc.pid
            c.schedule("record", {"path": str(log), "tag": f"r{n}"}, delay_ms=1)
            # run before the next kill (a run killed midway would be crashed, not run)
            wait_for(lambda n=n: svc.stats()["completed"] == n + 1, what="the run")
    assert svc.restarts["exec0"] == 3
    assert_once_never_early(read_log(log), ["r0", "r1", "r2"])


def test_a_dead_zygote_is_replaced_at_the_next_restart(svc, tmp_path):
    log = tmp_path / "log"
    first = svc._zygote
    roles = {role: p.pid for role, p in svc.procs.items()}
    first.proc.kill()
    first.proc.wait()
    with svc.client() as c:
        c.schedule("record", {"path": str(log), "tag": "a"}, delay_ms=1)
        wait_for(lambda: svc.stats()["completed"] == 1, what="a run without the zygote")
        assert {role: p.pid for role, p in svc.procs.items()} == roles, "the roles carry on"
        assert all(p.poll() is None for p in svc.procs.values())
        old = svc.procs["exec1"]
        os.kill(old.pid, signal.SIGKILL)
        wait_for(lambda: svc.procs["exec1"] is not old, what="a new exec1")
        assert old.wait(5) == -1, "its code is unknown: no zygote reported it"
        second = svc._zygote
        assert second is not None and second is not first and not second.dead
        assert psutil.Process(svc.procs["exec1"].pid).ppid() == second.proc.pid
        c.schedule("record", {"path": str(log), "tag": "b"}, delay_ms=1)
        wait_for(lambda: svc.stats()["completed"] == 2, what="a run after")
    assert_once_never_early(read_log(log), ["a", "b"])


def test_a_role_keeps_only_the_descriptors_its_request_passed(tmp_path):
    """Forked by hand: a passed descriptor stays open in the role, the zygote's socket and
    every other descriptor of the zygote are not inherited."""
    with TimerService(tasks=TASKS, capacity=1000, executors=1, journal=tmp_path / "j") as svc:
        lock = os.readlink(f"/proc/self/fd/{svc._journal_fd}")
        zygote = svc._zygote
        assert zygote is not None
        for role, p in svc.procs.items():
            fds = [os.readlink(f"/proc/{p.pid}/fd/{f}") for f in os.listdir(f"/proc/{p.pid}/fd")]
            if role in ("coordinator", "reaper"):
                assert lock in fds, f"{role} holds the journal's lock"
            # the zygote's socket, its pidfds of the roles forked before this one
            theirs = [t for t in fds if t.startswith(("socket:", "anon_inode:[pidfd]"))]
            assert not theirs, f"{role} inherited {theirs}"
        zfds = os.listdir(f"/proc/{zygote.proc.pid}/fd")
        assert lock not in [os.readlink(f"/proc/{zygote.proc.pid}/fd/{f}") for f in zfds]


def test_embedding_process_killed_while_its_fork_holds_the_socket():
    """A process forked from the embedding process keeps a copy of the zygote's socket,
    so the zygote sees no end of file when the embedding process is SIGKILLed: it exits
    because its parent changed, and the service cleans up as in test_service's orphan
    tests, while the fork lives on."""
    code = textwrap.dedent("""
        import os, sys, time, shmwheel
        svc = shmwheel.TimerService(tasks={"boom": "shmwheel.examples.tasks:fail"}, capacity=1000,
                                    executors=1).start()
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        print(svc.name, pid, flush=True)
        time.sleep(120)
    """)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    fork = 0
    try:
        assert p.stdout is not None
        name, fork_s = p.stdout.readline().split()
        fork = int(fork_s)
        assert len(service_processes(name)) == 4, "zygote, coordinator, reaper, exec0"
        p.kill()
        p.wait()
        wait_for(lambda: not service_processes(name), timeout=10, what="service processes to exit")
        wait_for(lambda: not shm.service_files(name), timeout=10, what="segments unlinked")
        assert psutil.pid_exists(fork), "the fork still holds the socket"
    finally:
        p.kill()
        p.wait()
        if fork:
            with contextlib.suppress(ProcessLookupError):
                os.kill(fork, signal.SIGKILL)


def test_a_zygote_that_cannot_start_is_retried_not_fatal(svc, tmp_path, monkeypatch, caplog):
    """The zygote dies and a new one cannot start: the restart fails with an error logged
    and the monitor thread keeps trying (with the restart back-off); once a zygote can
    start again the executor is back and runs timers."""
    log = tmp_path / "log"
    monkeypatch.setattr(F, "CODE", "import sys; sys.exit(3)")
    first = svc._zygote
    assert first is not None
    first.proc.kill()
    first.proc.wait()
    with caplog.at_level(logging.ERROR, "shmwheel.service"):
        os.kill(svc.procs["exec0"].pid, signal.SIGKILL)
        wait_for(lambda: "exited with code 3" in caplog.text, what="a failed restart logged")
    assert svc._monitor is not None and svc._monitor.is_alive()
    monkeypatch.undo()
    with svc.client() as c:
        c.schedule("record", {"path": str(log), "tag": "a"}, delay_ms=1)
        wait_for(lambda: svc.stats()["completed"] == 1, timeout=30, what="a run after")
    assert all(p.poll() is None for p in svc.procs.values())
    assert_once_never_early(read_log(log), ["a"])


def test_descriptors_above_1023_in_the_embedding_process(tmp_path):
    """An embedding server with more than 1024 descriptors open: the supervisor's waits on
    the zygote's socket and the roles' pidfds work there (poll, not select)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard limit on descriptors is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    held = []
    try:
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
        with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
            assert svc._zygote is not None and svc._zygote.sock.fileno() > 1023
            old = svc.procs["exec0"]
            os.kill(old.pid, signal.SIGKILL)
            assert old.wait(10) == -signal.SIGKILL
            log = tmp_path / "log"
            with svc.client() as c:
                c.schedule("record", {"path": str(log), "tag": "a"}, delay_ms=1)
                wait_for(lambda: svc.stats()["completed"] == 1, what="a run")
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
