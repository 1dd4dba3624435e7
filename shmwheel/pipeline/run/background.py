"""Work the audit's driver does in a thread while it waits on something else (the JVM's
start, a Spark job): the driver's Python is idle then, blocked on a socket.

Such a thread may run at the lowest priority (``idle=True``: Linux's nice 19 for that
thread alone): then it takes only CPU that Spark's Python workers and the JVM leave, and
never slows the stage it overlaps (on two cores, the report's plots drawn at normal
priority made the per-timer stage 1-1.5 s slower). Only for work the driver's main
thread does not wait on until the stage is over: a starved thread holding the GIL (or an
import's lock) holds the main thread up with it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def in_thread(name: str, fn: Callable[..., T], *args: Any, idle: bool = False) -> Future[T]:
    """`fn(*args)` in a daemon thread named `name` (it never holds the process up), at the
    lowest priority if `idle`: its result, or its exception, from ``result()``."""
    done: Future[T] = Future()

    def run() -> None:
        if idle:
            lowest_priority()
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits
            done.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done


def lowest_priority() -> None:
    """Nice 19 for the calling thread only (Linux: a thread's id is a pid to
    setpriority); elsewhere, or if refused, nothing changes."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
