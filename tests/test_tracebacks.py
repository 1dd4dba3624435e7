"""A failed task's exception reaches its handle (issue 22): ``exception()`` gives a
``TaskError`` with the type name, message and traceback text the executor recorded
(shmwheel/native/errlog.c, shmwheel/service/tracebacks.py), in the scheduling process and in
another; a flood of failures that overwrites the logs gives the documented "no longer
known", never another timer's or another run's record; a record torn by a writer's death
is never read as valid; damage is named."""

from __future__ import annotations

import concurrent.futures as cf
import mmap
import multiprocessing as mp
import os
import pickle
import random
import signal
import time

import numpy as np
import pytest
from helpers import wait_for

import shmwheel
from shmwheel import TaskError, TimerService
from shmwheel import _native as N
from shmwheel.errors import RemoteTraceback
from shmwheel.service import tracebacks as TB
from shmwheel.service.caller import client as client_mod
from shmwheel.wheel import constants as K

# run alone: kills land mid-write and repeating runs are counted by time
pytestmark = pytest.mark.exclusive

TASKS = {
    "boom": "tests.error_tasks:boom",
    "run_fails": "tests.error_tasks:run_fails",
    "huge": "tests.error_tasks:huge",
    "bad_str": "tests.error_tasks:bad_str",
    "noop": "shmwheel.examples.tasks:noop",
    "slow": "shmwheel.examples.tasks:sleep_ms",
}
BOOM = "tests.error_tasks.Boom"


def assert_boom(e: BaseException | None, payload: object, h: int) -> None:
    """`e` is the TaskError of tests.error_tasks.boom(payload), the task of timer h."""
    assert isinstance(e, TaskError) and isinstance(e, shmwheel.ShmwheelError)
    assert (e.id, e.run, e.task, e.type_name) == (h, 1, "boom", BOOM)
    assert e.message == f"boom {payload}"
    assert e.traceback is not None
    assert e.traceback.startswith("Traceback (most recent call last):")
    assert "in _deeper" in e.traceback and 'raise Boom(f"boom {payload}")' in e.traceback
    assert e.traceback.endswith(f"{BOOM}: boom {payload}\n")
    assert isinstance(e.__cause__, RemoteTraceback) and e.traceback in str(e.__cause__)
    assert str(e).startswith(f"{BOOM}: boom {payload} (task 'boom'")


# -- in the service -----------------------------------------------------------------------
def test_a_failed_task_s_exception_reaches_its_handle():
    with TimerService(tasks=TASKS, capacity=4096, executors=2) as svc, svc.client() as c:
        h = c.schedule("boom", 7, delay_ms=10)
        assert h.result(10) == "error"  # the outcome string, as documented
        assert_boom(h.exception(), 7, h.id)
        assert h.exception() is h.exception()  # kept on the handle
        # a handle rebuilt from its id, asked after the end, reads the same record
        assert_boom(c.handle(h.id).exception(), 7, h.id)
        # operations: the task of either outcome
        op = c.watch(["k1"], 10, on_expire="boom", payload="x")
        assert op.result(10) == "expired"
        assert_boom(op.exception(), "x", op.id)
        op2 = c.watch(["k2"], 60_000, on_complete="boom", payload="y")
        assert c.check_and_complete("k2") == 1
        assert op2.result(10) == "completed"
        assert_boom(op2.exception(), "y", op2.id)
        ok = c.schedule("noop", delay_ms=5)
        assert ok.result(10) == "ok" and ok.exception() is None
        # an exception whose str() raises, and one over the limits
        bad = c.schedule("bad_str", delay_ms=5)
        assert bad.result(10) == "error"
        e = bad.exception()
        assert e.type_name == "tests.error_tasks.BadStr" and "str() of the exception" in e.message
        big = c.schedule("huge", 200, delay_ms=5)
        assert big.result(10) == "error"
        e = big.exception()
        assert e.type_name == "RuntimeError"
        assert len(e.message.encode()) <= TB.MESSAGE_MAX and e.message.startswith("ééé")
        assert "bytes, cut]" in e.message
        total = sum(len(s.encode()) for s in (e.type_name, e.message, e.traceback))
        assert total <= TB.TEXT_MAX
        assert e.traceback.startswith("[... a traceback of ")
        assert e.traceback.endswith(" end\n")  # its end is kept


