"""The task of the whole-service crash loop (bench/journal_crash_harness.py).

Executors import it as ``journal_crash_tasks:mark``: the driver process has bench/ on its
sys.path, and the supervisor hands that path to its children as PYTHONPATH. The log path
and the cycle come from the environment the executors inherit from their driver.
"""

from __future__ import annotations

import os
import time
from typing import Any

import shmwheel


def mark(payload: Any) -> None:
    """Append one line to the executions log ($JC_EXEC_LOG), with a single O_APPEND write
    made first thing, then sleep payload[1] ms (a task still running at the kill):

        E id attempt start_ns deadline_ms fired_ms cycle pid tag

    `payload` is [tag, sleep_ms]; start_ns is time.monotonic_ns() as the task starts."""
    start_ns = time.monotonic_ns()
    ctx = shmwheel.context()
    tag, sleep_ms = payload[0], payload[1]
    line = (
        f"E {ctx.id} {ctx.attempt} {start_ns} {ctx.deadline_ms} {ctx.fired_ms} "
        f"{os.environ.get('JC_CYCLE', '?')} {os.getpid()} {tag}\n"
    )
    fd = os.open(os.environ["JC_EXEC_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
