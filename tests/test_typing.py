"""TimerService's options are typed: a misspelt one is an error to a type checker (mypy,
run on a small user program), as it is a TypeError at the call (test_service)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import shmwheel

pytestmark = pytest.mark.system  # builds / type-checks: pytest -m 'not system' skips it

BAD = textwrap.dedent("""\
    import shmwheel
    from shmwheel import TimerService

    svc = TimerService(tasks={"noop": "shmwheel.examples.tasks:noop"}, capacity=10, colour="red")
    other = shmwheel.TimerService(tasks={"noop": "shmwheel.examples.tasks:noop"}, capcity=10)
""")

GOOD = textwrap.dedent("""\
    import shmwheel
    from shmwheel import Client, TimerHandle, TimerService


    def make(journal: str | None = None) -> TimerService:
        return TimerService("typed", tasks={"noop": "shmwheel.examples.tasks:noop"}, capacity=10,
                            executors=1, tick_ms=1, wheel_size=64, journal=journal,
                            max_clients=4, ring_capacity=1024, dispatch_capacity=1024,
                            arena_bytes=1 << 20, journal_fsync="always", journal_fsync_ms=10,
                            journal_segment_bytes=1 << 20, journal_keep_hours=1.0)


    def use(svc: TimerService) -> int:
        with svc.client() as c:
            client: Client = c
            h: TimerHandle = client.schedule("noop", None, delay_ms=5)
            return h.id


    svc = shmwheel.TimerService(tasks={"noop": "shmwheel.examples.tasks:noop"}, capacity=10)
""")


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict, run once on both programs: its error lines per file."""
    work = tmp_path_factory.mktemp("typing")
    (work / "bad.py").write_text(BAD)
    (work / "good.py").write_text(GOOD)
    env = dict(os.environ)
    # an editable install is found through an import hook mypy does not run: point it at
    # the package's directory (not when it lies in site-packages, which mypy finds itself)
    root = Path(shmwheel.__file__).resolve().parent.parent
    if "site-packages" not in root.parts:
        env["MYPYPATH"] = str(root)
    # run from the temporary directory, so that the project's [tool.mypy] does not apply
    # (the user's program is checked as a user would check it)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--cache-dir",
            str(work / ".mypy_cache"),
            "--no-error-summary",
            "bad.py",
            "good.py",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 1), f"mypy did not run: {r.returncode}\n{r.stdout}{r.stderr}"
    out: dict[str, list[str]] = {"bad.py": [], "good.py": []}
    for line in r.stdout.splitlines():
        name = line.split(":", 1)[0]
        if ": error:" in line:
            out.setdefault(name, []).append(line)
    return out


def test_a_misspelt_timerservice_option_fails_mypy(mypy_output):
    errors = mypy_output["bad.py"]
    assert len(errors) == 2, errors
    assert 'Unexpected keyword argument "colour" for "TimerService"' in errors[0], errors
    assert 'Unexpected keyword argument "capcity" for "TimerService"' in errors[1], errors
    assert all("[call-arg]" in e for e in errors), errors


def test_a_correct_timerservice_call_passes_mypy_strict(mypy_output):
    assert mypy_output["good.py"] == []
    assert set(mypy_output) == {"bad.py", "good.py"}, "errors reported in other files"
