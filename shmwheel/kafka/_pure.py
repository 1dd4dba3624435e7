"""The Python path of the Kafka layer's core: ``Task``, ``Operation`` and ``TaskWheel``
with the interface and the semantics of the native ones (shmwheel/native/inproc_*.c), the
per-timer work done in Python over the same wheel (``WheelCore``, one native call per
wheel operation). Selected with ``SHMWHEEL_PUREPYTHON=1`` (see ``_backend``); the Kafka
tests run on both paths.

Ground rules: where the native core relies on the GIL (each of its methods is atomic,
shmwheel/native/inproc.h), this path takes ``_LOCK``, one lock for every task and wheel of
the process, around the same steps, and calls no hook, clock or task code while holding
it. So a task may move between wheels, and a cancel race a fire, with the same outcomes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..wheel.core import WheelCore

_LOCK = threading.Lock()
_NO_WAIT = -(2**63)  # wait target when no thread sleeps on the wheel
_NEVER = 2**63 - 1


def _ceil_ms(ns: int) -> int:
    return -(-ns // 1_000_000)


def _delay(v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"delay_ms must be an int, got {type(v).__name__}")
    if not -(2**63) <= v < 2**63:
        raise OverflowError("delay_ms does not fit in int64")
    return v


def _take_out(t: Task) -> bool:
    """Unlink `t` from its wheel's slot if it is linked (``_LOCK`` held)."""
    w = t._wheel
    if w is None:
        return False
    w._core.cancel(t._handle)
    w._objs[WheelCore.slot_of(t._handle)] = None
    t._wheel = None
    return True


class Task:
    """A delay and the task's place in a wheel (the native ``Task``)."""

    __slots__ = (
        "_delay_ms",
        "_wheel",
        "_handle",
        "_expiration_ms",
        "_entry",
        "_bound",
        "_completed",
        "_try_pending",
    )

    def __init__(self, delay_ms: int) -> None:
        self._delay_ms = _delay(delay_ms)
        self._wheel: TaskWheel | None = None
        self._handle = -1
        self._expiration_ms = 0
        self._entry: Any = None
        self._bound = False
        self._completed = False
        self._try_pending = False

    @property
    def delay_ms(self) -> int:
        return self._delay_ms

    @delay_ms.setter
    def delay_ms(self, v: int) -> None:
        self._delay_ms = _delay(v)

    @property
    def _pending(self) -> bool:
        return self._wheel is not None

    def cancel(self) -> None:
        """Remove the task from its timer if it is still pending."""
        self._cancel()

    def _cancel(self) -> bool:
        with _LOCK:
            self._entry, self._bound = None, False
            return _take_out(self)

    def _unlink(self, entry: object) -> bool:
        with _LOCK:
            return self._entry is entry and _take_out(self)

    def _bind_entry(self, entry: object, expiration_ms: int) -> None:
        with _LOCK:
            _take_out(self)
            self._entry, self._expiration_ms, self._bound = entry, int(expiration_ms), True

    def _adopt_entry(self, entry: object) -> Any:
        with _LOCK:
            if not self._bound:
                return None
            if self._entry is None:
                self._entry = entry
            return self._entry


class Operation(Task):
    """A Task with DelayedOperation's completion flags (the native ``Operation``)."""

    __slots__ = ()

    def on_complete(self) -> None:  # pragma: no cover - overridden by DelayedOperation
        raise NotImplementedError

    def force_complete(self) -> bool:
        """Complete now: cancel the timeout and run on_complete. True only for the one
        caller that completed it."""
        with _LOCK:
            if self._completed:
                return False
            self._completed = True
            self._entry, self._bound = None, False
            _take_out(self)
        self.on_complete()
        return True

    @property
    def is_completed(self) -> bool:
        return self._completed

    def _pending_swap(self, v: bool) -> bool:
        with _LOCK:
            old, self._try_pending = self._try_pending, bool(v)
            return old


