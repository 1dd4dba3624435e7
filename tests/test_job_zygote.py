"""Job workers are forked by a zygote (service/forkserver.py, role ``job``), never by
multiprocessing: an Executor's own pool has a light zygote of its own (no numpy, no
service role), a service's pool uses the service's zygote; a worker never runs the
embedding program's main module unless a job's function lives there (then as
``__shmwheel_main__``, its main guard holding), so ``python -`` and a script without a
main guard can use an Executor; nothing of a pool outlives its owner, shut down or
SIGKILLed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import job_fns
import psutil
import pytest
from helpers import alive, pool_processes, wait_for

import shmwheel
from shmwheel import Executor, TaskError

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def run_python(args: list[str], stdin: str | None = None, cwd: Path = ROOT) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    p = subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=env,
        cwd=cwd, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_program_read_from_stdin_runs_jobs(tmp_path):
    """``python -``: nothing to re-import; an importable function runs, one defined in the
    program fails that job alone with a clear error."""
    program = textwrap.dedent("""
        import shmwheel
        from shmwheel.examples.jobs import square

        def local(x):
            return x

        with shmwheel.Executor(2) as ex:
            print("result", ex.submit(square, 7).result(timeout=60))
            try:
                ex.submit(local, 1).result(timeout=60)
            except shmwheel.TaskError as e:
                print("local", "has no file" in str(e))
            print("again", ex.submit(square, 3).result(timeout=60))
    """)
    out = run_python(["-"], stdin=program, cwd=tmp_path).split("\n")
    assert out[:3] == ["result 49", "local True", "again 9"], out


def test_an_executor_loads_numpy_only_with_its_first_timer(tmp_path):
    """The program that starts an Executor does not import numpy (nor asyncio) until its
    pool needs its wheel: the first back-off or hard stop; then the wheel works."""
    program = textwrap.dedent(f"""
        import sys
        import shmwheel
        from shmwheel.examples.jobs import square

        print("import", "numpy" in sys.modules, "asyncio" in sys.modules)
        with shmwheel.Executor(2, time_limit=30) as ex:
            print("jobs", ex.submit(square, 7).result(timeout=60), "numpy" in sys.modules)
            import job_fns  # (the tests' helpers import numpy: the wheel's module tells)

            wheel = "shmwheel.wheel.core"
            print("wheel", wheel in sys.modules)
            retry = shmwheel.Retry(2, backoff=0.01)
            job = ex.submit(job_fns.attempt_log, {str(tmp_path / "log")!r}, 1, retry=retry)
            print("retried", job.result(timeout=60), job.attempts, wheel in sys.modules)
    """)
    out = run_python(["-"], stdin=program, cwd=tmp_path).split("\n")
    assert out[:4] == ["import False False", "jobs 49 False", "wheel False", "retried 2 2 True"], (
        out
    )


def test_a_script_without_a_main_guard_runs_jobs_and_its_top_level_runs_once(tmp_path):
    marks = tmp_path / "marks"
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(f"""
        import shmwheel
        from shmwheel.examples.jobs import square

        def local(x):
            return x

        with open({str(marks)!r}, "a") as f:
            f.write("top level\\n")
        with shmwheel.Executor(2) as ex:
            print("result", ex.submit(square, 5).result(timeout=60))
            try:  # loading this script in a worker would start a pool there: refused
                ex.submit(local, 1).result(timeout=60)
            except shmwheel.TaskError as e:
                print("local", "guard it with" in str(e))
    """)
    )
    out = run_python([str(script)], cwd=tmp_path).split("\n")
    assert out[:2] == ["result 25", "local True"], out
    # the refused load ran the top level once more in a worker, as __shmwheel_main__,
    # and stopped at its Executor; the embedding program's own run is the other line
    assert marks.read_text().splitlines() == ["top level", "top level"]


def test_a_guarded_scripts_own_functions_and_classes_run_as_jobs(tmp_path):
    marks = tmp_path / "marks"
    script = tmp_path / "guarded.py"
    script.write_text(
        textwrap.dedent(f"""
        import dataclasses
        import shmwheel

        @dataclasses.dataclass
        class Point:
            x: int

        def twice(p):
            return Point(p.x * 2)

        if __name__ == "__main__":
            with open({str(marks)!r}, "a") as f:
                f.write("main\\n")
            with shmwheel.Executor(1) as ex:
                print(ex.submit(twice, Point(21)).result(timeout=60))
    """)
    )
    out = run_python([str(script)], cwd=tmp_path)
    assert out.splitlines() == ["Point(x=42)"]
    assert marks.read_text().splitlines() == ["main"], "the guarded block ran only once"


def test_a_function_of_a_module_run_with_dash_m_runs_as_a_job(tmp_path):
    """``python -m NAME``: the worker imports NAME by name (its guard holds there too)."""
    marks = tmp_path / "marks"
    (tmp_path / "zj_dash_m.py").write_text(
        textwrap.dedent(f"""
        import shmwheel

        def triple(x):
            return 3 * x

        if __name__ == "__main__":
            with open({str(marks)!r}, "a") as f:
                f.write("main\\n")
            with shmwheel.Executor(1) as ex:
                print(ex.submit(triple, 5).result(timeout=60))
    """)
    )
    assert run_python(["-m", "zj_dash_m"], cwd=tmp_path).splitlines() == ["15"]
    assert marks.read_text().splitlines() == ["main"]


def test_an_executors_own_zygote_is_light_and_forks_every_worker():
    with Executor(2) as ex:
        zygote = ex._pool._mgr._zygote
        assert zygote is not None
        z = psutil.Process(zygote.proc.pid)
        assert z.ppid() == os.getpid() and z.name() == "shmwheel-zygote"
        for w in ex._pool._mgr.workers:
            assert psutil.Process(w.proc.pid).ppid() == z.pid
        maps = Path(f"/proc/{z.pid}/maps").read_text()
        assert "numpy" not in maps, "the jobs-only zygote imports no numpy"
        assert ex.submit(job_fns.add, 2, 3).result(timeout=30) == 5
        # a worker's environment is the embedding process's, not the zygote's
        for var in ("OPENBLAS_NUM_THREADS", "PYTHONPATH"):
            assert ex.submit(os.getenv, var).result(timeout=30) == os.getenv(var), var
        pids = pool_processes(ex)
    assert len(pids) == 3
    assert not alive(pids)


def test_a_killed_zygote_is_replaced_when_a_worker_is(tmp_path):
    with Executor(1) as ex:
        mgr = ex._pool._mgr
        old = mgr._zygote
        os.kill(old.proc.pid, signal.SIGKILL)
        old.proc.wait()
        worker = mgr.workers[0].proc.pid
        with pytest.raises(TaskError, match=r"SIGKILL|exit code"):
            job = ex.submit(job_fns.sleep, 30.0)
            wait_for(lambda: mgr.workers[0].running() == job.id, what="the job to run")
            os.kill(worker, signal.SIGKILL)
            job.result(timeout=30)
        assert ex.submit(job_fns.pid).result(timeout=30) != worker
        assert mgr._zygote is not old and not mgr._zygote.dead


def test_a_services_job_workers_are_forked_by_its_zygote_and_end_with_it():
    svc = shmwheel.TimerService(capacity=1000, executors=1, job_workers=2).start()
    try:
        zygote = svc._zygote.proc.pid
        workers = {w.proc.pid for w in svc.job_pool()._mgr.workers}
        assert {psutil.Process(p).ppid() for p in workers} == {zygote}
        assert svc.job_pool()._mgr._zygote is None, "no zygote of the pool's own"
        with svc.executor() as ex:
            assert ex.submit(job_fns.add, 1, 2).result(timeout=30) == 3
    finally:
        svc.stop()
    assert not alive(workers | {zygote})


@pytest.mark.parametrize("kind", ["executor", "service"])
def test_nothing_of_a_pool_outlives_its_sigkilled_owner(kind):
    make = (
        "shmwheel.Executor(2)._pool._mgr"
        if kind == "executor"
        else "shmwheel.TimerService(capacity=1000, executors=1, job_workers=2).start()"
        ".job_pool()._mgr"
    )
    code = textwrap.dedent(f"""
        import sys, time, shmwheel
        from shmwheel.examples.jobs import hang
        mgr = {make}
        print(*[w.proc.pid for w in mgr.workers], flush=True)
        time.sleep(120)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    pids: set[int] = set()
    try:
        assert p.stdout is not None
        pids = {int(x) for x in p.stdout.readline().split()}
        assert len(pids) == 2
        zygotes = {psutil.Process(x).ppid() for x in pids}
        assert len(zygotes) == 1 and zygotes != {p.pid}
        pids |= zygotes
        p.kill()
        p.wait()
        wait_for(lambda: not alive(pids), timeout=10, what="the zygote and job workers to exit")
    finally:
        p.kill()
        p.wait()
        for pid in alive(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
