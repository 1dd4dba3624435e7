"""Module-level functions the job tests run in job workers (a job's function travels by
reference, so it must be importable there)."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

from helpers import append_line, settle


class Custom(Exception):
    """An exception of this module: travels back pickled, matched by Retry(on=...)."""


def add(a: int, b: int = 0) -> int:
    return a + b


def noop() -> None:
    return None


def pid() -> int:
    return os.getpid()


def boom(message: str) -> None:
    raise ValueError(message)


def raise_custom(message: str) -> None:
    raise Custom(message)


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def exit_now(code: int) -> None:
    os._exit(code)


def segfault() -> None:
    ctypes.string_at(0)


def hang_with_cleanup(path: str, seconds: float) -> None:
    """Sleeps; its finally block leaves a file, proving the soft stop ran it."""
    try:
        time.sleep(seconds)
    finally:
        Path(path).write_text("cleaned up")


def swallow(seconds: float, started: str | None = None) -> str:
    """Catches every stop raised inside it and goes on: only a kill ends it. Leaves the
    file `started` first, if given (the test then knows it runs in its worker)."""
    if started:
        Path(started).write_text("started")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(0.01)
        except BaseException:
            pass
    return "survived"


def attempt_log(path: str, fail_times: int, kind: str = "value") -> int:
    """Appends "start end" monotonic-ns stamps per attempt to `path`; fails (raises, or
    sleeps past a limit when kind == "sleep") on the first `fail_times` attempts."""
    p = Path(path)
    n = len(p.read_text().splitlines()) if p.exists() else 0
    start = time.monotonic_ns()
    try:
        if n < fail_times:
            if kind == "sleep":
                time.sleep(30)
            if kind == "custom":
                raise Custom(f"attempt {n + 1}")
            raise ValueError(f"attempt {n + 1}")
        return n + 1
    finally:
        with p.open("a") as f:
            f.write(f"{start} {time.monotonic_ns()}\n")


def wait_for_file(path: str, timeout: float, started: str | None = None) -> str:
    """Blocks until `path` exists (bounded): a job that is busy until the test releases it.
    Leaves the file `started` first, if given."""
    if started:
        Path(started).write_text("started")
    if not settle(lambda: os.path.exists(path), timeout, pause=0.005):
        raise TimeoutError(f"{path} never appeared")
    return "released"


def big_result(n: int) -> bytes:
    return b"x" * n


def unpicklable_result() -> object:
    return lambda: None


def sleep_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def task_double(payload: dict) -> dict:
    """A registered task run as a job by Client.submit: its value is msgpack."""
    if payload.get("fail"):
        raise KeyError(payload["fail"])
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    return {"double": payload["x"] * 2, "pid": os.getpid()}


def task_unencodable(payload: object) -> object:
    return {1, 2}


def submit_from_child(service: str, x: int) -> list:
    """In a spawned process: connect, submit a registered task as a job, return its value
    and the ids' outcome of a failing one."""
    import shmwheel

    with shmwheel.connect(service) as client:
        value = client.submit("double", {"x": x}, time_limit_ms=10_000).result(30)
        failing = client.submit("double", {"fail": "nope"})
        try:
            failing.result(30)
            raised = None
        except shmwheel.TaskError as e:
            raised = [e.type_name, e.message]
        return [value["double"], raised]


def stats_from_child(service: str) -> dict:
    """In a spawned process: the service's stats() as a Client there reads them."""
    import shmwheel

    with shmwheel.connect(service) as client:
        return client.stats()


def mark(payload: dict) -> str:
    """A registered task for the journaled-jobs test: appends "tag attempt t_ns" to
    payload["path"] (one O_APPEND write), then, on its first attempt only, sleeps
    payload.get("sleep_first", 0) and raises if payload["fail_first"]."""
    path, tag = payload["path"], payload["tag"]
    p = Path(path)
    attempt = (
        1 + sum(line.split()[0] == tag for line in p.read_text().splitlines())
        if (p.exists())
        else 1
    )
    append_line(path, f"{tag} {attempt} {time.monotonic_ns()}\n")
    if payload.get("sleep_first") and attempt == 1:
        time.sleep(payload["sleep_first"])
    if payload.get("fail_first") and attempt == 1:
        raise ConnectionError(f"{tag}: first attempt fails")
    return tag
