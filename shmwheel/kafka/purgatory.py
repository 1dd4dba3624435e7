"""Kafka's DelayedOperation and DelayedOperationPurgatory.

Invariants:
* ``force_complete`` succeeds for exactly one caller (a compare-and-set in the core), so
  ``on_complete`` runs exactly once whether the operation completes or expires.
* ``on_complete`` never runs concurrently with ``try_complete`` (KAFKA-19312): completion
  by a check runs inside try_complete under the operation's lock, and expiry (``run``)
  takes the same lock before it completes.
* No missed wake-up: ``try_complete_else_watch`` checks, watches every key, and checks
  again while holding the operation's lock; ``check_and_complete`` takes the same lock
  before it checks. A change signalled at any moment is seen by one of the two checks.
  ``maybe_try_complete`` (KAFKA-6653) never blocks and never loses a signal either.
* Completed operations are purged from watch lists once the estimated number of
  operations exceeds the pending ones by more than ``purge_interval``.

Ground rules (what protects what): the watch lists and the two entry points are the
core's (``Watchers``: shmwheel/native/inproc_purgatory.c, whose header says how each step
on a key's list is atomic; the Python path: one lock); an operation's ``lock`` (the
user's, as in Kafka) is held around each try_complete; its completion and
tryCompletePending flags and its timer binding are the core's (shmwheel/native/inproc.h).
No lock is taken per operation beyond the operation's own, which Kafka takes too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ._backend import Operation, Watchers
from .system_timer import SystemTimer
from .timing_wheel import TimerTask


class LockLike(Protocol):
    """What an operation's lock must offer: ``threading.Lock`` or ``threading.RLock``
    (Kafka lets operations share a lock)."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...


class DelayedOperation(TimerTask, Operation):
    """An operation that completes when ``try_complete`` says so, or expires after delay_ms.

    ``DelayedOperation(delay_ms, lock=None)``: ``lock`` (a LockLike; a new
    ``threading.Lock`` by default) is held around every try_complete and by expiry.
    Override ``try_complete`` (call ``force_complete`` when the condition holds),
    ``on_complete`` and ``on_expiration``. ``force_complete()`` (from the core) cancels
    the timeout and runs on_complete; it returns True only for the one caller that
    completed the operation; ``is_completed`` says whether one has;
    ``safe_try_complete()`` is try_complete under the lock unless already completed."""

    lock: LockLike

    # -- to override ----------------------------------------------------------------
    def try_complete(self) -> bool:  # pragma: no cover - abstract
        """Check the completion condition; call ``force_complete`` and return True
        if it holds (override)."""
        raise NotImplementedError("override DelayedOperation.try_complete()")

    def on_complete(self) -> None:  # pragma: no cover - abstract
        """Called once, by whoever completed the operation (override)."""
        raise NotImplementedError("override DelayedOperation.on_complete()")

    def on_expiration(self) -> None:  # pragma: no cover - abstract
        """Called once when the operation expired before completing (override)."""
        raise NotImplementedError("override DelayedOperation.on_expiration()")

    # -- Kafka's machinery ----------------------------------------------------------
    def run(self) -> None:
        """Expiry: under the operation's lock (so on_complete never overlaps a
        try_complete, KAFKA-19312), complete, then on_expiration if the expiry won."""
        with self.lock:
            if self.force_complete():
                self.on_expiration()

    def safe_try_complete_or_else(self, f: Callable[..., object], *args: Any) -> bool:
        """Under the lock: try_complete; if not done, run ``f(*args)`` (watch the keys) and
        try again."""
        with self.lock:
            if self.try_complete():
                return True
            f(*args)
            return self.try_complete()

    def maybe_try_complete(self) -> bool:
        """Kafka's tryCompletePending (KAFKA-6653): if another thread holds the lock, leave
        it a note to retry instead of blocking; whoever holds the lock retries until no
        note is left. The note is swapped atomically by the core."""
        done = False
        while True:
            if self.lock.acquire(blocking=False):
                try:
                    self._pending_swap(False)
                    done = self.try_complete()
                finally:
                    self.lock.release()
                retry = self._try_pending
            else:
                retry = not self._pending_swap(True)
            if self.is_completed or not retry:
                return done


class DelayedOperationPurgatory(Watchers):
    """Kafka's purgatory: operations watched by keys, completed by key checks or expired by
    the timer, whose expiry thread (Kafka's ExpiredOperationReaper) loops ``advance_clock(200)``.

    From the core (``Watchers``): ``try_complete_else_watch(operation, watch_keys)`` (True
    iff this call completed it; otherwise it is watched on every key and added to the
    timer), ``check_and_complete(key)`` (how many it completed), ``cancel_for_key(key)``,
    ``purge_completed()`` and ``watched()``."""

    def __init__(
        self,
        name: str,
        timer: SystemTimer | None = None,
        purge_interval: int = 1000,
        reaper_enabled: bool = True,
        timer_enabled: bool = True,
    ) -> None:
        super().__init__()
        self.name = name
        self.timeout_timer = timer if timer is not None else SystemTimer(name)
        self.purge_interval = purge_interval
        self.timer_enabled = timer_enabled
        self._shutdown = threading.Event()
        self._expiry_thread: threading.Thread | None = None
        if reaper_enabled:
            self._expiry_thread = threading.Thread(
                target=self._expire_loop, daemon=True, name=f"ExpirationReaper-{name}"
            )
            self._expiry_thread.start()

    def delayed(self) -> int:
        """Operations pending in the timer (Kafka's NumDelayedOperations)."""
        return self.timeout_timer.size  # type: ignore[no-any-return]

    @property
    def purgatory_size(self) -> int:
        """Kafka's PurgatorySize: ``watched()``."""
        return self.watched()

    @property
    def num_delayed_operations(self) -> int:
        """Kafka's NumDelayedOperations: ``delayed()``."""
        return self.delayed()

    @property
    def estimated_operations(self) -> int:
        """Kafka's estimatedTotalOperations: operations watched, reset to the pending ones
        by each purge."""
        return self._estimate()

    # -- expiry ----------------------------------------------------------------------
    def advance_clock(self, timeout_ms: int) -> None:
        """Advance the timer, then purge watch lists if the estimate of completed-but-still-
        watched operations exceeds ``purge_interval``."""
        self.timeout_timer.advance_clock(timeout_ms)
        if self._purge_due(self.delayed(), self.purge_interval):
            self.purge_completed()

    def _expire_loop(self) -> None:
        while not self._shutdown.is_set() and not self.timeout_timer.closed:
            self.advance_clock(200)

    def shutdown(self) -> None:
        """Stop the reaper (waking it at once) and shut the timer down."""
        self._shutdown.set()
        self.timeout_timer.shutdown()  # wakes an advance_clock in progress
        expiry = self._expiry_thread
        if expiry is not None and expiry is not threading.current_thread():
            expiry.join()

    def __enter__(self) -> DelayedOperationPurgatory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
