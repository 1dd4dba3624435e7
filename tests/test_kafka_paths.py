"""The Kafka layer's native core (shmwheel/native/inproc_*.c) against its oracle
(tests/kafka_oracle.py, the same interface and semantics in Python over ``WheelCore``):
one interface, and the Kafka tests pass on both. This suite runs them on the native core
in process, and here again on the oracle in a child pytest (``-p kafka_oracle_plugin``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kafka_oracle as oracle
import pytest

import shmwheel._native as N

HERE = Path(__file__).resolve().parent
KAFKA_TESTS = ["test_timer.py", "test_purgatory.py", "test_kafka_threads.py", "test_kafka_refs.py"]
PLUGIN = ["-p", "kafka_oracle_plugin"]


def _child(args: list[str], code: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "pytest", *args]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=600, cwd=HERE.parent, env=env, check=False
    )


def test_the_plugin_puts_the_oracle_under_the_kafka_layer():
    code = (
        "import kafka_oracle_plugin; "
        "from shmwheel.kafka._backend import BACKEND; from shmwheel import TimerTask; "
        "print(BACKEND, TimerTask.__mro__[1].__module__)"
    )
    assert _child([], code).stdout.split() == ["oracle", "kafka_oracle"]
    plain = "from shmwheel.kafka._backend import BACKEND; from shmwheel import TimerTask; "
    plain += "print(BACKEND, TimerTask.__mro__[1].__module__)"
    assert _child([], plain).stdout.split() == ["native", "shmwheel._native"]


def test_both_offer_one_interface():
    for native, python in (
        (N.Task, oracle.Task),
        (N.Operation, oracle.Operation),
        (N.TaskWheel, oracle.TaskWheel),
        (N.Watchers, oracle.Watchers),
    ):
        public = {k for k in dir(native) if not k.startswith("__")}
        missing = public - set(dir(python))
        assert not missing, f"{python.__name__} lacks {sorted(missing)}"


@pytest.mark.system  # runs the kafka test modules again in a child pytest
def test_the_kafka_tests_pass_on_the_oracle():
    r = _child(["-q", "-p", "no:cacheprovider", *PLUGIN, *(str(HERE / t) for t in KAFKA_TESTS)])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
