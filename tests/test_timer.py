import logging
import threading
import time

import pytest

from shmwheel import (
    ManualClock,
    MockTimer,
    ShmwheelError,
    SystemTimer,
    TimerTask,
    TimerTaskEntry,
    TimingWheel,
)


class Recorder(TimerTask):
    """Records when it ran, to check it never ran before its deadline."""

    def __init__(self, delay_ms, log, tag=None):
        super().__init__(delay_ms)
        self.log, self.tag = log, tag
        self.added_ns = time.monotonic_ns()

    def run(self):
        self.log.append((self.tag, time.monotonic_ns()))


def drive(timer, until, stop_after_s=10.0):
    """Advance the clock like Kafka's reaper until `until()` or the time limit."""
    give_up = time.monotonic() + stop_after_s
    while not until() and time.monotonic() < give_up:
        timer.advance_clock(20)


@pytest.fixture
def timer():
    t = SystemTimer("test", tick_ms=1, wheel_size=3)
    yield t
    t.shutdown()


def test_already_expired_tasks_run_at_once(timer):
    log = []
    for i in range(-5, 1):
        timer.add(Recorder(i, log, i))
    drive(timer, lambda: len(log) == 6, 5)
    assert sorted(tag for tag, _ in log) == list(range(-5, 1))


def test_tasks_expire_across_levels_never_early(timer):
    """wheel_size 3: delays up to 300 ms span five levels (3, 9, 27, 81, 243 ms)."""
    log = []
    tasks = [Recorder(d, log, d) for d in range(0, 300, 7)]
    for t in tasks:
        timer.add(t)
    drive(timer, lambda: len(log) == len(tasks))
    assert sorted(tag for tag, _ in log) == [t.delay_ms for t in tasks]
    by_tag = {t.tag: t for t in tasks}
    for tag, ran_ns in log:
        assert ran_ns >= by_tag[tag].added_ns + tag * 1_000_000, f"task {tag} ran early"
    assert timer.size == 0


def test_cancelled_tasks_never_run(timer):
    log = []
    tasks = [Recorder(d, log, d) for d in range(5, 60, 5)]
    for t in tasks:
        timer.add(t)
    for t in tasks[::2]:
        t.cancel()
    assert timer.size == len(tasks) - len(tasks[::2])
    drive(timer, lambda: len(log) == len(tasks[1::2]))
    time.sleep(0.08)
    timer.advance_clock(0)
    assert sorted(tag for tag, _ in log) == [t.delay_ms for t in tasks[1::2]]


def test_adding_a_task_again_reschedules_it(timer):
    log = []
    task = Recorder(30, log, "x")
    timer.add(task)
    first = task.timer_task_entry
    task.delay_ms = 60
    timer.add(task)
    assert first.cancelled and timer.size == 1
    drive(timer, lambda: len(log) == 1)
    time.sleep(0.05)
    timer.advance_clock(0)
    assert len(log) == 1 and log[0][1] >= task.added_ns + 60_000_000


def test_task_exceptions_are_logged_and_counted(timer, caplog):
    class Boom(TimerTask):
        def run(self):
            raise RuntimeError("boom")

    log = []
    with caplog.at_level(logging.ERROR, logger="shmwheel.timer"):
        timer.add(Boom(1))
        timer.add(Recorder(2, log))
        drive(timer, lambda: len(log) == 1 and timer.task_errors == 1)
    assert timer.task_errors == 1 and timer.tasks_run == 2
    assert "boom" in caplog.text


def test_concurrent_adds_each_run_exactly_once(timer):
    log, lock = [], threading.Lock()

    class Count(TimerTask):
        def run(self):
            with lock:
                log.append(id(self))

    tasks = [Count(i % 40) for i in range(4000)]

    def adder(part):
        for t in part:
            timer.add(t)

    threads = [threading.Thread(target=adder, args=(tasks[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    drive(timer, lambda: len(log) == len(tasks) and not any(t.is_alive() for t in threads))
    for t in threads:
        t.join()
    assert sorted(log) == sorted(id(t) for t in tasks)


def test_advance_clock_times_out_and_wakes_early_for_an_earlier_task(timer):
    assert timer.advance_clock(30) is False
    log = []
    result = []
    waiter = threading.Thread(target=lambda: result.append(timer.advance_clock(10_000)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.05)
    timer.add(Recorder(5, log))
    waiter.join(5)
    assert result == [True] and time.monotonic() - started < 5


def test_shutdown_refuses_new_tasks():
    t = SystemTimer("closing")
    t.shutdown()
    with pytest.raises(ShmwheelError, match="shut down"):
        t.add(Recorder(1, []))


def test_timing_wheel_add_rules_and_expiry_order():
    wheel = TimingWheel(tick_ms=1, wheel_size=4, start_ms=100)
    log = []
    late, soon = Recorder(0, log), Recorder(0, log)
    assert not wheel.add(TimerTaskEntry(Recorder(0, log), 100)), "expired at current time"
    cancelled = TimerTaskEntry(Recorder(0, log), 150)
    cancelled.timer_task.cancel()
    assert not wheel.add(cancelled)
    e1, e2 = TimerTaskEntry(late, 170), TimerTaskEntry(soon, 101)
    assert wheel.add(e1) and wheel.add(e2) and wheel.size == 2
    assert wheel.advance_clock(120) == [e2]
    e1.remove()
    assert wheel.size == 0 and wheel.advance_clock(500) == []


def test_mock_timer_is_deterministic():
    clock = ManualClock(1000)
    timer = MockTimer(clock)
    ran = []

    class At(TimerTask):
        def run(self):
            ran.append((self.delay_ms, clock.ms))

    for d in (0, 1, 5, 100, 5000, 400_000):
        timer.add(At(d))
    assert ran == [(0, 1000)]
    assert timer.advance_clock(4) and ran[1:] == [(1, 1004)]
    timer.advance_clock(1)
    assert ran[-1] == (5, 1005)
    assert not timer.advance_clock(94)
    timer.advance_clock(1)
    assert ran[-1] == (100, 1100)
    timer.advance_clock(400_000)
    assert [d for d, _ in ran] == [0, 1, 5, 100, 5000, 400_000] and timer.size == 0
