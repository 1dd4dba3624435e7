"""Tasks of tests/test_descendants.py: each run leaves a file in $DESC_RUNS named by the
timer's id and the running process, holding its deadline and the time it started (both
monotonic ms), so a test counts the runs of each timer and checks none ran early."""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

import shmwheel


def _mark(kind: str) -> None:
    ctx = shmwheel.context()
    now_ms = time.monotonic_ns() // 1_000_000
    name = f"{ctx.id}.{os.getpid()}.{kind}"
    tmp = os.path.join(os.environ["DESC_RUNS"], f"tmp.{name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, f"{ctx.deadline_ms} {now_ms}\n".encode())
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(os.environ["DESC_RUNS"], f"run.{name}"))  # whole, at once


def _note_child(pid: int, kind: str) -> None:
    tmp = os.path.join(os.environ["DESC_RUNS"], f"tmp.child.{pid}")
    with open(tmp, "w") as f:
        f.write(kind + "\n")
    os.rename(tmp, os.path.join(os.environ["DESC_RUNS"], f"child.{pid}"))


def record(payload: Any) -> None:
    """A plain run, `payload` ms long; a file ``done.ID.PID`` says it ran to its end."""
    _mark("record")
    if payload:
        time.sleep(payload / 1000)
    ctx = shmwheel.context()
    open(os.path.join(os.environ["DESC_RUNS"], f"done.{ctx.id}.{os.getpid()}"), "w").close()


def spawn_child(payload: Any) -> None:
    """Start a multiprocessing child (fork, not a daemon) that sleeps 30 s, and return.
    The child's pid goes to a file, for the test to check and kill."""
    _mark("spawn")
    p = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    p.start()
    _note_child(p.pid, "mp")


def fork_and_return(payload: Any) -> None:
    """fork(); both the task and its copy return (the copy into the executor's loop)."""
    _mark("fork")
    pid = os.fork()
    if pid == 0:
        _note_child(os.getpid(), "fork")
    return None
