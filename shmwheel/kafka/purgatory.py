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

Ground rules (what protects what): each watch list shard's lock guards its dict of lists
(a read-modify-write of Python structures); the operation's ``lock`` (the user's, as in
Kafka) guards try_complete; the completion and tryCompletePending flags and the timer
binding are the core's (atomic under the GIL, shmwheel/native/inproc.h); the count of
watched operations is an ``itertools.count`` (atomic) read by ``advance_clock`` under
``_purge_lock``. No lock is taken per operation beyond those Kafka takes.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

from ._backend import Operation
from .system_timer import SystemTimer
from .timing_wheel import TimerTask

SHARDS = 512  # Kafka's watcher-list shard count


class LockLike(Protocol):
    """What an operation's lock must offer: ``threading.Lock`` or ``threading.RLock``
    (Kafka lets operations share a lock)."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...


class DelayedOperation(TimerTask, Operation):
    """An operation that completes when ``try_complete`` says so, or expires after delay_ms.

    Override ``try_complete`` (call ``force_complete`` when the condition holds),
    ``on_complete`` and ``on_expiration``. ``force_complete()`` (from the core) cancels
    the timeout and runs on_complete; it returns True only for the one caller that
    completed the operation; ``is_completed`` says whether one has."""

    def __init__(self, delay_ms: int, lock: LockLike | None = None) -> None:
        super().__init__(delay_ms)
        self.lock = lock if lock is not None else threading.Lock()

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

    def safe_try_complete(self) -> bool:
        """try_complete under the operation's lock, unless already completed (Kafka since
        KAFKA-8334)."""
        with self.lock:
            return not self.is_completed and self.try_complete()

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


class _WatcherList:
    """One shard: each key's watching operations, in arrival order, under one lock."""

    __slots__ = ("lock", "by_key")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_key: dict[Hashable, list[DelayedOperation]] = {}


class DelayedOperationPurgatory:
    """Kafka's purgatory: operations watched by keys, completed by key checks or expired by
    the timer, whose expiry thread (Kafka's ExpiredOperationReaper) loops ``advance_clock(200)``."""

    def __init__(
        self,
        name: str,
        timer: SystemTimer | None = None,
        purge_interval: int = 1000,
        reaper_enabled: bool = True,
        timer_enabled: bool = True,
    ) -> None:
        self.name = name
        self.timeout_timer = timer if timer is not None else SystemTimer(name)
        self.purge_interval = purge_interval
        self.timer_enabled = timer_enabled
        self._shards = [_WatcherList() for _ in range(SHARDS)]
        # Kafka's estimatedTotalOperations, lock-free: next() of a count is atomic; the
        # estimate is what it handed out minus _estimate_base, both read under _purge_lock
        self._watch_count = itertools.count()
        self._counted_reads = 0  # next() calls made only to read the count
        self._estimate_base = 0
        self._purge_lock = threading.Lock()
        self._shutdown = threading.Event()
        self._expiry_thread: threading.Thread | None = None
        if reaper_enabled:
            self._expiry_thread = threading.Thread(
                target=self._expire_loop, daemon=True, name=f"ExpirationReaper-{name}"
            )
            self._expiry_thread.start()

    def _shard(self, key: Hashable) -> _WatcherList:
        return self._shards[hash(key) % SHARDS]

    # -- the two entry points --------------------------------------------------------
    def try_complete_else_watch(
        self, operation: DelayedOperation, watch_keys: Sequence[Hashable]
    ) -> bool:
        """Complete the operation now if it can; otherwise watch it on every key and add it
        to the timer. True iff this call completed it."""
        if not watch_keys:
            raise ValueError("the watch key list can't be empty")
        if operation.safe_try_complete_or_else(self._watch_all, watch_keys, operation):
            return True
        if not operation.is_completed:
            if self.timer_enabled:
                self.timeout_timer.add(operation)
            if operation.is_completed:
                operation.cancel()  # completed meanwhile: take it off the timer
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete every operation watching ``key``; returns how many completed."""
        wl = self._shard(key)
        with wl.lock:
            watchers = wl.by_key.get(key)
            ops = list(watchers) if watchers else []
        if not ops:
            return 0
        done: set[int] = set()
        completed = 0
        for op in ops:
            if op.is_completed:
                done.add(id(op))
            elif op.safe_try_complete():
                done.add(id(op))
                completed += 1
        self._drop(key, watchers, done)
        return completed

    # -- watch lists -----------------------------------------------------------------
    def _watch_all(self, keys: Sequence[Hashable], operation: DelayedOperation) -> None:
        shards = self._shards
        for key in keys:
            wl = shards[hash(key) % SHARDS]
            with wl.lock:
                wl.by_key.setdefault(key, []).append(operation)
        next(self._watch_count)

    def _drop(self, key: Hashable, watchers: list[DelayedOperation] | None, ids: set[int]) -> int:
        """Remove the given operations from a key's list; forget the key once it is empty."""
        if watchers is None or not ids:
            return 0
        wl = self._shard(key)
        with wl.lock:
            before = len(watchers)
            watchers[:] = [o for o in watchers if id(o) not in ids]
            if not watchers and wl.by_key.get(key) is watchers:
                del wl.by_key[key]
            return before - len(watchers)

    def watched(self) -> int:
        """Operations in watch lists, counted once per key (Kafka's PurgatorySize)."""
        total = 0
        for wl in self._shards:
            with wl.lock:
                total += sum(len(w) for w in wl.by_key.values())
        return total

    def delayed(self) -> int:
        """Operations pending in the timer (Kafka's NumDelayedOperations)."""
        return self.timeout_timer.size

    purgatory_size = property(watched)
    num_delayed_operations = property(delayed)

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching ``key``: cancel the timeout of each operation watching it and return
        them (they are not completed; other keys may still watch them)."""
        wl = self._shard(key)
        with wl.lock:
            watchers = wl.by_key.pop(key, None)
        if watchers is None:
            return []
        for op in watchers:
            op.cancel()
        return watchers

    def purge_completed(self) -> int:
        """Remove completed operations from every watch list; returns how many."""
        purged = 0
        for wl in self._shards:
            with wl.lock:
                for key, watchers in list(wl.by_key.items()):
                    before = len(watchers)
                    watchers[:] = [o for o in watchers if not o.is_completed]
                    purged += before - len(watchers)
                    if not watchers:
                        del wl.by_key[key]
        return purged

    def _estimate(self) -> int:
        """Operations watched since the last purge reset (``_purge_lock`` held)."""
        handed_out = next(self._watch_count) - self._counted_reads
        self._counted_reads += 1
        return handed_out - self._estimate_base

    @property
    def estimated_operations(self) -> int:
        """Kafka's estimatedTotalOperations: watched operations, reset to the pending ones
        by each purge."""
        with self._purge_lock:
            return self._estimate()

    # -- expiry ----------------------------------------------------------------------
    def advance_clock(self, timeout_ms: int) -> None:
        """Advance the timer, then purge watch lists if the estimate of completed-but-still-
        watched operations exceeds ``purge_interval``."""
        self.timeout_timer.advance_clock(timeout_ms)
        delayed = self.delayed()
        with self._purge_lock:
            estimated = self._estimate()
            purge = estimated - delayed > self.purge_interval
            if purge:
                self._estimate_base += estimated - delayed
        if purge:
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
