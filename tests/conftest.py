"""Shared test set-up: the import path, and the autouse check that every test leaves no
service process and nothing in /dev/shm behind."""

import fcntl
import logging
import os
import sys
from pathlib import Path

import pytest
from helpers import service_processes, settle, shm_files

# the repository's root (workers/, the example programs) is importable here and, through
# the path the supervisor hands its children, in executors, however pytest was started
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# the suite never writes the audit's JVM class archive to the user's cache, and every run
# starts its JVMs alike (test_jvm_archive.py turns it on in a directory of its own)
os.environ["SHMWHEEL_JVM_ARCHIVE"] = "off"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "exclusive: runs while no other xdist worker runs a test (it plants or lists what "
        "every service's start sweeps or reads: stale segments, the whole of /dev/shm)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that starts Spark (uses the ``spark`` fixture) is a ``system`` test."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.system)


_LOCK_FD: list[int] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test, with the fixtures its setup starts (a module's service too), holds a
    file lock shared by the run's xdist workers: shared for most tests, exclusive for
    those marked ``exclusive`` (a service another worker starts meanwhile would sweep the
    stale segment such a test planted). Without xdist only this process takes it."""
    if not _LOCK_FD:
        root = item.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        if os.environ.get("PYTEST_XDIST_WORKER"):
            root = root.parent  # the run's directory, shared by its workers
        _LOCK_FD.append(os.open(root / "shmwheel-tests.lock", os.O_RDWR | os.O_CREAT, 0o600))
    fd = _LOCK_FD[0]
    fcntl.flock(fd, fcntl.LOCK_EX if item.get_closest_marker("exclusive") else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    _check_nothing_left()


def _check_nothing_left() -> None:
    settle(lambda: not (service_processes() or shm_files()), 5, pause=0.05)
    left = service_processes()
    for p in left:
        p.kill()
    assert not left, f"service processes still alive: {left}"
    assert not shm_files(), "segments or semaphores left in /dev/shm"


@pytest.fixture
def cli(capsys):
    """shmwheel's command line, main(), in this process: call(*args) -> (exit code,
    stdout, stderr), with the logging configuration it changes restored."""
    from shmwheel.cli import main

    root = logging.getLogger()
    saved = root.handlers[:], root.level

    def call(*args: str) -> tuple[int, str, str]:
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        finally:
            root.handlers[:], root.level = saved[0], saved[1]
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every pipeline test of the run (made on first use:
    tests that need no Spark never start a JVM)."""
    from shmwheel.pipeline.run.session import spark_session

    s = spark_session(master="local[2]", shuffle_partitions=2, app_name="shmwheel-tests")
    yield s
    s.stop()
