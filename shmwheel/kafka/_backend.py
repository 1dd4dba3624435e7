"""The core the Kafka layer runs on: the native types (shmwheel/native/inproc_*.c). The
Kafka modules take them from here and only here, so that the test suite can put its
oracle (tests/kafka_oracle.py, the same interface in Python) in their place for a run
(tests/kafka_oracle_plugin.py) and the Kafka tests check both against one set of tests.
"""

from __future__ import annotations

from .._native import Operation, Task, TaskWheel, Watchers

#: which implementation this process runs the Kafka layer on ("native"; the test
#: suite's oracle plugin sets "oracle")
BACKEND = "native"

__all__ = ["BACKEND", "Operation", "Task", "TaskWheel", "Watchers"]
