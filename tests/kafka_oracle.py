"""The Kafka layer's oracle: ``Task``, ``Operation``, ``TaskWheel`` and ``Watchers`` with
the interface and the semantics of the native ones (shmwheel/native/inproc_*.c), the
per-timer work done in Python over the same wheel (``WheelCore``, one native call per
wheel operation). A second implementation the native core is checked against, not a
fallback: it needs the C extension (``WheelCore``), so it lives with the tests.
``-p kafka_oracle_plugin`` puts it under the Kafka layer for one pytest run
(tests/test_kafka_paths.py runs the Kafka tests that way).

Ground rules: where the native core relies on the GIL (each of its methods is atomic,
shmwheel/native/inproc.h), this path takes ``_LOCK``, one lock for every task and wheel of
the process, around the same steps, and calls no hook, clock or task code while holding
it. So a task may move between wheels, and a cancel race a fire, with the same outcomes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shmwheel.wheel.constants import NEVER as _NEVER
from shmwheel.wheel.core import WheelCore

_LOCK = threading.Lock()
_NO_WAIT = -(2**63)  # wait target when no thread sleeps on the wheel


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
    """A Task with DelayedOperation's lock and completion flags (the native ``Operation``)."""

    __slots__ = ("lock",)

    def __init__(self, delay_ms: int, lock: Any = None) -> None:
        super().__init__(delay_ms)
        self.lock = lock if lock is not None else threading.Lock()

    def try_complete(self) -> bool:  # pragma: no cover - overridden by DelayedOperation
        raise NotImplementedError

    def on_complete(self) -> None:  # pragma: no cover - overridden by DelayedOperation
        raise NotImplementedError

    def safe_try_complete(self) -> bool:
        """try_complete under the operation's lock, unless already completed (Kafka since
        KAFKA-8334)."""
        with self.lock:
            return not self._completed and bool(self.try_complete())

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


def _is_op(o: object) -> bool:
    return isinstance(o, Operation)


class Watchers:
    """Kafka's watch lists and the purgatory's two entry points (the native ``Watchers``).
    ``_wlock`` guards the dict of lists for every step on a key (no operation code runs
    under it), as the native core's GIL or ``slow`` lock does."""

    timeout_timer: Any = None
    timer_enabled: bool = True

    def __init__(self) -> None:
        self._by_key: dict[Any, list[Any]] = {}
        self._wlock = threading.Lock()
        self._watched_total = 0
        self._estimate_base = 0

    def _watch_all(self, keys: Sequence[Any], op: Operation) -> None:
        with self._wlock:
            for key in keys:
                self._by_key.setdefault(key, []).append(op)
            self._watched_total += 1

    def try_complete_else_watch(self, operation: Any, watch_keys: Sequence[Any]) -> bool:
        """Complete the operation now if it can; otherwise watch it on every key and add it
        to the timer. True iff this call completed it."""
        if not _is_op(operation):
            raise TypeError(
                f"the operation must be a DelayedOperation, got {type(operation).__name__}"
            )
        if len(watch_keys) == 0:
            raise ValueError("the watch key list can't be empty")
        if operation.safe_try_complete_or_else(self._watch_all, watch_keys, operation):
            return True
        if not operation.is_completed:
            if self.timer_enabled and self.timeout_timer is not None:
                self.timeout_timer.add(operation)
            if operation.is_completed:
                operation.cancel()  # completed meanwhile: take it off the timer
        return False

    def _drop(self, key: Any, watchers: list[Any]) -> int:
        """Drop completed operations from `watchers`; forget `key` once it is empty."""
        with self._wlock:
            before = len(watchers)
            watchers[:] = [o for o in watchers if not (_is_op(o) and o._completed)]
            if not watchers and self._by_key.get(key) is watchers:
                del self._by_key[key]
            return before - len(watchers)

    def check_and_complete(self, key: Any) -> int:
        """Try to complete every operation watching ``key``; returns how many completed."""
        with self._wlock:
            watchers = self._by_key.get(key)
            ops = list(watchers) if watchers else []
        if watchers is None:
            return 0
        completed = 0
        for op in ops:
            if _is_op(op) and not op._completed and op.safe_try_complete():
                completed += 1
        self._drop(key, watchers)
        return completed

    def cancel_for_key(self, key: Any) -> list[Any]:
        """Stop watching ``key``: cancel the timeout of each operation watching it and
        return them (they are not completed; other keys may still watch them)."""
        with self._wlock:
            watchers = self._by_key.pop(key, [])
        for op in watchers:
            op.cancel()
        return watchers

    def purge_completed(self) -> int:
        """Remove completed operations from every watch list; returns how many."""
        with self._wlock:
            items = list(self._by_key.items())
        return sum(self._drop(key, watchers) for key, watchers in items)

    def watched(self) -> int:
        """Operations in watch lists, counted once per key (Kafka's PurgatorySize)."""
        with self._wlock:
            return sum(len(w) for w in self._by_key.values())

    def _estimate(self) -> int:
        with self._wlock:
            return self._watched_total - self._estimate_base

    def _purge_due(self, delayed: int, interval: int) -> bool:
        with self._wlock:
            estimated = self._watched_total - self._estimate_base
            if estimated - delayed <= interval:
                return False
            self._estimate_base += estimated - delayed
            return True