def test_first_exception_and_as_completed_see_a_failed_task():
    """concurrent.futures.wait(FIRST_EXCEPTION) returns at the first task that raised, as
    it does for a ProcessPoolExecutor's futures."""
    with TimerService(tasks=TASKS, capacity=4096, executors=2) as svc, svc.client() as c:
        later = c.schedule("noop", delay_ms=5_000)  # no timeout: were the failure not
        bad = c.schedule("boom", 1, delay_ms=30)  # seen, wait() would return both at 5 s
        done, not_done = cf.wait([later, bad], return_when=cf.FIRST_EXCEPTION)
        assert done == {bad} and not_done == {later}
        assert later.cancel()
        assert list(cf.as_completed([bad, bad], 1)) == [bad]


def test_a_repeating_timer_gives_the_run_that_ended_it():
    """Every run raises; a cancel during run r makes r the last: exception() is run r's
    record, not an earlier run's."""
    with TimerService(tasks=TASKS, capacity=4096, executors=2) as svc, svc.client() as c:
        h = c.schedule("run_fails", 150, delay_ms=5, every_ms=10)
        wait_for(lambda: svc.stats()["task_errors"] >= 2)
        wait_for(h.running)
        assert not h.cancel()  # in flight: this run goes on, no further runs
        assert h.result(10) == "error"
        e = h.exception()
        # the run in flight at the cancel may be run 2 still (ended, not yet settled): the
        # last run is the count of runs that raised, whichever it was
        wait_for(lambda: svc.stats()["in_flight"] == 0)
        assert e.run >= 2 and e.run == svc.stats()["task_errors"], (e, svc.stats())
        assert e.message == f"failed in run {e.run}"
        assert e.type_name == "ValueError" and e.task == "run_fails"


def _exception_elsewhere(data: bytes) -> TaskError:
    """In a pool worker: unpickle a handle and return its exception (pickled back)."""
    h = pickle.loads(data)
    e = h.exception(10)
    for c in list(client_mod._kept):
        c.close()
    return e


def test_the_exception_reaches_another_process():
    with TimerService(tasks=TASKS, capacity=4096, executors=1) as svc, svc.client() as c:
        h = c.schedule("boom", "far", delay_ms=10)
        assert h.result(10) == "error"
        assert_boom(h.exception(), "far", h.id)
        with mp.get_context("spawn").Pool(1) as pool:
            e = pool.apply(_exception_elsewhere, (pickle.dumps(h),))
        assert_boom(e, "far", h.id)  # read there, and pickled back whole


def test_a_flood_of_failures_gives_no_longer_known_never_another_record():
    """Each executor keeps its last 64 records. 20 failures, then 320 more, none asked
    about until all ran: the 20 and most of the flood are "no longer known" (a TaskError
    without texts); what is found is the timer's own record."""
    execs, flood = 2, 320
    with TimerService(tasks=TASKS, capacity=8192, executors=execs) as svc, svc.client() as c:
        # every slot reserved before any ends, so none is used again (its outcome stays)
        first = [c.schedule("boom", f"first {i}", delay_ms=50) for i in range(20)]
        rest = [c.schedule("boom", f"flood {i}", delay_ms=600) for i in range(flood)]
        wait_for(lambda: svc.stats()["task_errors"] == 20 + flood, 60)
        found = 0
        for i, h in enumerate(first + rest):
            assert h.result(10) == "error"
            e = h.exception()
            assert isinstance(e, TaskError) and e.id == h.id
            if e.traceback is None:
                assert e.type_name is None and e.message is None
                assert "no longer known" in str(e) and "last 64 failed tasks" in str(e)
            else:
                found += 1
                assert h in rest, f"{h} was overwritten by {flood} later failures"
                assert_boom(e, f"flood {i - 20}", h.id)
        assert 0 < found <= execs * TB.RECORDS


# -- the log itself -------------------------------------------------------------------------
def region(executors: int = 2) -> np.ndarray:
    return np.zeros(K.ERR_REGION_HEADER + executors * K.ERR_LOG_WORDS, np.int64)


def write(r, x, h, run=1, flags=0, msg="m"):
    return N.errlog_write(r, x, h, run, 0, flags, b"T", msg.encode(), b"tb\n")


