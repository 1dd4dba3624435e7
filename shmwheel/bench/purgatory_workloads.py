"""W10: the purgatory across processes beside the in-process one and asyncio (one
repetition per call, ``{figure: value}`` back).

``svc_purgatory``: watch + complete. Per call: n times { watch one operation on its own
key; check_and_complete that key }. Batched: n operations watched on n / BATCH keys
(BATCH per key), then one check_and_complete per key completes BATCH at once. Each rate
is end to end: until every operation's task has run (shmwheel: the executors' count of
runs; the in-process purgatory runs on_complete inside check_and_complete; asyncio: the
future's callback). The peers do the same work in one process:
``DelayedOperationPurgatory`` (Kafka's, thread-safe, its timer running) with operations
whose try_complete checks a counter, and asyncio futures with a ``call_later`` timeout
cancelled on completion.

``svc_purgatory_expire``: watch + expire: n operations with a 20 ms timeout, none
completed, until every one has expired and its task has run.
"""

from __future__ import annotations

import asyncio
import time

from ..kafka.purgatory import DelayedOperation, DelayedOperationPurgatory
from ..service.supervisor.supervisor import TimerService
from .workloads import Figures

S = "shmwheel"
BATCH = 100  # operations per key in the batched shape
EXPIRE_MS = 20
TASKS = {"noop": "shmwheel.examples.tasks:noop"}


def _service(n: int) -> TimerService:
    return TimerService(tasks=TASKS, capacity=max(4 * n, 10_000), watch_capacity=max(2 * n, 1024))


def _wait_runs(svc: TimerService, n: int, timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while svc.stats()["completed"] < n:
        if time.monotonic() > end:
            raise RuntimeError(f"only {svc.stats()['completed']} of {n} operations ran")
        time.sleep(0.001)


class _Op(DelayedOperation):
    """Kafka's shape: complete once the counter reaches `required`."""

    def __init__(self, delay_ms: int, required: int, done: list[int]) -> None:
        super().__init__(delay_ms)
        self.count, self.required, self.done = 0, required, done

    def try_complete(self) -> bool:
        return self.count >= self.required and self.force_complete()

    def on_complete(self) -> None:
        self.done[0] += 1

    def on_expiration(self) -> None:
        self.done[0] += 1


def _inprocess(n: int, per_key: int, expire: bool) -> float:
    """watch + complete (or expire) rate of Kafka's purgatory, in process."""
    done = [0]
    p = DelayedOperationPurgatory("bench")
    try:
        t0 = time.perf_counter()
        keys = n // per_key
        for k in range(keys):
            ops = [_Op(EXPIRE_MS if expire else 60_000, 1, done) for _ in range(per_key)]
            for op in ops:
                p.try_complete_else_watch(op, [k])
            if not expire:
                for op in ops:
                    op.count = 1
                p.check_and_complete(k)
        end = time.monotonic() + 120
        while done[0] < n and time.monotonic() < end:
            time.sleep(0.0005)
        return n / (time.perf_counter() - t0)
    finally:
        p.shutdown()


def _asyncio(n: int, per_key: int, expire: bool) -> float:
    """The same with asyncio futures and call_later timeouts."""

    async def run() -> float:
        loop = asyncio.get_running_loop()
        watchers: dict[int, list[tuple[asyncio.Future[str], asyncio.TimerHandle]]] = {}
        finished = 0
        all_done = loop.create_future()

        def settle(f: asyncio.Future[str]) -> None:
            nonlocal finished
            finished += 1
            if finished == n and not all_done.done():
                all_done.set_result(None)

        def expire_one(f: asyncio.Future[str]) -> None:
            if not f.done():
                f.set_result("expired")

        t0 = time.perf_counter()
        for k in range(n // per_key):
            lst = watchers.setdefault(k, [])
            for _ in range(per_key):
                f: asyncio.Future[str] = loop.create_future()
                f.add_done_callback(settle)
                th = loop.call_later((EXPIRE_MS if expire else 60_000) / 1000, expire_one, f)
                lst.append((f, th))
            if not expire:
                for f, th in watchers.pop(k):
                    th.cancel()
                    f.set_result("completed")
        await all_done
        return n / (time.perf_counter() - t0)

    return asyncio.run(run())


def _shmwheel(n: int, per_key: int, expire: bool) -> tuple[float, float]:
    """(client-side rate of the loop, end-to-end rate until every task ran)."""
    with _service(n) as svc, svc.client() as c:
        c.watch(["warm-up"], 60_000, on_complete="noop")
        c.check_and_complete("warm-up")
        _wait_runs(svc, 1)
        base = svc.stats()["completed"]
        t0 = time.perf_counter()
        for k in range(n // per_key):
            key = f"k{k}"
            for _ in range(per_key):
                c.watch(
                    [key], EXPIRE_MS if expire else 60_000, on_complete="noop", on_expire="noop"
                )
            if not expire:
                c.check_and_complete(key)
        loop_s = time.perf_counter() - t0
        _wait_runs(svc, base + n)
        return n / loop_s, n / (time.perf_counter() - t0)


def svc_purgatory(n: int) -> Figures:
    f: Figures = {}
    for shape, per_key in (("per call", 1), (f"batched ({BATCH} per key)", BATCH)):
        client, e2e = _shmwheel(n, per_key, expire=False)
        f[f"{S} watch + complete, {shape}"] = e2e
        f[f"{S} watch + complete, {shape}, client loop"] = client
        f[f"in-process purgatory watch + complete, {shape}"] = _inprocess(n, per_key, False)
        f[f"asyncio watch + complete, {shape}"] = _asyncio(n, per_key, False)
        f[f"ratio: {S} / in-process purgatory, {shape}"] = (
            e2e / f[f"in-process purgatory watch + complete, {shape}"]
        )
    return f


def svc_purgatory_expire(n: int) -> Figures:
    client, e2e = _shmwheel(n, 1, expire=True)
    inproc = _inprocess(n, 1, True)
    return {
        f"{S} watch + expire": e2e,
        f"{S} watch + expire, client loop": client,
        "in-process purgatory watch + expire": inproc,
        "asyncio watch + expire": _asyncio(n, 1, True),
        f"ratio: {S} / in-process purgatory, expire": e2e / inproc,
    }


def purgatory_call(n: int) -> Figures:
    """Kafka's DelayedOperationPurgatory in process (its reaper running) against asyncio
    futures with call_later timeouts, per call: n times { watch one operation on its own
    key; check_and_complete that key }, until every completion ran (W10's peers, by the
    same functions)."""
    inproc = _inprocess(n, 1, False)
    aio = _asyncio(n, 1, False)
    return {
        "in-process purgatory watch + complete, per call": inproc,
        "asyncio watch + complete, per call": aio,
        "ratio: in-process purgatory / asyncio, per call": inproc / aio,
    }
