"""What a task leaves behind, and a group's SIGTERM, never hold or hurt the service
(docs/operating.md, "Stopping"): a task that starts a multiprocessing child or forks and
returns in the child costs no fast stop, no restart on the journal and no second run; a
SIGTERM to a ``shmwheel run``'s whole process group is a clean stop, after which a restart
on the journal runs each accepted timer exactly once, none early."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
from descendant_tasks import TASKS, assert_each_ran_once_none_early, runs
from helpers import alive, stop_all, wait_for

from shmwheel import TimerService, connect

HERE = Path(__file__).resolve().parent


def kill_all(pids: set[int]) -> None:
    for pid in alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def child_pids(directory: Path, kind: str | None = None) -> set[int]:
    return {
        int(p.name.split(".")[1])
        for p in directory.glob("child.*")
        if kind is None or p.read_text().strip() == kind
    }


def test_children_and_forks_of_tasks_do_not_hold_the_service(tmp_path, monkeypatch):
    """Two tasks start a multiprocessing child that sleeps 30 s, two fork and return in
    the child, 200 plain timers run around them. The forked copies end at once (they
    never serve a ring); stop() ends every service process in well under its 10 s; the
    multiprocessing children, the tasks' business, live on but hold no lock: a restart on
    the journal succeeds while they run; nothing ran twice."""
    marks = tmp_path / "runs"
    marks.mkdir()
    monkeypatch.setenv("DESC_RUNS", str(marks))
    jdir = tmp_path / "journal"
    svc = TimerService(tasks=TASKS, capacity=4096, executors=2, journal=jdir)
    svc2 = None
    try:
        svc.start()
        with svc.client() as c:
            ids = [c.schedule("spawn", None, delay_ms=20).id for _ in range(2)]
            ids += [c.schedule("fork", None, delay_ms=20).id for _ in range(2)]
            ids += [c.schedule("record", 1, delay_ms=50 + 10 * i).id for i in range(200)]
        wait_for(lambda: len(child_pids(marks)) >= 4, what="the tasks' children")
        service = {p.pid for p in svc.procs.values()}
        # a forked copy of an executor ends as soon as its task returns in it
        forks = child_pids(marks, "fork")
        wait_for(lambda: not alive(forks), timeout=5, what="the forked copies to end")
        t0 = time.monotonic()
        svc.stop()
        took = time.monotonic() - t0
        # a correctness bound, not a speed figure: the old stop waited out its 10 s
        assert took < 5, f"stop() took {took:.1f} s"
        assert not alive(service), "service processes outlived stop()"
        children = child_pids(marks, "mp")
        assert set(alive(children)) == children, "the tasks' own children were ended"
        svc2 = TimerService(tasks=TASKS, capacity=4096, executors=2, journal=jdir).start()
        wait_for(lambda: len({r[0] for r in runs(marks)}) >= len(ids), timeout=30, what="every run")
        svc2.stop()
        assert_each_ran_once_none_early(marks, ids)
    finally:
        stop_all(svc, svc2)
        kill_all(child_pids(marks))


EMBEDDER = textwrap.dedent("""
    import os, sys, time
    import shmwheel

    if __name__ == "__main__":
        tasks = {"record": "descendant_tasks:record"}
        svc = shmwheel.TimerService(tasks=tasks, capacity=64, executors=1,
                                    journal=sys.argv[1]).start()
        pid = os.fork()  # e.g. a multiprocessing worker of the embedding program
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        print(pid, flush=True)
        svc.stop()
        try:
            shmwheel.TimerService(tasks=tasks, capacity=64, executors=1,
                                  journal=sys.argv[1]).start().stop()
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        print("OK", flush=True)
""")


def test_a_child_the_embedding_process_forks_does_not_hold_the_journal(tmp_path):
    """The supervisor's copy of the journal's lock is closed in every child it forks."""
    script = tmp_path / "embed.py"
    script.write_text(EMBEDDER)
    env = dict(os.environ, DESC_RUNS=str(tmp_path), PYTHONPATH=str(HERE))
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "j")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.endswith("OK\n"), out.stderr[-3000:]


def test_a_group_sigterm_of_shmwheel_run_is_a_clean_stop(tmp_path, monkeypatch):
    """`kill -TERM -PGID` of a `shmwheel run` (systemd's KillMode, `timeout`) with runs in
    flight: it exits 0, no process is left, and a restart on the journal runs each
    accepted timer exactly once (none of those in flight a second time), none early."""
    marks = tmp_path / "runs"
    marks.mkdir()
    monkeypatch.setenv("DESC_RUNS", str(marks))  # for the restart in this process
    jdir = tmp_path / "journal"
    name = f"s{os.getpid()}-term{os.urandom(3).hex()}"
    env = dict(os.environ, DESC_RUNS=str(marks))
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "shmwheel", "run", "--name", name, "--executors", "2"]
    cmd += ["--capacity", "4096", "--journal", str(jdir), "--tasks"]
    cmd += [f"{k}={v}" for k, v in TASKS.items()]
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    seen: set[int] = set()
    svc = None
    try:
        c = None

        def connected() -> bool:
            nonlocal c
            try:
                c = connect(name)
            except Exception:
                return False
            return True

        wait_for(connected, timeout=60, what="the service")
        assert c is not None
        with c:
            # runs of 300 ms, due over 0.6 s: several are in flight at the SIGTERM
            ids = [c.schedule("record", 300, delay_ms=20 + 30 * i).id for i in range(20)]
            ids += [c.schedule("record", 0, delay_ms=3000 + i).id for i in range(20)]
        wait_for(lambda: len(runs(marks)) >= 3, what="runs in flight")
        seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()[-3000:]
        wait_for(lambda: not alive(seen), timeout=5, what="every process to end")
        svc = TimerService(tasks=TASKS, capacity=4096, executors=2, journal=jdir).start()
        wait_for(lambda: len({r[0] for r in runs(marks)}) >= len(ids), timeout=30, what="every run")
        svc.stop()
        assert_each_ran_once_none_early(marks, ids)
        # and none was killed mid-task: each executor finished the run in hand
        started = {p.name.split(".", 1)[1].rsplit(".", 1)[0] for p in marks.glob("run.*")}
        ended = {p.name.split(".", 1)[1] for p in marks.glob("done.*")}
        assert started == ended, f"runs that never ended: {sorted(started - ended)[:5]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if svc is not None:
            svc.stop()
        kill_all(seen)


def test_a_sigterm_to_an_idle_service_process_interrupts_nothing():
    """SIGTERM while a coordinator, reaper or executor sleeps on its semaphore: the wait
    ends as a wake-up, the process runs on (posix_ipc raised SignalError there, and the
    reaper died with its journal's last records unwritten)."""
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
        pids = {role: p.pid for role, p in svc.procs.items()}
        for _ in range(5):
            for pid in pids.values():
                os.kill(pid, signal.SIGTERM)
            time.sleep(0.05)  # let each go back to sleep on its semaphore
        assert svc.restarts == {}, svc.restarts
        assert all(svc.procs[role].pid == pid for role, pid in pids.items())
        assert all(p.poll() is None for p in svc.procs.values())
