"""Kafka's TimerTask, TimerTaskEntry and TimingWheel over the array wheel core.

A ``TimerTask`` carries its own place in a wheel: the wheel's slot references the task
itself, so adding, cancelling and firing allocate nothing per timer. Kafka's
``TimerTaskEntry`` (a task's binding to one expiration) is made only when a caller asks
for one (``TimerTaskEntry(task, ms)``, ``task.timer_task_entry``): a new binding of the
task (making an entry, or adding the task again) cancels the old one, which then reports
``cancelled``. Like Kafka's, ``TimingWheel`` is not thread-safe (``SystemTimer`` is).
"""

from __future__ import annotations

from ..wheel.core import DEFAULT_RANGE, formatted_wheel
from ._backend import Task, TaskWheel


class TimerTask(Task):
    """A task to run once its delay has passed. Subclass and override ``run()``.

    ``TimerTask(delay_ms)``: ``delay_ms`` must be an int (TypeError otherwise)."""

    def run(self) -> None:  # pragma: no cover - abstract
        """What the task does when its delay has passed (override)."""
        raise NotImplementedError("override TimerTask.run()")

    @property
    def timer_task_entry(self) -> TimerTaskEntry | None:
        """The task's current binding to an expiration (Kafka's getTimerTaskEntry), made on
        first request; None if the task was never added or was cancelled since."""
        entry = self._entry
        if entry is not None or not self._bound:
            return entry  # type: ignore[no-any-return]
        return self._adopt_entry(TimerTaskEntry._view(self))  # type: ignore[no-any-return]


class TimerTaskEntry:
    """A task's binding to one expiration (Kafka's TimerTaskEntry). Making one binds the
    task to it; the task's previous binding is cancelled (and taken off its wheel)."""

    __slots__ = ("timer_task", "expiration_ms", "__weakref__")

    def __init__(self, task: TimerTask, expiration_ms: int) -> None:
        self.timer_task = task
        self.expiration_ms = int(expiration_ms)
        task._bind_entry(self, self.expiration_ms)

    @classmethod
    def _view(cls, task: TimerTask) -> TimerTaskEntry:
        """An entry for the task's current binding, without rebinding it."""
        entry = cls.__new__(cls)
        entry.timer_task = task
        entry.expiration_ms = task._expiration_ms
        return entry

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled or bound to a newer entry."""
        return self.timer_task._entry is not self

    def remove(self) -> None:
        """Take the task off its wheel in O(1) if this is its current, pending binding (the
        binding stays: Kafka's TimerTaskEntry.remove); a no-op otherwise."""
        self.timer_task._unlink(self)

    def __repr__(self) -> str:
        return (
            f"TimerTaskEntry({type(self.timer_task).__name__}, "
            f"expiration_ms={self.expiration_ms}, cancelled={self.cancelled})"
        )


class TimingWheel:
    """Kafka's hierarchical timing wheel, array-backed; not thread-safe.

    ``add`` returns False (and keeps nothing) for a cancelled entry or one already
    expired (``expiration_ms <= current_time_ms``); ``advance_clock`` moves the clock and
    returns the entries that came due, in expiration order of their buckets. Unlike
    Kafka's, levels are preallocated to span ``max_range_ms``; a later expiration raises
    ValueError. It is the same wheel a SystemTimer is (a ``TaskWheel``).
    """

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        *,
        capacity: int = 1024,
        max_range_ms: int | None = None,
    ) -> None:
        rng = DEFAULT_RANGE if max_range_ms is None else max_range_ms
        self._wheel = TaskWheel(formatted_wheel(tick_ms, wheel_size, start_ms, capacity, rng))
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.start_ms = self._wheel.current_time_ms

    @property
    def current_time_ms(self) -> int:
        return self._wheel.current_time_ms

    @property
    def size(self) -> int:
        return self._wheel.size

    def add(self, entry: TimerTaskEntry) -> bool:
        """Link the entry's task at its expiration; False if it is cancelled or already
        expired."""
        if entry.cancelled:
            return False
        return self._wheel._link(entry.timer_task, entry.expiration_ms)

    def remove(self, entry: TimerTaskEntry) -> None:
        """Unlink an entry in O(1); its slot is free at once."""
        entry.remove()

    def advance_clock(self, time_ms: int) -> list[TimerTaskEntry]:
        """Move the clock to ``time_ms`` and return the entries that expired (Kafka returns
        nothing here and flushes buckets from its DelayQueue; the wheel core does both)."""
        due = []
        for task in self._wheel._advance(time_ms):
            entry = task.timer_task_entry
            if entry is not None:
                due.append(entry)
        return due

    def cascade_step(self, budget: int = 4096) -> int:
        """Pre-cascade up to ``budget`` entries (see shmwheel/native/wheel.c)."""
        return self._wheel._cascade(budget)

    def next_wakeup_ms(self) -> int | None:
        """When the wheel next has work: a bucket to fire or to pre-cascade; None if empty."""
        return self._wheel._next_wakeup()
