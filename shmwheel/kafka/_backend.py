"""Which core the Kafka layer runs on: the native one (shmwheel/native/inproc_*.c), or
the Python path (``_pure``) when the environment says ``SHMWHEEL_PUREPYTHON=1`` at import
(msgpack's MSGPACK_PUREPYTHON convention). Both have one interface and one set of tests.
"""

from __future__ import annotations

import os

ENV = "SHMWHEEL_PUREPYTHON"
PURE = os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no", "off")

if not PURE:  # the native types are what the type checker sees
    from .._native import Operation, Task, TaskWheel, Watchers
else:
    from ._pure import Operation, Task, TaskWheel, Watchers  # type: ignore[assignment]

#: "native" or "python": the path this process runs the Kafka layer on
BACKEND = "python" if PURE else "native"

__all__ = ["BACKEND", "ENV", "PURE", "Operation", "Task", "TaskWheel", "Watchers"]
