"""The peers shmwheel is measured against, each driven the way its users drive it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import sched
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

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


# -- Redis sorted-set delayed queue -----------------------------------------------------

# Claim what is due, atomically: the members scored <= now are the lowest-ranked ones, so
# removing ranks 0..k-1 removes exactly the k returned (O(log n + k), no unpack() limit).
CLAIM_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #due > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #due - 1) end
return due
"""


def redis_status() -> tuple[bool, str]:
    """(usable, why): whether a redis-server binary is on PATH and the `redis` client
    module is importable (without importing it)."""
    import importlib.util
    import shutil

    if shutil.which("redis-server") is None:
        return False, (
            "Redis sorted-set baseline skipped: no redis-server binary on PATH "
            "(apt-get install redis-server)"
        )
    if importlib.util.find_spec("redis") is None:
        return False, (
            "Redis sorted-set baseline skipped: the redis client module is not "
            "installed (pip install 'shmwheel[bench]')"
        )
    return True, "Redis sorted-set baseline: redis-server on 127.0.0.1, started by the bench"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parent_death_signal() -> Callable[[], None] | None:
    """Linux: a preexec_fn that makes the child get SIGTERM if the bench dies without
    stopping it (SIGKILL). The prctl function is looked up here, in the parent, so the
    child between fork and exec only makes one libc call (no import, no lock)."""
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        sig = int(signal.SIGTERM)
    except (OSError, AttributeError):
        return None

    def set_pdeathsig() -> None:  # pragma: no cover - runs in the child
        prctl(1, sig)  # PR_SET_PDEATHSIG

    return set_pdeathsig


class RedisDelayQueue:
    """The idiomatic Redis delayed queue: one sorted set, member = job id, score = due
    time (Unix seconds, ``time.time()``).

    A private ``redis-server`` (``--port <free> --bind 127.0.0.1 --save '' --appendonly no
    --daemonize no``, working dir a temp dir) is started by the constructor and stopped by
    ``close()`` (also the context manager's exit, so on exceptions and Ctrl-C): SIGTERM,
    then SIGKILL after 5 s, then wait; the temp dir is removed.

    ``schedule`` is one ``ZADD key score member`` round trip; ``schedule_many`` sends
    multi-member ``ZADD``s of up to ``chunk`` members through one pipeline. ``cancel`` is
    ``ZREM``; ``cancel_many`` pipelined multi-member ``ZREM``s. ``start_dispatcher`` runs
    a thread (own connection) that claims due members atomically with a Lua script
    (``ZRANGEBYSCORE key -inf now LIMIT 0 claim`` + ``ZREMRANGEBYRANK`` of those), calls
    ``on_fire(member)`` for each, claims again at once if it got any, and otherwise sleeps
    ``POLL_S`` (1 ms: the usual short poll; a blocking wait does not exist for "score <=
    now")."""

    POLL_S = 0.001
    CLAIM = 1000  # members claimed per script call
    KEY = "delayed"

    def __init__(self) -> None:
        import subprocess
        import tempfile

        import redis  # lazy: an optional dependency (the bench extra)

        self._redis = redis
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._tmp = tempfile.mkdtemp(prefix="shmwheel-bench-redis-")
        self.proc: subprocess.Popen | None = None
        self.r: Any = None  # a redis.Redis once the server answers (redis is imported lazily)
        try:
            for attempt in range(3):  # the free port may be taken before the server binds
                self.port = _free_port()
                log = open(os.path.join(self._tmp, "redis.log"), "wb")  # noqa: SIM115
                try:
                    self.proc = subprocess.Popen(
                        [
                            "redis-server",
                            "--port",
                            str(self.port),
                            "--bind",
                            "127.0.0.1",
                            "--save",
                            "",
                            "--appendonly",
                            "no",
                            "--daemonize",
                            "no",
                            "--dir",
                            self._tmp,
                        ],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=self._tmp,
                        start_new_session=True,  # Ctrl-C reaches only us
                        preexec_fn=_parent_death_signal(),
                    )  # noqa: PLW1509 - one prctl call
                finally:
                    log.close()
                if self._wait_ping(5.0):
                    break
                self._stop_server()
                if attempt == 2:
                    with open(os.path.join(self._tmp, "redis.log"), "rb") as f:
                        tail = f.read()[-2000:].decode(errors="replace")
                    raise RuntimeError(f"redis-server did not answer PING:\n{tail}")
            client: Any = self.r  # set by _wait_ping
            self._claim = client.register_script(CLAIM_LUA)
        except BaseException:
            self.close()
            raise

    def _wait_ping(self, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        r = self._redis.Redis(host="127.0.0.1", port=self.port)
        while time.monotonic() < end:
            if self.proc is None or self.proc.poll() is not None:
                r.close()
                return False
            try:
                if r.ping():
                    self.r = r
                    return True
            except self._redis.ConnectionError:
                time.sleep(0.01)
        r.close()
        return False

    # -- producer side
    def schedule(self, delay_s: float, member: str) -> str:
        self.r.zadd(self.KEY, {member: time.time() + delay_s})
        return member

    def schedule_many(self, delays_s: list[float], members: list[str], chunk: int = 10_000) -> None:
        now = time.time()
        self.schedule_many_at([now + d for d in delays_s], members, chunk)

    def schedule_many_at(
        self, deadlines: list[float], members: list[str], chunk: int = 10_000
    ) -> None:
        pipe = self.r.pipeline(transaction=False)
        for i in range(0, len(members), chunk):
            pipe.zadd(
                self.KEY, dict(zip(members[i : i + chunk], deadlines[i : i + chunk], strict=True))
            )
        pipe.execute()

    def cancel(self, member: str) -> bool:
        return self.r.zrem(self.KEY, member) == 1

    def cancel_many(self, members: list[str], chunk: int = 10_000) -> int:
        pipe = self.r.pipeline(transaction=False)
        for i in range(0, len(members), chunk):
            pipe.zrem(self.KEY, *members[i : i + chunk])
        return sum(pipe.execute())

    def pending(self) -> int:
        return int(self.r.zcard(self.KEY))

    def used_memory(self) -> int:
        return int(self.r.info("memory")["used_memory"])

    # -- consumer side
    def start_dispatcher(self, on_fire: Callable[[bytes], None]) -> None:
        r = self._redis.Redis(host="127.0.0.1", port=self.port)
        claim = r.register_script(CLAIM_LUA)
        key, n, poll, stop = self.KEY, self.CLAIM, self.POLL_S, self._stop

        def loop() -> None:
            try:
                while not stop.is_set():
                    due = claim(keys=[key], args=[time.time(), n])
                    if due:
                        for m in due:
                            on_fire(m)
                    else:
                        time.sleep(poll)
            except BaseException as e:  # noqa: BLE001 - reported by close()/check()
                if not stop.is_set():
                    self._error = e
            finally:
                r.close()

        self._thread = threading.Thread(target=loop, daemon=True, name="redis-dispatcher")
        self._thread.start()

    def check(self) -> None:
        """Raise what the dispatcher thread died of, if it did."""
        if self._error is not None:
            raise RuntimeError("the Redis dispatcher thread failed") from self._error

    # -- stop
    def _stop_server(self) -> None:
        import subprocess

        p, self.proc = self.proc, None
        if self.r is not None:
            self.r.close()
            self.r = None
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def close(self) -> None:
        import shutil

        self._stop.set()
        try:
            if self._thread is not None:
                self._thread.join(10)
        finally:
            self._stop_server()
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
