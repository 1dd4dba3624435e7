"""The built wheel works installed read-only and run by a user who cannot write it."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from helpers import nobody_python

pytestmark = pytest.mark.system  # builds / type-checks: pytest -m 'not system' skips it

ROOT = Path(__file__).resolve().parent.parent
SHM = Path("/dev/shm")

# run from a directory holding no shmwheel, so the import must come from site/; the task is
# a function of this script (executors load it by file path) that checks where shmwheel
# came from and who runs it
SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path

    import shmwheel

    SITE = Path(__file__).resolve().parent / "site"


    def check(uid):
        if not Path(shmwheel.__file__).resolve().is_relative_to(SITE):
            raise RuntimeError(f"the executor imported shmwheel from {shmwheel.__file__}")
        if os.geteuid() != uid:
            raise RuntimeError(f"the executor runs as uid {os.geteuid()}, not {uid}")
        if shmwheel.context().attempt != 1:
            raise RuntimeError("not the first run")


    if __name__ == "__main__":
        name = sys.argv[1]
        assert Path(shmwheel.__file__).resolve().is_relative_to(SITE), shmwheel.__file__
        with shmwheel.TimerService(name, tasks={"check": check}, capacity=1000,
                                   executors=1) as svc, svc.client() as c:
            c.schedule("check", os.geteuid(), delay_ms=20)
            give_up = time.monotonic() + 30
            while (st := svc.stats())["completed"] + st["task_errors"] < 1:
                assert time.monotonic() < give_up, f"the timer never ran: {st}"
                time.sleep(0.01)
            assert st["completed"] == 1 and st["task_errors"] == 0 and st["early"] == 0, st
        left = sorted(p.name for p in Path("/dev/shm").iterdir() if name in p.name)
        assert not left, f"left in /dev/shm: {left}"
        print("OK", shmwheel.__file__, os.geteuid(), flush=True)
""")


def _service_leftovers(name: str) -> tuple[list[psutil.Process], list[str]]:
    procs = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any("shmwheel.service.processes.main" in a for a in (p.info["cmdline"] or [])[:3])
        and name in (p.info["cmdline"] or [])
    ]
    return procs, sorted(p.name for p in SHM.iterdir() if "shmwheel." + name in p.name)


def test_install_read_only_as_another_user(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the wheel with")
    t0 = time.monotonic()
    # build from a copy of what the build reads, so the repository's build/ and egg-info
    # (which other builds use meanwhile) are not touched
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / f, src / f)
    shutil.copytree(
        ROOT / "shmwheel",
        src / "shmwheel",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.nbi", "*.nbc"),
    )
    pip = [sys.executable, "-m", "pip"]
    built = subprocess.run(
        pip + ["wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = list((tmp_path / "dist").glob("shmwheel-*.whl"))
    assert len(wheels) == 1, wheels
    t_built = time.monotonic()

    # a directory user nobody can enter (pytest's tmp_path sits in a 0700 directory)
    work = Path(tempfile.mkdtemp(prefix="shmwheel-install-"))
    name = f"s{os.getpid()}-inst{secrets.token_hex(3)}"
    site = work / "site"
    try:
        work.chmod(0o755)
        inst = subprocess.run(
            pip + ["install", "--no-deps", "--no-compile", "--target", str(site), str(wheels[0])],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert inst.returncode == 0, inst.stdout[-3000:] + inst.stderr[-3000:]
        assert next(site.glob("shmwheel/_native*.so"), None) is not None, "no native core"
        script = work / "app.py"
        script.write_text(SCRIPT)
        script.chmod(0o444)
        for d, _dirs, files in os.walk(site):  # chmod -R a-w
            for p in [d, *(os.path.join(d, f) for f in files)]:
                os.chmod(p, os.stat(p).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        work.chmod(0o555)

        deps = sysconfig.get_paths()["purelib"]  # numpy, msgpack, posix_ipc, psutil
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update(PYTHONPATH=os.pathsep.join([str(site), deps]), PYTHONNOUSERSITE="1")
        if os.geteuid() == 0:
            cmd, python = nobody_python(env)
            uid = 65534
        else:
            cmd, python, uid = [sys.executable], sys.executable, os.geteuid()
        t_run = time.monotonic()
        out = subprocess.run(
            cmd + [str(script), name],
            cwd=str(work),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        t_end = time.monotonic()
        print(
            f"\nbuild {t_built - t0:.1f} s, install {t_run - t_built:.1f} s, run "
            f"{t_end - t_run:.1f} s as uid {uid} with {python}: {out.stdout.strip()}"
        )
        procs, files = _service_leftovers(name)
        assert out.returncode == 0 and out.stdout.startswith("OK "), (
            f"exit {out.returncode}\n{out.stdout}\n{out.stderr[-5000:]}"
        )
        _, where, who = out.stdout.split()[:3]
        assert Path(where).is_relative_to(site) and int(who) == uid
        assert not procs, f"service processes still alive: {procs}"
        assert not files, f"left in /dev/shm: {files}"
        # an example program, from the installed package, in a directory of its own
        ex = subprocess.run(
            cmd
            + [
                "-m",
                "shmwheel.examples.producer",
                "--standalone",
                "--count",
                "300",
                "--cancel-fraction",
                "0.1",
            ],
            cwd=str(work),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ex.returncode == 0, f"exit {ex.returncode}\n{ex.stdout}\n{ex.stderr[-5000:]}"
        assert not list(site.rglob("__pycache__")), "nothing was written into the install"
    finally:
        for p in _service_leftovers(name)[0]:
            p.kill()
        for p in _service_leftovers(name)[1]:
            (SHM / p).unlink(missing_ok=True)
        for d, _dirs, _files in os.walk(work):  # give write permission back, then remove
            os.chmod(d, 0o755)
        shutil.rmtree(work)
