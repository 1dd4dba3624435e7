import threading
import time

import pytest
from helpers import settle

from shmwheel import DelayedOperation, DelayedOperationPurgatory, ManualClock, MockTimer


class Op(DelayedOperation):
    """Completes once `needed` signals have arrived (like Kafka's MockDelayedOperation)."""

    def __init__(self, delay_ms, needed=1):
        super().__init__(delay_ms)
        self.needed, self.signals = needed, 0
        self.completions = self.expirations = 0

    def try_complete(self):
        if self.signals >= self.needed:
            return self.force_complete()
        return False

    def on_complete(self):
        self.completions += 1

    def on_expiration(self):
        self.expirations += 1


@pytest.fixture
def mock():
    timer = MockTimer(ManualClock())
    p = DelayedOperationPurgatory("mock", timer, reaper_enabled=False)
    yield timer, p
    p.shutdown()


def test_request_satisfaction(mock):
    _, p = mock
    r1, r2 = Op(100_000), Op(100_000)
    assert not p.try_complete_else_watch(r1, ["test1"])
    assert not p.try_complete_else_watch(r2, ["test2"])
    assert p.check_and_complete("test1") == 0 and p.check_and_complete("test2") == 0
    r1.signals = 1
    assert p.check_and_complete("test1") == 1 and p.check_and_complete("test2") == 0
    r2.signals = 1
    assert p.check_and_complete("test2") == 1
    assert r1.completions == r2.completions == 1 and r1.expirations == 0
    assert p.delayed() == 0, "completion takes the operation off the timer"


def test_already_satisfied_completes_without_watching(mock):
    _, p = mock
    op = Op(1000, needed=0)
    assert p.try_complete_else_watch(op, ["k"])
    assert p.watched() == 0 and p.delayed() == 0 and op.completions == 1


def test_request_expiry(mock):
    timer, p = mock
    r1, r2 = Op(10), Op(200)
    p.try_complete_else_watch(r1, ["a", "b"])
    p.try_complete_else_watch(r2, ["b"])
    timer.advance_clock(10)
    assert r1.is_completed and r1.expirations == 1 and not r2.is_completed
    p.advance_clock(190)
    assert r2.expirations == 1 and r2.completions == 1
    r1.signals = r2.signals = 5
    assert p.check_and_complete("b") == 0, "expired operations cannot complete again"


def test_request_purge(mock):
    _timer, p = mock
    p.purge_interval = 2
    ops = [Op(100_000) for _ in range(5)]
    for i, op in enumerate(ops):
        p.try_complete_else_watch(op, ["x", f"y{i}"])
    assert p.watched() == 10 and p.delayed() == 5
    for op in ops[:4]:
        op.force_complete()
    assert p.watched() == 10 and p.delayed() == 1
    p.advance_clock(0)
    assert p.watched() == 2 and p.estimated_operations == 1


def test_cancel_for_key_returns_the_operations(mock):
    _, p = mock
    ops = [Op(100_000) for _ in range(3)]
    p.try_complete_else_watch(ops[0], ["k1", "k2"])
    p.try_complete_else_watch(ops[1], ["k1"])
    p.try_complete_else_watch(ops[2], ["k2"])
    cancelled = p.cancel_for_key("k1")
    assert cancelled == ops[:2]
    assert p.delayed() == 1 and p.cancel_for_key("k1") == []
    assert not any(op.is_completed for op in ops)


def test_empty_watch_keys_are_refused(mock):
    with pytest.raises(ValueError, match="watch key"):
        mock[1].try_complete_else_watch(Op(10), [])


