"""Kafka's semantics under threads, on whichever core this process runs (the native one, or
the oracle, tests/kafka_oracle.py: test_kafka_paths.py runs this file that way):
adds from many threads while another thread advances; cancel racing fire; the purgatory's
completion under contention (KAFKA-6653's missed wake-up, KAFKA-19312's on_complete racing
try_complete); watch lists whose keys run Python code. Exactly once, never early."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import numpy as np
from helpers import repeat_until

from shmwheel import DelayedOperation, DelayedOperationPurgatory, SystemTimer, TimerTask, WheelCore


def verify_wheel(wheel):
    WheelCore.attach(np.frombuffer(bytearray(wheel._snapshot()), dtype=np.int64)).verify()


class Stamp(TimerTask):
    """Counts its runs and remembers when it was last added and when it ran."""

    runs: Counter
    lock = threading.Lock()

    def __init__(self, delay_ms, i, runs):
        super().__init__(delay_ms)
        self.i, self.runs, self.added_ns, self.ran_ns = i, runs, 0, []

    def run(self):
        with self.lock:
            self.runs[self.i] += 1
        self.ran_ns.append(time.monotonic_ns())


def test_adds_from_many_threads_while_another_advances():
    """Four threads add 1500 tasks each (every third one added twice: it moves) while a
    fifth thread advances the clock. Every task runs exactly once, never before the deadline
    of its last add, and the wheel is whole afterwards."""
    timer = SystemTimer("adders", tick_ms=1, wheel_size=8)
    runs: Counter = Counter()
    tasks = [Stamp(0, i, runs) for i in range(6000)]
    rng = random.Random(5)
    delays = [rng.randrange(0, 60) for _ in tasks]
    go = threading.Barrier(5)

    def adder(part):
        go.wait()
        for i in part:
            t = tasks[i]
            if i % 3 == 0:
                t.delay_ms = 200  # first add far out, then moved in by the second
                timer.add(t)
            t.delay_ms = delays[i]
            t.added_ns = time.monotonic_ns()
            timer.add(t)

    adders = [threading.Thread(target=adder, args=(range(k, 6000, 4),)) for k in range(4)]
    for a in adders:
        a.start()
    go.wait()
    try:
        repeat_until(
            lambda: timer.advance_clock(5),
            lambda: sum(runs.values()) >= len(tasks) and timer.size == 0,
            30,
        )
        for a in adders:
            a.join()
        time.sleep(0.25)  # a task run twice would show by now (the first adds were 200 ms)
        timer.advance_clock(0)
        timer.shutdown()
        assert [runs[i] for i in range(len(tasks))] == [1] * len(tasks), "each ran once"
        for t in tasks:
            assert t.ran_ns[0] >= t.added_ns + t.delay_ms * 1_000_000, f"task {t.i} ran early"
        assert timer.size == 0
        verify_wheel(timer)
    finally:
        timer.shutdown()


def test_cancel_races_fire_one_winner_each():
    """Three threads cancel 3000 tasks each near its deadline while the reaper fires them:
    for every task exactly one of the two wins (it ran, or its cancel found it pending)."""
    timer = SystemTimer("race", tick_ms=1)
    runs: Counter = Counter()
    n = 3000
    tasks = [Stamp(80 + (i * 150) // n, i, runs) for i in range(n)]
    won = [False] * n
    start_ns = time.monotonic_ns()
    for t in tasks:
        timer.add(t)
    rng = random.Random(7)
    jitter = [rng.uniform(-2.0, 2.0) for _ in tasks]

    def canceller(part):
        for i in part:
            aim = start_ns + (tasks[i].delay_ms + jitter[i]) * 1_000_000
            wait = (aim - time.monotonic_ns()) / 1e9
            if wait > 0:
                time.sleep(wait)
            won[i] = tasks[i]._cancel()

    cancellers = [threading.Thread(target=canceller, args=(range(k, n, 3),)) for k in range(3)]
    reaper_stop = threading.Event()

    def reaper():
        while not reaper_stop.is_set():
            timer.advance_clock(5)

    r = threading.Thread(target=reaper)
    r.start()
    for c in cancellers:
        c.start()
    for c in cancellers:
        c.join()
    time.sleep(0.05)
    reaper_stop.set()
    r.join()
    timer.advance_clock(0)
    timer.shutdown()  # runs what was handed to the runner
    both = [i for i in range(n) if won[i] and runs[i]]
    neither = [i for i in range(n) if not won[i] and not runs[i]]
    assert not both, f"cancelled and ran: {both[:5]}"
    assert not neither, f"neither cancelled nor ran: {neither[:5]}"
    assert max(runs.values(), default=1) == 1
    assert 0 < sum(won) < n, "the race was not run (every cancel won or every fire won)"
    assert timer.size == 0
    verify_wheel(timer)


class Needs(DelayedOperation):
    """Completes once `count` reaches `need`; try_complete dawdles with the lock held, so
    signals arrive while another thread holds it."""

    def __init__(self, need, delay_ms=100_000):
        super().__init__(delay_ms)
        self.need, self.count, self.completions, self.expirations = need, 0, 0, 0
        self.count_lock = threading.Lock()

    def try_complete(self):
        ready = self.count >= self.need
        time.sleep(0.0005)
        return self.force_complete() if ready else False

    def on_complete(self):
        self.completions += 1

    def on_expiration(self):
        self.expirations += 1


def test_maybe_try_complete_never_misses_a_wake_up():
    """KAFKA-6653: threads that find the lock taken leave a note instead of blocking; the
    holder retries. The last signal is never lost: every operation completes, once."""
    for _ in range(30):
        op = Needs(need=6)
        go = threading.Barrier(6)

        def signal(op=op, go=go):
            go.wait()
            with op.count_lock:
                op.count += 1
            op.maybe_try_complete()

        threads = [threading.Thread(target=signal) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert op.is_completed, "the completing signal was lost (missed wake-up)"
        assert op.completions == 1 and op.expirations == 0


class Watchful(DelayedOperation):
    """Never completes by a check; records whether its completion ever overlapped a
    try_complete running in another thread."""

    def __init__(self, delay_ms):
        super().__init__(delay_ms)
        self.inside, self.overlaps, self.completions, self.expirations = None, 0, 0, 0
        self.expired_ns = 0

    def try_complete(self):
        self.inside = threading.get_ident()
        time.sleep(0.001)
        self.inside = None
        return False

    def on_complete(self):
        if self.inside not in (None, threading.get_ident()):
            self.overlaps += 1
        self.completions += 1

    def on_expiration(self):
        self.expirations += 1
        self.expired_ns = time.monotonic_ns()


def test_expiry_never_completes_during_a_try_complete():
    """KAFKA-19312: expiry completes under the operation's lock, so on_complete never runs
    while another thread is inside try_complete; it runs exactly once, and not early."""
    with DelayedOperationPurgatory("overlap") as p:
        for _ in range(5):
            op = Watchful(25)
            added = time.monotonic_ns()
            assert not p.try_complete_else_watch(op, ["k"])
            # try_complete, lock held ~1 ms, over and over
            repeat_until(lambda: p.check_and_complete("k"), lambda: op.is_completed, 5)
            time.sleep(0.01)
            assert op.completions == 1 and op.expirations == 1
            assert op.overlaps == 0, "on_complete ran while try_complete ran elsewhere"
            assert op.expired_ns >= added + 25_000_000, "expired early"


class SlowKey:
    """A key whose __eq__ is Python code that lets other threads run mid-lookup."""

    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        time.sleep(0)
        return isinstance(other, SlowKey) and other.name == self.name


class Flag(DelayedOperation):
    def __init__(self):
        super().__init__(100_000)
        self.ready, self.completions = False, 0

    def try_complete(self):
        return self.force_complete() if self.ready else False

    def on_complete(self):
        self.completions += 1

    def on_expiration(self):
        pass


def test_watch_lists_with_python_keys_lose_no_operation():
    """One thread watches operations on a key whose __eq__ releases the GIL, readying each
    once watched; another completes and drops them from the list (forgetting the key when
    it empties) all the while. No watch may land in a list being forgotten: at the end one
    check completes every operation left."""
    p = DelayedOperationPurgatory("keys", reaper_enabled=False, timer_enabled=False)
    ops = [Flag() for _ in range(3000)]
    stop = threading.Event()

    def watcher():
        for op in ops:
            p.try_complete_else_watch(op, [SlowKey("k")])
            op.ready = True
        stop.set()

    def checker():
        while not stop.is_set():
            p.check_and_complete(SlowKey("k"))

    threads = [threading.Thread(target=watcher), threading.Thread(target=checker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for op in ops:
        op.ready = True
    p.check_and_complete(SlowKey("k"))
    lost = [i for i, op in enumerate(ops) if not op.is_completed]
    assert not lost, f"{len(lost)} watches were lost, e.g. {lost[:5]}"
    assert all(op.completions == 1 for op in ops)
    assert p.watched() == 0
    p.shutdown()
