"""The worker side of the service: ``connect(name)`` gives a ``Client`` that schedules
timers through its own producer ring and cancels them by compare-and-swap.

``Client`` is one class of two halves (service/caller/client_base.py says how they meet): the
native ``Producer`` (shmwheel/native/producer.c) runs the common ``schedule`` and every
``cancel`` without a lock or a system call; what it does not handle comes to the Python
half. Here are the Python paths of ``schedule`` and ``reset`` (``_schedule_slow`` validates
every argument and raises what the API promises, stores large payloads in the arena under
the segment lock, and waits, bounded, for room on a full ring), ``handle``, ``operation``,
``stats`` and ``connect``; the batch calls are ``BatchCalls``' (batch.py), the purgatory's
``PurgatoryCalls``' (purgatory.py), ``lease`` ``LeaseCalls``' (lease.py), the rest
``ClientBase``'s (client_base.py).
"""

from __future__ import annotations

import math
import os
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _native as N
from ...errors import ShmwheelError
from ...segment import contract as C
from ...segment import layout as L
from ...segment import payload as P
from ...segment.clock import now_ms
from .. import calendar as _calendar
from ..jobs.job import Job
from ..jobs.link import JobLink
from ..jobs.retry import Retry
from ..stats import read_stats
from . import times as _times
from .batch import BatchCalls
from .client_base import _live_clients
from .connection import claim_ring
from .handles import TimerHandle, _FutureLike
from .lease import LeaseCalls
from .purgatory import Operation, PurgatoryCalls

__all__ = ["Client", "client_for", "connect"]


def schedule(
    self: Client,
    task: str,
    payload: Any = None,
    *,
    delay_ms: float | None = None,
    deadline_ms: int | None = None,
    key: str | bytes | int | None = None,
    every_ms: float | None = None,
    at: datetime | None = None,
    cron: str | None = None,
    tz: str | None = None,
    misfire: str = "skip",
) -> TimerHandle:
    """Client.schedule's signature, checked by Python (Client._schedule_checked): named
    schedule so that the TypeError of a call that does not fit it says schedule()."""
    if cron is not None or tz is not None or misfire != "skip":
        mixed = [
            n
            for n, v in (
                ("delay_ms", delay_ms),
                ("deadline_ms", deadline_ms),
                ("at", at),
                ("every_ms", every_ms),
            )
            if v is not None
        ]
        if cron is None or mixed:
            raise ValueError(
                "a calendar timer takes cron= (with tz= and misfire= if need be) and none "
                f"of delay_ms=, deadline_ms=, at=, every_ms=; got cron={cron!r}"
                + (f" with {', '.join(mixed)}" if mixed else "")
            )
        return self._schedule_calendar(task, payload, key, cron, tz, misfire)
    return self._schedule_slow(task, payload, delay_ms, deadline_ms, key, every_ms, at)


def reset(
    self: Client,
    handle: TimerHandle | int,
    delay_ms: float | None = None,
    *,
    deadline_ms: int | None = None,
    at: datetime | None = None,
) -> bool:
    """Client.reset's signature and every case its native fast path (shmwheel/native/
    reset.c: a number of ms) leaves to Python: the arguments are checked, then the new
    deadline is applied by ``_reset_to``. Named reset so that its TypeError says reset()."""
    self._check_accepting()
    return self._reset_to(handle, self._deadline(delay_ms, deadline_ms, at))


_checked_schedule, _checked_reset = schedule, reset
del schedule, reset


def _restore(
    kind: type[_FutureLike], service: str, instance: int, id: int, deadline_ms: int
) -> _FutureLike:
    """A pickled handle in this process: bound to an open client of its service here
    (one is connected on first need, ``client_for``); ShmwheelError if the service is not
    running or is another instance than the one that made the handle."""
    return kind(client_for(service, instance), id, deadline_ms)


