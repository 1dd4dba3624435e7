"""What many test modules share: bounded waits on a condition (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(pred: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll `pred` every 5 ms until it is true; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)