class TaskWheel:
    """The wheel and the task of each slot (the native ``TaskWheel``)."""

    def __init__(self, mem: np.ndarray, clock: Callable[[], int] | None = None) -> None:
        self._core = WheelCore.attach(np.array(mem, dtype=np.int64), growable=True)
        if self._core.size:
            raise ValueError("TaskWheel needs an empty formatted wheel array")
        self._objs: list[Task | None] = [None] * self._core.capacity
        self._clock = clock if clock is not None else time.monotonic_ns
        self._target = _NO_WAIT
        self._waiters = 0
        self._fired_count = 0
        self._is_closed = False

    # hooks a SystemTimer defines
    def _submit(self, tasks: list[Any]) -> None:  # pragma: no cover
        raise NotImplementedError

    def _wake(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def _refuse(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def _check_range(self, exp: int) -> None:
        limit = self._core.max_deadline()
        if exp >= limit:
            raise ValueError(f"expiration {exp} ms is beyond the wheel's range (must be < {limit})")

    def _link_locked(self, t: Task, exp: int) -> bool:
        self._check_range(exp)
        _take_out(t)  # a task added again moves
        h = self._core.insert(exp)
        if h < 0:
            return False
        if self._core.capacity > len(self._objs):
            self._objs.extend([None] * (self._core.capacity - len(self._objs)))
        self._objs[WheelCore.slot_of(h)] = t
        t._wheel, t._handle = self, h
        return True

    def add(self, task: Task) -> None:
        """Schedule ``task`` to run task.delay_ms from now (see SystemTimer.add)."""
        if not isinstance(task, Task):
            raise TypeError(f"add() takes a TimerTask, got {type(task).__name__}")
        if self._is_closed:
            self._refuse()
            raise RuntimeError("the timer is shut down")
        exp = _ceil_ms(self._clock()) + task.delay_ms
        with _LOCK:
            self._check_range(exp)  # before any change
            task._entry, task._bound, task._expiration_ms = None, True, exp
            linked = self._link_locked(task, exp)
            wake = linked and exp < self._target
            if wake:
                self._target = _NO_WAIT
        if not linked:
            self._submit([task])
        elif wake:
            self._wake()

    def _link(self, task: Task, expiration_ms: int) -> bool:
        with _LOCK:
            return self._link_locked(task, int(expiration_ms))

    def _advance(self, now_ms: int) -> list[Any]:
        with _LOCK:
            objs, due = self._objs, []
            for s in self._core.advance(now_ms).tolist():
                t = objs[s]
                objs[s] = None
                if t is not None:
                    t._wheel = None
                    due.append(t)
            self._fired_count += len(due)
            return due

    def _cascade(self, budget: int) -> int:
        with _LOCK:
            return self._core.cascade_step(budget)

    def _next_wakeup(self) -> int | None:
        with _LOCK:
            return self._core.next_wakeup()

    def _arm(self) -> int | None:
        with _LOCK:
            wake = self._core.next_wakeup()
            w = _NEVER if wake is None else wake
            self._waiters += 1
            if self._target == _NO_WAIT or w < self._target:
                self._target = w
            return wake

    def _disarm(self) -> None:
        with _LOCK:
            if self._waiters > 0:
                self._waiters -= 1
                if self._waiters == 0:
                    self._target = _NO_WAIT

    def _close(self) -> None:
        self._is_closed = True

    def _snapshot(self) -> bytes:
        with _LOCK:
            return self._core.mem.tobytes()

    @property
    def size(self) -> int:
        """Tasks pending in the wheel."""
        return self._core.size

    @property
    def current_time_ms(self) -> int:
        """The wheel's clock (ms)."""
        return self._core.current_time

    @property
    def _capacity(self) -> int:
        return self._core.capacity

    @property
    def closed(self) -> bool:
        """True once shut down."""
        return self._is_closed

    @property
    def _fired(self) -> int:
        return self._fired_count