class Client(BatchCalls, PurgatoryCalls, LeaseCalls):
    """A connection to a running service: one producer ring, used by one process (its
    threads may share it). Get one with ``shmwheel.connect(name)`` or
    ``TimerService.client()``; close it (or use it as a context manager) when done."""

    def __init__(self, mem: L.ServiceMemory, ring: int) -> None:
        super().__init__(mem, ring, Operation)
        self._job_link: JobLink | None = None  # the job pool's connection, made on first use
        self._job_link_lock = threading.Lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    _restore_handle = staticmethod(_restore)  # how its handles unpickle (handles.py)

    # -- the API (schedule, cancel and reset are the native Producer's) -----------------
    # schedule() with argument shapes the native path does not take: Python checks the
    # signature, and a wrong call's TypeError names schedule(), the method the caller called
    _schedule_checked = _checked_schedule
    _reset_slow = _checked_reset

    def _schedule_slow(
        self,
        task: str,
        payload: Any,
        delay_ms: float | None,
        deadline_ms: int | None,
        key: Any,
        every_ms: float | None,
        at: datetime | None = None,
    ) -> TimerHandle:
        self._check_accepting()
        tid = self._task_id(task)
        deadline = self._deadline(delay_ms, deadline_ms, at)
        every = 0
        if every_ms is not None:
            every = math.ceil(_times.check_delay(every_ms, "every_ms", self._max_delay))
            if every == 0:
                raise ValueError("every_ms must be > 0")
        blob, flags = P.encode(payload, key)
        if every and len(blob) + C.REPEAT_HEADER > C.MAX_PAYLOAD:
            raise ValueError(
                f"a repeating timer's payload may encode to at most "
                f"{C.MAX_PAYLOAD - C.REPEAT_HEADER} bytes, got {len(blob)}"
            )
        return TimerHandle(self, self._schedule_blob(tid, blob, flags, deadline, every), deadline)

    def _schedule_calendar(
        self, task: str, payload: Any, key: Any, cron: str, tz: str | None, misfire: str
    ) -> TimerHandle:
        """schedule(cron=...): a repeating timer at its calendar's fire times (service/calendar.py
        says how it re-arms); its deadline is the first fire time after now."""
        self._check_accepting()
        tid = self._task_id(task)
        if key is not None:
            P.encode(None, key)  # the key's own TypeError
        cal = _calendar.spec(cron, tz, misfire, key)
        blob, flags = P.encode_calendar(payload, cal)
        if len(blob) + C.REPEAT_HEADER > C.MAX_PAYLOAD:
            raise ValueError(
                f"a calendar timer's payload and expression may encode to at most "
                f"{C.MAX_PAYLOAD - C.REPEAT_HEADER} bytes, got {len(blob)}"
            )
        deadline = _calendar.next_ms(cal)
        if deadline - now_ms() >= self._max_delay:
            raise ValueError(f"cron={cron!r}: its next run is beyond the wheel's range")
        # the period until the first run's end is a placeholder: each run rewrites it
        every = max(1, min(deadline - now_ms(), self._max_delay - 1))
        h = self._schedule_blob(tid, blob, flags, deadline, every)
        return TimerHandle(self, h, deadline)

    def handle(self, id: int) -> TimerHandle:
        """The TimerHandle of a timer's id, made in any process of the service (its
        deadline is read from the slot, -1 if the timer has ended)."""
        return TimerHandle(self, *self._id_and_deadline(id))

    def operation(self, id: int) -> Operation:
        """The Operation of an operation's id, made in any process (see ``handle``)."""
        return Operation(self, *self._id_and_deadline(id))

    def _id_and_deadline(self, id: int) -> tuple[int, int]:
        self._check()
        if isinstance(id, bool) or not isinstance(id, (int, np.integer)):
            raise TypeError(f"an id is an int, got {type(id).__name__}")
        h = int(id)
        if h < 0 or C.handle_slot(h) >= self._mem.config.capacity or h >> 63:
            raise ValueError(f"{h:#x} is not an id of service {self.name!r}")
        gs, _ = self._outcomes_of().state(h)
        node = self._mem.nodes()[C.handle_slot(h)]
        deadline = int(node[C.F_DEADLINE]) if C.gs_gen(gs) == C.handle_gen(h) else -1
        return h, deadline

    def submit(
        self,
        task: str,
        payload: Any = None,
        *,
        delay_ms: float = 0,
        time_limit_ms: float | None = None,
        retry: Retry | None = None,
    ) -> Job:
        """Run the registered `task` as a job on the service's job workers
        (``TimerService(job_workers=N)``), from any process of the service: ``task(payload)``
        after `delay_ms`, stopped at `time_limit_ms`, retried by `retry` (whose ``on`` may
        name builtin exceptions and shmwheel's errors). Its ``Job``'s result is the task's
        return value, which must be msgpack-encodable."""
        self._check()
        self._task_id(task)
        delay = _times.check_delay(delay_ms, "delay_ms", self._max_delay)
        if time_limit_ms is not None:
            _times.check_delay(time_limit_ms, "time_limit_ms", self._max_delay)
        blob = P.encode_payload(payload)
        link = self._link(required=True)
        assert link is not None
        return link.submit(task, blob, delay, time_limit_ms, retry)

    def _link(self, required: bool) -> JobLink | None:
        """The job link, connected at the first need; without job workers ShmwheelError
        when `required`, else None."""
        with self._job_link_lock:
            if self._job_link is None:
                owner = int(self._mem.header[L.W_OWNER])
                open_link = JobLink if required else JobLink.open
                self._job_link = open_link(self.name, owner)
            return self._job_link

    def close(self) -> None:
        link, self._job_link = self._job_link, None
        if link is not None:
            link.close()
        super().close()

    def stats(self) -> dict[str, Any]:
        """The service's stats() as this process sees them in shared memory (no restart
        counts: only the supervisor knows those), with ``"jobs"``, the job pool's counts
        asked over the job link, when the service has job workers. ShmwheelError once the
        client is closed or the service is stopping or stopped (docs/quickstart.md,
        "Errors at the call")."""
        self._check()
        st = read_stats(self._mem)
        link = self._link(required=False)
        if link is not None:
            st["jobs"] = link.stats()
        return st


if TYPE_CHECKING:  # the native half calls these methods of the Python half: mypy checks
    _hooks: type[N.ProducerHooks] = Client  # that Client has them all, as declared


def client_for(name: str, instance: int) -> Client:
    """An open client of service `name` in this process, for handles unpickled here
    (``_restore``): one made here already if any, else one connected now and kept for the
    process's later handles. ShmwheelError if the running service is another instance than
    `instance` (the handle's timer is not in it)."""
    pid = os.getpid()
    for c in list(_live_clients):
        mine = not c._closed and not c._forked and c._pid == pid
        if isinstance(c, Client) and mine and c.name == name and c._instance == instance:
            return c
    client = connect(name)
    if client._instance != instance:
        client.close()
        raise ShmwheelError(
            f"a handle of service {name!r} arrived from another instance of it (stopped "
            f"and started again since): its timer is not in the running service"
        )
    _kept.append(client)
    return client


_kept: list[Client] = []  # the clients client_for connected (open until the process exits)


def connect(name: str) -> Client:
    """Attach to the running service `name` (same user) and claim a producer ring
    (connection.py, ``claim_ring``)."""
    mem, ring = claim_ring(name)
    try:
        return Client(mem, ring)
    except BaseException:
        mem.close()
        raise
