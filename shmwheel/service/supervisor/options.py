"""What a ``TimerService`` is made with: its options checked, and the segment's
configuration and the journal's options built from them. Runs in the caller's process,
when the service object is made (nothing is created yet).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ...journal.directory import JournalOptions
from ...segment import contract as C
from ...segment import layout as L
from ...segment import sizes as Z
from ..tasks import task_spec


def default_executors() -> int:
    return max(1, (os.cpu_count() or 1) - 1)


def _pow2(n: int) -> int:
    return 1 << max(1, int(n - 1).bit_length())


def journal_options(
    journal: str | os.PathLike[str] | None,
    fsync: str,
    fsync_ms: int,
    segment_bytes: int,
    keep_hours: float,
    jobs_bytes: int = 16 << 20,
) -> JournalOptions | None:
    """The journal's options, None without a journal directory; ValueError for a bad one."""
    if journal is None:
        return None
    if not isinstance(journal, (str, os.PathLike)) or not os.fspath(journal):
        raise ValueError(f"journal must be a directory path, got {journal!r}")
    return JournalOptions(
        os.path.abspath(os.fspath(journal)),
        fsync,
        fsync_ms,
        segment_bytes,
        keep_hours,
        jobs_bytes=jobs_bytes,
    )


def service_config(
    tasks: Mapping[str, str | Callable[..., Any]] | None,
    *,
    capacity: int,
    executors: int | None,
    tick_ms: int,
    wheel_size: int,
    max_clients: int,
    ring_capacity: int,
    dispatch_capacity: int,
    arena_bytes: int | None,
    watch_capacity: int,
    waiter_capacity: int,
    job_workers: int,
    journal: JournalOptions | None,
    stuck_after_ms: int = 1000,
) -> L.ServiceConfig:
    """The segment's configuration, every option checked (ValueError says which)."""
    if isinstance(job_workers, bool) or not isinstance(job_workers, int) or job_workers < 0:
        raise ValueError(f"job_workers must be an integer >= 0, got {job_workers!r}")
    if tasks is None and job_workers:
        tasks = {}  # a service for jobs alone registers no task
    if not isinstance(tasks, Mapping) or not (tasks or job_workers):
        raise ValueError(
            "tasks must be a non-empty mapping of task name -> "
            "'module:function' or a module-level function"
        )
    if len(tasks) >= C.MAX_TASKS:  # (one id is L.NO_TASK's)
        raise ValueError(f"at most {C.MAX_TASKS - 1} tasks can be registered")
    if L.NO_TASK in tasks:
        raise ValueError(f"the task name {L.NO_TASK!r} is reserved (Client.lease's)")
    if arena_bytes is None:  # scaled by capacity (segment/sizes.py)
        arena_bytes = Z.default_arena_bytes(capacity)
    for what, value, low in (
        ("capacity", capacity, 1),
        ("tick_ms", tick_ms, 1),
        ("wheel_size", wheel_size, 2),
        ("max_clients", max_clients, 1),
        ("arena_bytes", arena_bytes, 0),
        ("watch_capacity", watch_capacity, 0),
        ("waiter_capacity", waiter_capacity, 1),
        ("stuck_after_ms", stuck_after_ms, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")
    if capacity >= C.MAX_CAPACITY:
        raise ValueError(f"capacity must be below 2**31 ({C.MAX_CAPACITY})")
    if max_clients > C.MAX_CLIENTS:
        raise ValueError(f"max_clients must be at most {C.MAX_CLIENTS}")
    n_exec = default_executors() if executors is None else executors
    if isinstance(n_exec, bool) or not isinstance(n_exec, int) or n_exec < 1:
        raise ValueError(f"executors must be an integer >= 1, got {executors!r}")
    config = L.ServiceConfig(
        capacity=capacity,
        tick_ms=tick_ms,
        wheel_size=wheel_size,
        executors=n_exec,
        max_clients=max_clients,
        ring_capacity=_pow2(ring_capacity),
        dispatch_capacity=_pow2(dispatch_capacity),
        arena_blocks=Z.arena_blocks(arena_bytes),
        tasks=tuple((n, task_spec(n, t)) for n, t in tasks.items()),
        watch_capacity=watch_capacity,
        waiter_capacity=waiter_capacity,
        stuck_after_ms=stuck_after_ms,
    )
    if journal is not None:
        config = replace(
            config,
            journal_dir=journal.directory,
            journal_fsync=journal.fsync,
            journal_fsync_ms=journal.fsync_ms,
            journal_segment_bytes=journal.segment_bytes,
            journal_keep_hours=float(journal.keep_hours),
        )
    config.geometry()  # validates tick and wheel size
    return config
