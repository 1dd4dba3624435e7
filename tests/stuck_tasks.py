"""Tasks of tests/test_stuck.py: `hang` runs until the file $DESC_RUNS/release exists
(60 s at most), marking its run as descendant_tasks' tasks do; `jitter` runs `payload` ms."""

from __future__ import annotations

import os
import time
from typing import Any

from descendant_tasks import _mark


def hang(payload: Any) -> None:
    _mark("hang")
    release = os.path.join(os.environ["DESC_RUNS"], "release")
    end = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < end:
        time.sleep(0.005)


def jitter(payload: Any) -> None:
    _mark("jitter")
    if payload:
        time.sleep(payload / 1000)