def test_the_newest_record_of_a_repeating_timer_or_stale():
    r, h = region(), (5 << 32) | 9
    write(r, 0, h, 1, K.ERF_REPEATING, "run 1")
    write(r, 1, h, 2, K.ERF_REPEATING, "run 2")
    got = N.errlog_find(r, h)
    assert got[0] == K.ERRLOG_FOUND and got[3] == 2 and got[7] == b"run 2"
    for i in range(TB.RECORDS):  # log 1 overwrites run 2's record
        write(r, 1, 1000 + i)
    got = N.errlog_find(r, h)
    assert got[0] == K.ERRLOG_STALE and got[3] == 1, "run 1's record given as the last"
    # a one-shot's record is its only one: found whatever the other logs evicted
    write(r, 0, 77)
    for i in range(2 * TB.RECORDS):
        write(r, 1, 2000 + i)
    assert N.errlog_find(r, 77)[0] == K.ERRLOG_FOUND
    for i in range(TB.RECORDS):
        write(r, 0, 3000 + i)
    assert N.errlog_find(r, 77)[:3] == (K.ERRLOG_MISSING, -1, -1)


def test_a_damaged_record_is_named_not_given():
    r, h = region(1), 42
    k = write(r, 0, h, msg="intact")
    assert N.errlog_find(r, h)[0] == K.ERRLOG_FOUND
    at = K.ERR_REGION_HEADER + K.ERR_HEADER_WORDS + k * K.ERR_RECORD_WORDS + K.ER_TEXT
    r[at] ^= 1 << 40  # a stray write into the message
    assert N.errlog_find(r, h)[:3] == (K.ERRLOG_DAMAGED, 0, k)

    class Mem:
        errors, task_names = r, ["t"]

    e = TB.task_error(Mem(), h)  # type: ignore[arg-type]
    assert e.traceback is None and "does not check out" in str(e)
    with pytest.raises(ValueError, match="over their limits"):
        N.errlog_write(r, 0, h, 1, 0, 0, b"T" * (TB.TYPE_MAX + 1), b"", b"")
    with pytest.raises(ValueError, match="no log 1"):
        write(r, 1, h)


def _write_forever(words: np.ndarray) -> None:
    """The writer killed mid-write: record k of log 0 names timer k and says so."""
    k = int(words[K.ERR_REGION_HEADER + K.ERR_NEXT])
    while True:
        text = f"record {k} " * (50 + k % 200)
        N.errlog_write(words, 0, k, 1, 0, 0, b"T", str(k).encode(), text.encode())
        k += 1


def test_a_writer_killed_mid_write_leaves_no_record_read_as_valid():
    """SIGKILL a writer at random moments, each time reading every record it could have
    been writing: a whole record says what was written for its timer; a torn one (left
    odd) is never found. The replacement writer rewrites the torn record.

    About one kill in twelve lands inside a write (16 of 200 measured; the rest land in
    the writer's Python between writes), so a fixed 40 kills missed every write about one
    run in thirty. The test kills at least 40 times and goes on until three kills have
    landed mid-write, up to 2,000 kills (about 40 s; a typical run needs 40)."""
    size = (K.ERR_REGION_HEADER + K.ERR_LOG_WORDS) * 8
    buf = mmap.mmap(-1, size, mmap.MAP_SHARED)
    words = np.frombuffer(buf, np.int64)
    rng = random.Random(22)
    torn = kills = 0
    try:
        while kills < 2000 and (kills < 40 or torn < 3):
            kills += 1
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the writer
                try:
                    _write_forever(words)
                finally:
                    os._exit(1)
            time.sleep(rng.uniform(0.002, 0.03))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            nxt = int(words[K.ERR_REGION_HEADER + K.ERR_NEXT])
            pos = K.ERR_REGION_HEADER + K.ERR_HEADER_WORDS + (nxt % TB.RECORDS) * K.ERR_RECORD_WORDS
            torn += int(words[pos + K.ER_SEQ]) == 2 * nxt + 1
            for k in range(max(0, nxt - TB.RECORDS + 1), nxt + 1):
                got = N.errlog_find(words, k)
                if k == nxt and got[0] != K.ERRLOG_FOUND:
                    continue  # torn, or not begun: not found, as it must be
                assert got[0] == K.ERRLOG_FOUND, (k, nxt, got[:3])
                assert got[6:] == (
                    b"T",
                    str(k).encode(),
                    (f"record {k} " * (50 + k % 200)).encode(),
                )
    finally:
        del words
        buf.close()
    assert torn > 0, f"no kill of {kills} landed mid-write: the test did not test"
