"""Shared test set-up: the import path, and the autouse check that every test leaves no
service process and nothing in /dev/shm behind."""

import fcntl
import logging
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

# the service's sample tasks (workers.tasks) must be importable here and, through the
# path the supervisor hands its children, in executors, however pytest was started
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# the suite never writes the audit's JVM class archive to the user's cache, and every run
# starts its JVMs alike (test_jvm_archive.py turns it on in a directory of its own)
os.environ["SHMWHEEL_JVM_ARCHIVE"] = "off"

# services started in this process are named "s<pid>-<hex>"; others (a bench running
# beside the tests) are not this suite's business
MINE = f"s{os.getpid()}-"


# services a module-scoped fixture keeps across its tests (module_service): the check
# after each test leaves their processes and segments alone until the fixture ends
KEPT: set[str] = set()


def service_processes(prefix: str = MINE) -> list[psutil.Process]:
    """Live service processes whose service name starts with `prefix` (less KEPT ones)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any("shmwheel.service.processes.main" in a for a in cmd[:3]) and any(
            a.startswith(prefix) and a not in KEPT for a in cmd[3:]
        ):
            found.append(p)
    return found


def shm_files(prefix: str = MINE) -> set[str]:
    return {
        p.name
        for p in Path("/dev/shm").iterdir()
        if "shmwheel." + prefix in p.name and not any(f"shmwheel.{k}" in p.name for k in KEPT)
    }


def module_service(svc):
    """A generator for a module-scoped fixture: `svc` started, kept across the module's
    tests, stopped at its end (then the usual check applies to it)."""
    with svc:
        KEPT.add(svc.name)
        try:
            yield svc
        finally:
            KEPT.discard(svc.name)


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
    deadline = time.monotonic() + 5
    while (service_processes() or shm_files()) and time.monotonic() < deadline:
        time.sleep(0.05)
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
    from shmwheel.pipeline.session import spark_session

    s = spark_session(master="local[2]", shuffle_partitions=2, app_name="shmwheel-tests")
    yield s
    s.stop()
