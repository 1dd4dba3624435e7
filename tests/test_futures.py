"""TimerHandle and Operation as futures (issue 22): the standard library's own helpers
(concurrent.futures.wait / as_completed, asyncio.wait / wait_for / gather / as_completed,
await), an awaiting caller that gives up, stop() deciding what it drops, pickling through a
multiprocessing Pool, and stats()["pending"] exact at every read."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import multiprocessing as mp
import pickle
import threading
import time

import numpy as np
import pytest
from helpers import settle, wait_for

import shmwheel
from shmwheel import ShmwheelError, TimerService
from shmwheel.service.caller import client as client_mod
from shmwheel.service.caller import outcomes as outcomes_mod

TASKS = {
    "noop": "shmwheel.examples.tasks:noop",
    "fail": "shmwheel.examples.tasks:fail",
    "slow": "shmwheel.examples.tasks:sleep_ms",
    "record": "shmwheel.examples.tasks:append_line",
}
LONG_MS = 60_000
KINDS = ["timer", "operation"]


def make(c, kind: str, delay_ms: float, task: str = "noop", payload=None):
    """A timer, or an operation that expires at `delay_ms` and then runs `task`."""
    if kind == "timer":
        return c.schedule(task, payload, delay_ms=delay_ms)
    return c.watch([f"k{time.monotonic_ns()}"], delay_ms, on_expire=task, payload=payload)


def ran(kind: str) -> str:
    return "ok" if kind == "timer" else "expired"


@pytest.fixture
def service():
    with TimerService(tasks=TASKS, capacity=4096, executors=2) as svc, svc.client() as c:
        yield svc, c


# -- concurrent.futures ------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_futures_helpers(service, kind):
    _, c = service
    soon, later, never = make(c, kind, 30), make(c, kind, 300), make(c, kind, LONG_MS)
    assert isinstance(soon, cf.Future) and not soon.running()
    done, not_done = cf.wait([soon, later, never], 10, cf.FIRST_COMPLETED)
    assert soon in done and never in not_done
    assert any(h is soon for h in done)  # the caller's own objects come back
    done, not_done = cf.wait([soon, later, never], 0.05, cf.ALL_COMPLETED)
    assert never in not_done
    done, not_done = cf.wait([soon, later], 10, cf.FIRST_EXCEPTION)  # no exception: all
    assert done == {soon, later} and not not_done
    assert soon.result(timeout=0) == ran(kind) and soon.exception() is None
    a, b = make(c, kind, 20), make(c, kind, 40)
    order = list(cf.as_completed([a, b, a, c.handle(a.id) if kind == "timer" else a], 10))
    assert len(order) == 2 and set(order) == {a, b}
    with pytest.raises(cf.TimeoutError):
        list(cf.as_completed([make(c, kind, 30), never], timeout=0.3))
    assert never.cancel() and never.cancelled() and never.result(0) == "cancelled"


@pytest.mark.parametrize("kind", KINDS)
def test_running_callbacks_and_errors(service, kind):
    _, c = service
    slow = make(c, kind, 0, "slow", 400)
    wait_for(slow.running)
    assert not slow.done() and not slow.cancel()
    seen: list[object] = []
    slow.add_done_callback(seen.append)
    dropped = []
    slow.add_done_callback(dropped.append)
    assert slow.remove_done_callback(dropped.append) == 1
    assert slow.result(10) == ran(kind) and not slow.running()
    wait_for(lambda: seen == [slow])
    assert not dropped
    bad = make(c, kind, 0, "fail")
    want = "error" if kind == "timer" else "expired"
    assert bad.result(10) == want  # the outcome string; the task's exception:
    assert isinstance(bad.exception(), shmwheel.TaskError)
    assert bad.exception().type_name == "RuntimeError"
    with pytest.raises(RuntimeError):
        bad.set_result("ok")


def test_done_means_result_at_once(service):
    """done() True while the notification is still on its way to the outcome thread:
    result(timeout=0) must not raise TimeoutError then."""
    _, c = service
    handles = [c.schedule("noop", delay_ms=200 + i % 30) for i in range(90)]
    for h in handles:  # asked before the end: each has its future, still undecided (on a
        with pytest.raises(cf.TimeoutError):  # loaded machine 20 ms was not always enough)
            h.result(timeout=0)
    left, early = poll_done(handles, pause=0.0)
    assert not left and not early, f"done() before the outcome {len(early)} times in 90"


def poll_done(handles: list, pause: float) -> tuple[list, list]:
    """Poll done() on each handle (for at most 10 s, sleeping `pause` between rounds); as
    each turns True, result(timeout=0) must give "ok". Returns (the handles never done,
    the ids whose result(timeout=0) raised TimeoutError)."""
    left, early = list(handles), []

    def all_done() -> bool:
        for h in list(left):
            if h.done():
                try:
                    assert h.result(timeout=0) == "ok"
                except cf.TimeoutError:
                    early.append(h.id)
                left.remove(h)
        return not left

    settle(all_done, 10, pause)
    return left, early


def test_done_is_false_while_the_listener_is_resolving(service, monkeypatch):
    """The race above, widened: the listener takes a waiter and sets its result 50 ms
    later. Meanwhile done() must stay False (the words say decided, but the future is
    another thread's to resolve), so that once it is True result(timeout=0) returns; the
    same for cancelled()."""
    svc, c = service
    real_pop = outcomes_mod.Outcomes._pop

    def slow_pop(self, h):
        fut = real_pop(self, h)
        if fut is not None and threading.current_thread().name.startswith("shmwheel-outcomes"):
            time.sleep(0.05)  # the listener, between taking the waiter and setting it
        return fut

    monkeypatch.setattr(outcomes_mod.Outcomes, "_pop", slow_pop)
    handles = [c.schedule("noop", delay_ms=20 + 10 * i) for i in range(6)]
    for h in handles:
        with pytest.raises(cf.TimeoutError):
            h.result(timeout=0)  # each has its waiter now
    left, early = poll_done(handles, pause=0.005)  # (the listener gets to each one first)
    assert not left and not early, f"done() True before result() could return: {early}"
    # and cancelled(), for cancels won by another client (the listener hears of them)
    gone = [c.schedule("noop", delay_ms=LONG_MS) for _ in range(4)]
    for h in gone:
        with pytest.raises(cf.TimeoutError):
            h.result(timeout=0)
    with svc.client() as other:
        for h in gone:
            assert other.cancel(h.id)
            time.sleep(0.02)  # (the slot is freed and the listener takes the waiter)
            wait_for(h.cancelled, 10, "the handle to learn it was cancelled", pause=0.001)
            assert h.done() and h.result(timeout=0) == "cancelled"


# -- asyncio -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_asyncio_helpers(service, kind):
    _, c = service

    async def main():
        one, two = make(c, kind, 20), make(c, kind, 60)
        assert await one == ran(kind)
        assert await asyncio.gather(two, make(c, kind, 10)) == [ran(kind)] * 2
        # wait() returns when the handles are decided, not at its timeout (a callback that
        # did not wake the loop left it asleep until then, or for ever with no timeout)
        loop = asyncio.get_running_loop()
        pair, t0 = [make(c, kind, 10), make(c, kind, 30)], loop.time()
        done, pending = await asyncio.wait(pair, timeout=10)
        assert done == set(pair) and not pending  # the handles themselves: Python 3.11
        assert {t.result() for t in done} == {ran(kind)}  # wraps only coroutines
        first = [make(c, kind, 10), make(c, kind, LONG_MS)]
        done, pending = await asyncio.wait(first, timeout=10, return_when="FIRST_COMPLETED")
        assert done == {first[0]} and pending == {first[1]}
        assert loop.time() - t0 < 10, "wait() returned only at its timeout"
        assert first[1].cancel()
        got = [await f for f in asyncio.as_completed([make(c, kind, 40), make(c, kind, 5)])]
        assert got == [ran(kind)] * 2
        assert await asyncio.wait_for(make(c, kind, 10), 10) == ran(kind)

    asyncio.run(main())


def test_a_callback_added_in_an_event_loop_runs_on_that_loop(service):
    """add_done_callback in a loop's thread: fn(handle) runs in that thread, on the loop
    (also for a handle decided already); outside a loop, on the outcome thread."""
    _, c = service
    seen: list[tuple[object, str]] = []

    def note(h):
        seen.append((h, threading.current_thread().name))

    async def main():
        h = c.schedule("noop", delay_ms=20)
        h.add_done_callback(note)
        while not seen:
            await asyncio.sleep(0.005)
        h.add_done_callback(note)  # decided: soon, on the loop, not inside this call
        assert len(seen) == 1
        await asyncio.sleep(0.01)
        return h

    h = asyncio.run(main())
    me = threading.current_thread().name
    assert seen == [(h, me), (h, me)]
    g = c.schedule("noop", delay_ms=20)
    g.add_done_callback(note)
    wait_for(lambda: len(seen) == 3)
    assert seen[2][0] is g and seen[2][1].startswith("shmwheel-outcomes"), seen[2]


@pytest.mark.parametrize("kind", KINDS)
def test_wait_for_timeout_cancels_in_the_service(service, kind, tmp_path):
    """A wait_for timeout (or a cancelled awaiting task) cancels an undecided timer in the
    service: cancelled() is True and its task never runs. One already running stays
    undecided until its real outcome."""
    svc, c = service
    log = tmp_path / "ran"

    async def main():
        h = make(c, kind, 300, "record", {"path": str(log)})
        seen = []
        h.add_done_callback(seen.append)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(h, 0.05)
        assert h.cancelled() and h.done() and h.result(0) == "cancelled"
        g = make(c, kind, 300, "record", {"path": str(log)})
        task = asyncio.ensure_future(_await(g))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert g.cancelled() and g.result(0) == "cancelled"
        busy = make(c, kind, 0, "slow", 500)
        while not busy.running():
            await asyncio.sleep(0.005)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(busy, 0.05)
        assert not busy.done() and not busy.cancelled()
        assert await busy == ran(kind)
        return h, seen

    h, seen = asyncio.run(main())
    wait_for(lambda: seen == [h])
    time.sleep(0.5)  # past both deadlines: neither ran
    assert not log.exists()
    if kind == "timer":
        assert svc.stats()["cancelled"] == 2


async def _await(h):
    return await h


# -- stop() ------------------------------------------------------------------------------
@pytest.mark.parametrize("journal", [False, True])
def test_stop_decides_what_it_drops(tmp_path, journal):
    opts = {"journal": tmp_path / "j"} if journal else {}
    log = tmp_path / "ran"
    svc = TimerService(tasks=TASKS, capacity=1000, executors=1, **opts).start()
    c = svc.client()
    try:
        h = c.schedule("record", {"path": str(log), "tag": "t"}, delay_ms=1500)
        op = c.watch(["stop"], LONG_MS, on_expire="noop")
        unasked = c.schedule("noop", delay_ms=LONG_MS)
        seen: list[object] = []
        h.add_done_callback(seen.append)
        got: list[str] = []
        waiter = threading.Thread(target=lambda: got.append(h.result()), daemon=True)
        waiter.start()

        async def wait_op():
            return await op

        aw = cf.ThreadPoolExecutor(1).submit(asyncio.run, wait_op())
        time.sleep(0.1)
    finally:
        svc.stop()
    waiter.join(5)
    assert got == ["stopped"] and seen == [h]
    assert aw.result(5) == "stopped"
    assert unasked.result(5) == "stopped" and unasked.done() and not unasked.cancelled()
    c.close()
    if journal:  # the timer is still pending in the journal: the next start re-arms it
        with TimerService(tasks=TASKS, capacity=1000, executors=1, **opts) as again:
            wait_for(lambda: again.stats()["completed"] >= 1, 10)
            assert log.read_text().count(" t ") == 1
    else:
        time.sleep(1.6)
        assert not log.exists()


# -- pickling ----------------------------------------------------------------------------
def _schedule_in_worker(name: str) -> list:
    with shmwheel.connect(name) as c:
        return [c.schedule("noop", delay_ms=50), c.watch(["p"], 50, on_expire="noop")]


def test_handles_pickle_through_a_pool():
    kept = None
    try:
        with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
            with mp.get_context("spawn").Pool(1) as pool:
                timer, op = pool.apply(_schedule_in_worker, (svc.name,))
            kept = timer._client  # connected here under the hood, and kept
            assert type(timer).__name__ == "TimerHandle" and type(op).__name__ == "Operation"
            assert op._client is kept and kept.name == svc.name
            assert timer.result(10) == "ok" and op.result(10) == "expired"
            with svc.client() as c:
                h = c.schedule("noop", delay_ms=LONG_MS)
                back = pickle.loads(pickle.dumps(h))
                assert back == h and back._client in (c, kept)  # a client here is reused
                assert back.cancel() and h.cancelled()
            data = pickle.dumps(timer)
    finally:
        if kept is not None:
            kept.close()
            client_mod._kept.remove(kept)
    with pytest.raises(ShmwheelError):
        pickle.loads(data)  # the service is gone


# -- stats()["pending"] ------------------------------------------------------------------
def test_pending_is_exact_at_every_read():
    with TimerService(tasks=TASKS, capacity=1 << 15, executors=1) as svc, svc.client() as c:
        total, wrong = 0, []
        for _ in range(40):
            c.schedule_many("noop", np.full(500, LONG_MS))
            total += 500
            for _ in range(50):
                got = svc.stats()["pending"]
                if got != total:
                    wrong.append(got - total)
        assert not wrong, f"{len(wrong)} of 2000 reads were off: {wrong[:10]}"
        assert c.stats()["pending"] == total


def test_a_won_cancel_is_cancelled_for_every_callback_whatever_the_client_does_next(service):
    """cancel() returned True, then the client closed at once: every done callback (added
    before the close) sees "cancelled", not the closed client's error."""
    svc, _ = service
    for _ in range(10):
        c = svc.client()
        h = c.schedule("noop", delay_ms=60_000)
        seen: list = []
        h.add_done_callback(lambda f: seen.append(f.exception() or f.result()))
        assert h.cancel()
        c.close()
        wait_for(lambda: seen)
        assert seen == ["cancelled"], seen
