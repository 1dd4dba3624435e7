"""fork() inside the service's with block: the child's exit must not stop its parent's
service, and a Client the child inherited must refuse to be used. Run in a subprocess, so
that pytest itself never forks."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
from helpers import service_processes, settle, shm_files

SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path

    import shmwheel
    from shmwheel import ShmwheelError


    def noop(payload):
        pass


    def wait_completed(svc, n):
        give_up = time.monotonic() + 30
        while (st := svc.stats())["completed"] + st["task_errors"] < n:
            assert time.monotonic() < give_up, f"timed out: {st}"
            time.sleep(0.01)
        return st


    if __name__ == "__main__":
        name = sys.argv[1]
        seg = Path("/dev/shm") / f"shmwheel.{name}"
        child = False
        with shmwheel.TimerService(name, tasks={"noop": noop}, capacity=1000,
                                   executors=1) as svc, svc.client() as c:
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                child, refused = True, []
                for use in (lambda: c.schedule("noop", None, delay_ms=1),
                            lambda: c.cancel(12345)):
                    try:
                        use()
                    except ShmwheelError as e:
                        refused.append("across fork" in str(e))
                # the child now leaves both with blocks normally
            else:
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                assert code == 0, f"the child exited with {code}"
                assert seg.exists(), "the child's exit unlinked the segment"
                st = svc.stats()
                assert all(p["alive"] for p in st["processes"].values()), st["processes"]
                assert st["clients"] == 1, "the parent's client is still the only one"
                c.schedule("noop", None, delay_ms=5)
                st = wait_completed(svc, 1)
                assert st["completed"] == 1 and st["task_errors"] == 0, st
                assert seg.exists()
        if child:
            ok = refused == [True, True] and seg.exists()
            os._exit(0 if ok else 3)
        assert not seg.exists(), "the owner's exit unlinks the segment"
        print("OK", flush=True)
""")


def _leftovers(name: str) -> tuple[list[psutil.Process], list[str]]:
    return service_processes(name), sorted(shm_files(name))


def test_forked_child_leaving_the_with_block_does_not_stop_the_service(tmp_path):
    script = tmp_path / "forks.py"
    script.write_text(SCRIPT)
    name = f"s{os.getpid()}-fork{secrets.token_hex(3)}"
    try:
        out = subprocess.run(
            [sys.executable, str(script), name],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(tmp_path),
            check=False,
        )
        assert out.returncode == 0 and out.stdout == "OK\n", (
            f"exit {out.returncode}\n{out.stdout}\n{out.stderr[-5000:]}"
        )
        settle(lambda: not any(_leftovers(name)), 5, pause=0.05)
        procs, files = _leftovers(name)
        assert not procs, f"service processes still alive: {procs}"
        assert not files, f"left in /dev/shm: {files}"
    finally:
        procs, files = _leftovers(name)
        for p in procs:
            p.kill()
        for f in files:
            (Path("/dev/shm") / f).unlink(missing_ok=True)
