"""Tasks of tests/test_tracebacks.py that raise, each in its own way."""

from __future__ import annotations

import time
from typing import Any

import shmwheel


class Boom(Exception):
    """A task's own exception type (recorded as tests.error_tasks.Boom)."""


def boom(payload: Any) -> None:
    """Raise Boom with the payload in the message, two frames deep."""
    _deeper(payload)


def _deeper(payload: Any) -> None:
    raise Boom(f"boom {payload}")


def run_fails(payload: Any) -> None:
    """A repeating timer's task: sleep `payload` ms, then raise naming its run."""
    time.sleep(float(payload) / 1000)
    raise ValueError(f"failed in run {shmwheel.context().attempt}")


def huge(payload: Any) -> None:
    """Raise from deep recursion with a long, non-ASCII message (cut to the limits)."""

    def down(n: int) -> None:
        if n == 0:
            raise RuntimeError("é" * 3000 + " end")
        down(n - 1)

    down(int(payload))


class BadStr(Exception):
    def __str__(self) -> str:
        raise TypeError("no str for you")


def bad_str(payload: Any) -> None:
    """Raise an exception whose str() raises."""
    raise BadStr()
