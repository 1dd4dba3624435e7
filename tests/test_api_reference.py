"""The API reference builds from the docstrings (docs/reference.md gives the command), and
a reference that cannot be resolved (an annotation pdoc cannot evaluate, a broken link)
fails the build: warnings are errors."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.system  # runs pdoc
def test_api_reference_builds_without_warnings(tmp_path):
    out = tmp_path / "reference"
    r = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "pdoc",
            "-o",
            str(out),
            "shmwheel",
            "shmwheel.journal",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    page = (out / "shmwheel.html").read_text()
    for name in (
        "TimerService",
        "Client",
        "TimerHandle",
        "connect",
        "context",
        "SystemTimer",
        "DelayedOperationPurgatory",
        "ShmwheelError",
    ):
        assert name in page, f"{name} is missing from the reference"
    assert (out / "shmwheel" / "journal.html").exists()


def test_every_public_name_has_a_docstring():
    import inspect

    import shmwheel

    missing = []
    for name in shmwheel.__all__:
        obj = getattr(shmwheel, name)
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj):
            missing += [
                f"{name}.{k}"
                for k, f in vars(obj).items()
                if not k.startswith("_") and callable(f) and not inspect.getdoc(f)
            ]
    assert not missing, f"public names without a docstring: {missing}"
