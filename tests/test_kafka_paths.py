"""The Kafka layer has two paths, one interface (msgpack's convention): the native core
(shmwheel/native/inproc_*.c), the default, and the Python path (shmwheel/kafka/_pure.py),
chosen with SHMWHEEL_PUREPYTHON=1 at import. This suite runs the Kafka tests on the
default path in process, and here again on the other path in a child pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import shmwheel._native as N
from shmwheel.kafka import _backend
from shmwheel.kafka import _pure as P

HERE = Path(__file__).resolve().parent
KAFKA_TESTS = ["test_timer.py", "test_purgatory.py", "test_kafka_threads.py", "test_kafka_refs.py"]


def _child_env(pure: bool) -> dict[str, str]:
    env = dict(os.environ)
    if pure:
        env[_backend.ENV] = "1"
    else:
        env.pop(_backend.ENV, None)
    return env


def test_the_environment_picks_the_path():
    code = (
        "from shmwheel.kafka._backend import BACKEND; from shmwheel import TimerTask; "
        "print(BACKEND, TimerTask.__mro__[1].__module__)"
    )
    for pure, want in ((True, "python shmwheel.kafka._pure"), (False, "native shmwheel._native")):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=_child_env(pure),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert out.stdout.split() == want.split()


def test_both_paths_offer_one_interface():
    for native, pure in (
        (N.Task, P.Task),
        (N.Operation, P.Operation),
        (N.TaskWheel, P.TaskWheel),
        (N.Watchers, P.Watchers),
    ):
        public = {k for k in dir(native) if not k.startswith("__")}
        missing = public - set(dir(pure))
        assert not missing, f"{pure.__name__} lacks {sorted(missing)}"


def test_the_kafka_tests_pass_on_the_other_path():
    other = not _backend.PURE
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *(str(HERE / t) for t in KAFKA_TESTS),
        ],
        env=_child_env(other),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=HERE.parent,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