def test_force_complete_wins_once_under_a_thread_race():
    """Many threads complete one operation: exactly one force_complete wins, on_complete
    runs once, and the completing signal is never missed."""
    for _ in range(20):
        op = Op(100_000, needed=8)
        p = DelayedOperationPurgatory("race", reaper_enabled=False)
        p.try_complete_else_watch(op, ["k"])
        wins, lock = [], threading.Lock()
        barrier = threading.Barrier(8)

        def signal():
            barrier.wait()
            with lock:
                op.signals += 1
            if op.maybe_try_complete():
                wins.append(1)
            p.check_and_complete("k")

        threads = [threading.Thread(target=signal) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert op.is_completed and op.completions == 1 and op.expirations == 0
        assert len(wins) <= 1
        p.shutdown()


def test_watch_then_signal_race_never_misses_a_completion():
    """A signal arriving while the operation is being watched is seen by one of the checks."""
    for _ in range(200):
        p = DelayedOperationPurgatory("nomiss", reaper_enabled=False, timer_enabled=False)
        op = Op(100_000)
        t = threading.Thread(target=lambda: (setattr(op, "signals", 1), p.check_and_complete("k")))
        t.start()
        p.try_complete_else_watch(op, ["k"])
        t.join()
        assert op.is_completed, "the completing signal was lost"
        p.shutdown()


def test_reaper_expires_in_real_time_and_shutdown_joins_it():
    p = DelayedOperationPurgatory("real")
    op = Op(20)
    started = time.monotonic_ns()
    p.try_complete_else_watch(op, ["k"])
    settle(lambda: op.is_completed, 5, pause=0.005)
    assert op.expirations == 1
    assert time.monotonic_ns() - started >= 20_000_000
    reaper = p._expiry_thread
    p.shutdown()
    assert not reaper.is_alive()


class OwnerLock:
    """A LockLike that knows which thread holds it (Kafka's tests ask the ReentrantLock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.owner = None

    def acquire(self, blocking=True, timeout=-1):
        got = self._lock.acquire(blocking, timeout)
        if got:
            self.owner = threading.get_ident()
        return got

    def release(self):
        self.owner = None
        self._lock.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def held_here(self):
        return self.owner == threading.get_ident()


class LockChecking(Op):
    def __init__(self, delay_ms, complete):
        super().__init__(delay_ms)
        self.lock = OwnerLock()
        self.complete, self.unlocked_checks = complete, 0

    def try_complete(self):
        if not self.lock.held_here():
            self.unlocked_checks += 1
        return self.force_complete() if self.complete else False

    def safe_try_complete(self):
        raise AssertionError("try_complete_else_watch must not use safe_try_complete")


def test_kafka_lock_in_try_complete_else_watch(mock):
    """Kafka's testLockInTryCompleteElseWatch: try_complete runs under the operation's lock,
    not through safe_try_complete."""
    _, p = mock
    op = LockChecking(100_000, complete=False)
    assert not p.try_complete_else_watch(op, ["key"])
    assert op.unlocked_checks == 0 and p.watched() == 1


def test_kafka_safe_try_complete_or_else():
    """Kafka's testSafeTryCompleteOrElse: the else action runs only when not completed."""
    ran = []
    assert not LockChecking(100_000, False).safe_try_complete_or_else(lambda: ran.append(1))
    assert ran == [1]
    done = LockChecking(100_000, True)
    assert done.safe_try_complete_or_else(lambda: ran.append(2))
    assert ran == [1] and done.unlocked_checks == 0 and done.completions == 1


def test_kafka_request_purge(mock):
    """Kafka's testRequestPurge: completion takes an operation off the timer at once, and a
    check of a key purges its list of completed operations."""
    _, p = mock
    r1, r2, r3 = Op(100_000), Op(100_000), Op(100_000)
    p.try_complete_else_watch(r1, ["test1"])
    p.try_complete_else_watch(r2, ["test1", "test2"])
    p.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert p.delayed() == 3 and p.watched() == 6
    r2.signals = 1
    assert r2.try_complete() and p.delayed() == 2
    r3.signals = 1
    assert r3.try_complete() and p.delayed() == 1
    p.check_and_complete("test1")
    assert p.watched() == 4
    p.check_and_complete("test2")
    assert p.watched() == 2
    p.check_and_complete("test3")
    assert p.watched() == 1


def test_kafka_cancel_for_a_key_that_does_not_exist(mock):
    assert mock[1].cancel_for_key("nope") == []
    assert mock[1].check_and_complete("nope") == 0


def test_kafka_try_complete_with_multiple_threads():
    """Kafka's testTryCompleteWithMultipleThreads: 100 operations, 20 completion attempts
    each from a pool of threads at random delays, a try_complete that sleeps while holding
    the lock; the attempt that makes an operation completable is never lost."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    attempts = 20

    class Attempts(Op):
        def __init__(self, i):
            super().__init__(10_000)
            self.key, self.left, self.completable = f"key{i}", attempts, False
            self.left_lock = threading.Lock()

        def try_complete(self):
            should = self.completable
            time.sleep(random.random() * 0.002)
            return self.force_complete() if should else False

    p = DelayedOperationPurgatory("mt", reaper_enabled=False)
    ops = [Attempts(i) for i in range(100)]
    for op in ops:
        p.try_complete_else_watch(op, [op.key])

    def attempt(op):
        time.sleep(random.random() * 0.002)
        with op.left_lock:
            op.left -= 1
            if op.left == 0:
                op.completable = True
        p.check_and_complete(op.key)

    with ThreadPoolExecutor(20) as pool:
        for f in [pool.submit(attempt, op) for _ in range(attempts) for op in ops]:
            f.result()
    assert all(op.is_completed and op.completions == 1 for op in ops)
    assert p.delayed() == 0 and p.watched() == 0
    p.shutdown()


def test_operations_need_a_delayed_operation_and_a_sequence(mock):
    _, p = mock
    with pytest.raises(TypeError, match="DelayedOperation"):
        p.try_complete_else_watch(object(), ["k"])
    with pytest.raises(TypeError):
        p.try_complete_else_watch(Op(10), 5)


def test_try_complete_exceptions_release_the_lock(mock):
    _, p = mock

    class Boom(Op):
        boom = True

        def try_complete(self):
            if self.boom:
                raise RuntimeError("boom")
            return False

    op = Boom(100_000)
    with pytest.raises(RuntimeError, match="boom"):
        p.try_complete_else_watch(op, ["k"])
    assert op.lock.acquire(blocking=False), "the lock was left held"
    op.lock.release()
    assert p.watched() == 0 and p.delayed() == 0, "a refused operation is not watched"
    op.boom = False
    assert not p.try_complete_else_watch(op, ["k"])
    op.boom = True
    with pytest.raises(RuntimeError, match="boom"):
        p.check_and_complete("k")
    assert op.lock.acquire(blocking=False), "the lock was left held"
    op.lock.release()
    assert p.watched() == 1 and not op.is_completed
