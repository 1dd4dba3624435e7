import logging
import threading
import time

import pytest
from helpers import repeat_until

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
    repeat_until(lambda: timer.advance_clock(20), until, stop_after_s)


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


def verify_wheel(wheel):
    """The wheel's array is a well-formed wheel (WheelCore.verify on a copy of it)."""
    import numpy as np

    from shmwheel import WheelCore

    WheelCore.attach(np.frombuffer(bytearray(wheel._snapshot()), dtype=np.int64)).verify()


def test_kafka_task_expiration(timer):
    """Kafka's TimerTest.testTaskExpiration: delays 0-4, 10-99 twice each, 100-499; every
    task runs once, none early."""
    log = []
    delays = [*range(5), *(d for d in range(10, 100) for _ in range(2)), *range(100, 500)]
    tasks = [Recorder(d, log, i) for i, d in enumerate(delays)]
    for t in tasks:
        timer.add(t)
    verify_wheel(timer)
    drive(timer, lambda: len(log) == len(tasks))
    assert sorted(tag for tag, _ in log) == list(range(len(tasks))), "each ran once"
    for i, ran_ns in log:
        assert ran_ns >= tasks[i].added_ns + delays[i] * 1_000_000, f"task {i} ran early"
    assert timer.size == 0
    verify_wheel(timer)


def test_kafka_timer_task_list_moves_and_cancels():
    """Kafka's TimerTaskListTest.testAll over three TimingWheels: adding a task's new entry
    to another wheel moves it (the total count is unchanged), cancel empties them all."""
    wheels = [TimingWheel(tick_ms=1, wheel_size=8, start_ms=0) for _ in range(3)]

    def total():
        return sum(w.size for w in wheels)

    tasks = []
    for i in range(10):
        task = Recorder(0, [])
        assert wheels[0].add(TimerTaskEntry(task, 10))
        assert total() == i + 1
        tasks.append(task)
    for task in tasks[:4]:
        assert wheels[1].add(TimerTaskEntry(task, 10)) and total() == 10
    assert [w.size for w in wheels] == [6, 4, 0]
    for task in tasks[4:]:
        assert wheels[2].add(TimerTaskEntry(task, 10)) and total() == 10
    assert [w.size for w in wheels] == [0, 4, 6]
    for task in tasks:
        task.cancel()
    assert total() == 0
    assert all(t.timer_task_entry is None for t in tasks)
    for w in wheels:
        assert w.advance_clock(100) == []
        verify_wheel(w._wheel)


def test_entries_exist_only_when_asked_for(timer):
    """The hot path makes no entry; one made on request names the current binding, and a
    new binding (adding again, cancelling) leaves it cancelled."""
    task = Recorder(50, [])
    assert task.timer_task_entry is None, "never added: no binding"
    timer.add(task)
    assert task._entry is None, "add made no TimerTaskEntry"
    first = task.timer_task_entry
    assert first is not None and not first.cancelled and first is task.timer_task_entry
    assert first.expiration_ms >= timer.current_time_ms + 50
    timer.add(task)
    assert first.cancelled and task.timer_task_entry is not first
    again = task.timer_task_entry
    first.remove()  # a stale entry's remove leaves the current binding alone
    assert timer.size == 1 and not again.cancelled
    again.remove()  # Kafka's remove: off the wheel, binding kept
    assert timer.size == 0 and not again.cancelled
    task.cancel()
    assert again.cancelled and task.timer_task_entry is None


def test_bad_tasks_and_delays_are_refused(timer):
    with pytest.raises(TypeError, match="delay_ms must be an int"):
        Recorder(1.5, [])
    with pytest.raises(TypeError, match="delay_ms must be an int"):
        Recorder(True, [])
    with pytest.raises(OverflowError):
        Recorder(2**64, [])
    task = Recorder(1, [])
    with pytest.raises(TypeError, match="delay_ms must be an int"):
        task.delay_ms = "5"
    with pytest.raises(TypeError, match="TimerTask"):
        timer.add(object())
    task.delay_ms = 2**62  # far beyond the wheel's ~70 years
    with pytest.raises(ValueError, match="beyond the wheel's range"):
        timer.add(task)
    assert timer.size == 0 and not task._pending


def test_the_wheel_grows_under_the_tasks(timer):
    """Past its first 1024 slots the wheel's array and its task table grow; every task keeps
    its slot and fires."""
    log = []
    tasks = [Recorder(5 + i % 50, log, i) for i in range(5000)]
    for t in tasks:
        timer.add(t)
    assert timer.size == 5000 and timer._capacity >= 5000
    for t in tasks[::3]:
        t.cancel()
    verify_wheel(timer)
    drive(timer, lambda: len(log) == len(tasks) - len(tasks[::3]))
    assert sorted(tag for tag, _ in log) == [i for i in range(5000) if i % 3]
