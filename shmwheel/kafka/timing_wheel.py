"""Kafka's TimerTask, TimerTaskEntry and TimingWheel over the array wheel core.

A ``TimerTask`` is bound to at most one live ``TimerTaskEntry``: making a new entry for
a task cancels the old one (Kafka's ``setTimerTaskEntry``), so adding a task again
reschedules it. A ``TimingWheel`` keeps entries in a ``WheelCore`` and maps each slot
back to its entry object; that Python object belongs to the caller's task, not to the
wheel's storage. Like Kafka's, ``TimingWheel`` is not thread-safe (``SystemTimer`` is).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..wheel.core import DEFAULT_RANGE, WheelCore

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable


class TimerTask:
    """A task to run once its delay has passed. Subclass and override ``run()``."""

    def __init__(self, delay_ms: int) -> None:
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool):
            raise TypeError(f"delay_ms must be an int, got {type(delay_ms).__name__}")
        self.delay_ms = delay_ms
        self._entry: TimerTaskEntry | None = None
        self._entry_lock = threading.Lock()

    def run(self) -> None:  # pragma: no cover - abstract
        """What the task does when its delay has passed (override)."""
        raise NotImplementedError("override TimerTask.run()")

    def cancel(self) -> None:
        """Remove the task from its timer if it is still pending."""
        with self._entry_lock:
            entry, self._entry = self._entry, None
        if entry is not None:
            entry.remove()

    def _set_entry(self, entry: TimerTaskEntry) -> None:
        """Bind a new entry; an older live entry is removed (it now counts as cancelled)."""
        with self._entry_lock:
            old, self._entry = self._entry, entry
        if old is not None and old is not entry:
            old.remove()

    def _entry_or_none(self) -> TimerTaskEntry | None:
        return self._entry


class TimerTaskEntry:
    """A task's place in a timing wheel: the task, its expiration, and its wheel handle."""

    __slots__ = ("timer_task", "expiration_ms", "_remover", "_handle", "__weakref__")

    def __init__(self, task: TimerTask, expiration_ms: int) -> None:
        self.timer_task = task
        self.expiration_ms = int(expiration_ms)
        self._remover: Callable[[TimerTaskEntry], None] | None = None
        self._handle = -1
        task._set_entry(self)

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled or bound to a newer entry."""
        return self.timer_task._entry_or_none() is not self

    def remove(self) -> None:
        """Unlink from the wheel if linked (O(1)); a no-op otherwise."""
        remover = self._remover
        if remover is not None:
            remover(self)

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
    ValueError.
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
        self.core = WheelCore(
            tick_ms,
            wheel_size,
            start_ms,
            capacity,
            max_range=DEFAULT_RANGE if max_range_ms is None else max_range_ms,
        )
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.start_ms = self.core.current_time
        self._owners: list[TimerTaskEntry | None] = [None] * self.core.capacity

    @property
    def current_time_ms(self) -> int:
        return self.core.current_time

    @property
    def size(self) -> int:
        return self.core.size

    def add(self, entry: TimerTaskEntry) -> bool:
        """Link the entry into its bucket; False if it is cancelled or already expired."""
        if entry.cancelled:
            return False
        handle = self.core.insert(entry.expiration_ms)
        if handle < 0:
            return False
        slot = WheelCore.slot_of(handle)
        if slot >= len(self._owners):
            self._owners.extend([None] * (self.core.capacity - len(self._owners)))
        self._owners[slot] = entry
        entry._handle = handle
        entry._remover = self.remove
        return True

    def remove(self, entry: TimerTaskEntry) -> None:
        """Unlink an entry in O(1); its slot is free at once."""
        handle = entry._handle
        if handle >= 0 and self.core.cancel(handle):
            self._owners[WheelCore.slot_of(handle)] = None
        entry._handle = -1
        entry._remover = None

    def advance_clock(self, time_ms: int) -> list[TimerTaskEntry]:
        """Move the clock to ``time_ms`` and return the entries that expired (Kafka returns
        nothing here and flushes buckets from its DelayQueue; the wheel core does both)."""
        slots = self.core.advance(time_ms)
        owners = self._owners
        due = []
        for s in slots.tolist():
            entry = owners[s]
            owners[s] = None
            if entry is not None:
                entry._handle = -1
                entry._remover = None
                due.append(entry)
        return due

    def cascade_step(self, budget: int = 4096) -> int:
        """Pre-cascade up to ``budget`` entries (see shmwheel/native/wheel.c)."""
        return self.core.cascade_step(budget)

    def next_wakeup_ms(self) -> int | None:
        """When the wheel next has work: a bucket to fire or to pre-cascade; None if empty."""
        return self.core.next_wakeup()
