"""The peers shmwheel is measured against, each driven the way its users drive it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import sched
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_REMOVED = None  # heapq recipe: a cancelled entry's callback is replaced by this marker


class HeapTimer:
    """A heapq + threading.Condition timer thread: the classic hand-rolled Python timer.

    ``schedule`` pushes ``[deadline, seq, fn]``; ``cancel`` marks the entry (the heapq
    docs' lazy-deletion recipe); a daemon thread sleeps until the earliest deadline and
    runs what is due."""

    def __init__(self) -> None:
        self._heap: list[list] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="heap-timer")
        self._thread.start()

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> list:
        entry = [time.monotonic() + delay_s, next(self._seq), fn]
        with self._cond:
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify()
        return entry

    def schedule_many(self, delays_s: list[float], fn: Callable[[], None]) -> list[list]:
        """A batch under one lock and one wake-up: heapify into an empty heap, else push
        each entry (O(1) on average for random deadlines). Not part of the classic
        recipe: added so the service's ``schedule_many`` has a batch peer."""
        now = time.monotonic()
        seq = self._seq
        entries = [[now + d, next(seq), fn] for d in delays_s]
        with self._cond:
            heap = self._heap
            old_head = heap[0] if heap else None
            if not heap:
                heap.extend(entries)
                heapq.heapify(heap)
            else:
                push = heapq.heappush
                for e in entries:
                    push(heap, e)
            if heap and heap[0] is not old_head:
                self._cond.notify()
        return entries

    def cancel(self, entry: list) -> None:
        entry[2] = _REMOVED

    def _loop(self) -> None:
        heap = self._heap
        while True:
            with self._cond:
                while not self._stop and (not heap or heap[0][0] > time.monotonic()):
                    self._cond.wait(None if not heap else heap[0][0] - time.monotonic())
                if self._stop:
                    return
                now = time.monotonic()
                due = []
                while heap and heap[0][0] <= now:
                    due.append(heapq.heappop(heap)[2])
            for fn in due:
                if fn is not _REMOVED:
                    fn()

    def __enter__(self) -> HeapTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()


def asyncio_loop() -> asyncio.AbstractEventLoop:
    """A fresh event loop; the caller closes it."""
    return asyncio.new_event_loop()


@contextmanager
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """``asyncio_loop()`` closed on exit."""
    loop = asyncio_loop()
    try:
        yield loop
    finally:
        loop.close()


def sched_scheduler(skip_zero_sleep: bool = False) -> sched.scheduler:
    """The stdlib ``sched.scheduler`` on the monotonic clock (its default): ``enter`` to
    schedule, ``cancel(event)`` to cancel (a list remove and re-heapify: O(n)), ``run()``
    to sleep until each event and run it.

    ``run()`` calls ``delayfunc(0)`` after every event ("let other threads run"); with the
    default ``time.sleep`` that is a real sleep (~50-70 µs of timer slack on Linux), which
    caps it near 15k events/s. ``skip_zero_sleep`` passes a delayfunc that returns at once
    for 0 and sleeps otherwise: the kinder choice for the baseline, used for W4."""
    if skip_zero_sleep:
        def delay(d: float, sleep: Callable[[float], None] = time.sleep) -> None:
            if d > 0:
                sleep(d)

        return sched.scheduler(time.monotonic, delay)
    return sched.scheduler(time.monotonic, time.sleep)


def zero_sleep_ms(k: int = 2000) -> float:
    """What one ``time.sleep(0)`` costs here (ms): what default ``sched.run()`` adds per
    event."""
    t = time.perf_counter()
    for _ in range(k):
        time.sleep(0)
    return (time.perf_counter() - t) / k * 1000
