import threading
import time

import pytest

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
    give_up = time.monotonic() + 5
    while not op.is_completed and time.monotonic() < give_up:
        time.sleep(0.005)
    assert op.expirations == 1
    assert time.monotonic_ns() - started >= 20_000_000
    reaper = p._expiry_thread
    p.shutdown()
    assert not reaper.is_alive()
