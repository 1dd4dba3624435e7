"""Kafka's SystemTimer: a thread-safe timing wheel with a task-runner thread (Kafka's
single-thread executor; named so as not to collide with the service's executor processes).

A SystemTimer *is* its wheel: a ``TaskWheel`` (the native core, or the Python path), whose
``add`` and whose fire loop (``_advance``) do the per-timer work. Ground rules (what
protects what; the full argument is in shmwheel/native/inproc.h):

* ``add`` (any thread), ``TimerTask.cancel`` (any thread) and the wheel's own steps are
  each atomic under the GIL (the test oracle, tests/kafka_oracle.py: under one lock); no lock is
  taken per task.
* ``_cond`` serialises clock advance (Kafka's write lock) and is what the advancing thread
  sleeps on; an ``add`` expiring before its wake-up target takes ``_cond`` only to wake it.
* the runner's queue has its own Condition, taken once per batch of due tasks.

A task never runs before its deadline: the expiration is the exact nanosecond deadline
rounded *up* to a millisecond, and the wheel's clock only moves to milliseconds that have
fully passed. Every exception a task raises is logged and counted in ``task_errors``
(Kafka's executor drops them silently).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from ..errors import ShmwheelError
from ..wheel.core import formatted_wheel
from ._backend import TaskWheel
from .timing_wheel import TimerTask

log = logging.getLogger("shmwheel.timer")

_NS_PER_MS = 1_000_000


class TaskRunner:
    """One daemon thread that runs submitted tasks in order (Kafka's single-thread executor).

    ``shutdown`` runs what is already queued, then joins the thread."""

    def __init__(self, name: str) -> None:
        self._queue: deque[TimerTask] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self.tasks_run = 0
        self.task_errors = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit_many(self, tasks: Iterable[TimerTask]) -> None:
        with self._cond:
            if self._stopping:
                raise ShmwheelError("the timer's executor is shut down")
            self._queue.extend(tasks)
            self._cond.notify()

    def _loop(self) -> None:
        queue = self._queue
        while True:
            with self._cond:
                while not queue and not self._stopping:
                    self._cond.wait()
                if not queue:
                    return
                batch = list(queue)
                queue.clear()
            for task in batch:
                try:
                    task.run()
                except Exception:
                    self.task_errors += 1
                    log.exception("timer task %r raised", task)
                self.tasks_run += 1

    def shutdown(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()


class SystemTimer(TaskWheel):
    """Kafka's SystemTimer over the array wheel; see the module docstring for invariants.

    ``add(task)`` (inherited from the wheel core) schedules ``task`` ``task.delay_ms`` from
    now; an already-expired task is handed to the runner at once; adding a task again
    reschedules it. It may be called from any thread."""

    def __init__(
        self,
        name: str,
        tick_ms: int = 1,
        wheel_size: int = 20,
        start_ms: int | None = None,
        *,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        cascade_budget: int = 4096,
    ) -> None:
        self.name = name
        self._clock_ns = clock_ns
        start = self._now_ms() if start_ms is None else start_ms
        # the wheel reads CLOCK_MONOTONIC itself unless given another clock
        clock = None if clock_ns is time.monotonic_ns else clock_ns
        super().__init__(formatted_wheel(tick_ms, wheel_size, start, 1024), clock)
        self._cond = threading.Condition(threading.Lock())
        self._cascade_budget = cascade_budget
        self._runner = self._make_runner()

    # -- hooks MockTimer overrides ----------------------------------------------------
    def _make_runner(self) -> TaskRunner | None:
        return TaskRunner(f"runner-{self.name}")

    def _submit(self, tasks: list[TimerTask]) -> None:
        assert self._runner is not None
        self._runner.submit_many(tasks)

    # -- hooks the wheel core calls from add ------------------------------------------
    def _wake(self) -> None:
        """A task expiring before the advancing thread's wake-up was added: wake it."""
        with self._cond:
            self._cond.notify_all()

    def _refuse(self) -> None:
        raise ShmwheelError(f"timer {self.name!r} is shut down")

    # -- public API -------------------------------------------------------------------
    def _now_ms(self) -> int:
        return self._clock_ns() // _NS_PER_MS

    def advance_clock(self, timeout_ms: int) -> bool:
        """Wait up to ``timeout_ms`` for the wheel to have work (an expired bucket, or a
        bucket to pre-cascade), then advance it to now, submit what came due and do one
        bounded pre-cascade step. Returns True if there was work, False on timeout."""
        give_up = time.monotonic_ns() + max(0, timeout_ms) * _NS_PER_MS
        with self._cond:
            while True:
                now_ns = self._clock_ns()
                wake = self._arm()  # the next wake-up, and adds before it now wake us
                try:
                    if wake is not None and wake * _NS_PER_MS <= now_ns:
                        break
                    remaining = give_up - time.monotonic_ns()
                    if remaining <= 0 or self.closed:
                        return False
                    if wake is not None:
                        remaining = min(remaining, wake * _NS_PER_MS - now_ns)
                    self._cond.wait(remaining / 1e9)
                finally:
                    self._disarm()
            due = self._advance(now_ns // _NS_PER_MS)
            self._cascade(self._cascade_budget)
        self._run_due(due)
        return True

    def _run_due(self, tasks: list[TimerTask]) -> None:
        if not tasks:
            return
        try:
            self._submit(tasks)
        except ShmwheelError:
            if not self.closed:
                raise
            # an advance that raced shutdown(): its runner takes nothing more (as Kafka's
            # executor rejects after shutdown); say so rather than raise in a reaper thread
            log.debug("timer %s: %d tasks fell due during shutdown, not run", self.name, len(tasks))

    @property
    def task_errors(self) -> int:
        """Exceptions raised by tasks (each is also logged)."""
        return self._runner.task_errors if self._runner else 0

    @property
    def tasks_run(self) -> int:
        return self._runner.tasks_run if self._runner else 0

    def shutdown(self) -> None:
        """Stop accepting tasks, wake any advancing thread, run what was already submitted."""
        with self._cond:
            self._close()
            self._cond.notify_all()
        if self._runner is not None:
            self._runner.shutdown()

    close = shutdown

    def __enter__(self) -> SystemTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
