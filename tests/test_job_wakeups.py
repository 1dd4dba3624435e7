"""How the pool tells a caller that a job ended: every waiter is woken exactly when its
job's outcome is there (a ``Job`` makes its condition on first use, shmwheel/service/jobs/
job.py's header), and the result pipe's frames are read whole however the pipe splits
them (workers.py, ``WorkerProc.read_frames``)."""

from __future__ import annotations

import concurrent.futures as cf
import os
import pickle
import queue
import random
import struct
import threading

import pytest

from shmwheel import Executor
from shmwheel.examples import jobs as J
from shmwheel.service.jobs.workers import WorkerProc

WAIT_S = 10.0


def _frames(objs: list[object], rng: random.Random) -> bytes:
    """`objs` framed as multiprocessing.Connection frames them: a "!i" length, or -1 and
    a "!Q" length for a big one (chosen at random here, so both are read)."""
    out = bytearray()
    for o in objs:
        blob = pickle.dumps(o)
        if rng.random() < 0.2:
            out += struct.pack("!i", -1) + struct.pack("!Q", len(blob))
        else:
            out += struct.pack("!i", len(blob))
        out += blob
    return bytes(out)


@pytest.mark.parametrize("seed", range(4))
def test_frames_split_anywhere_are_read_whole_and_in_order(seed):
    rng = random.Random(seed)
    for _ in range(60):
        sizes = [rng.choice([0, 1, 100, 5000, 200_000]) for _ in range(rng.randrange(1, 30))]
        objs: list[object] = [b"x" * n for n in sizes]
        stream = _frames(objs, rng)
        reader = WorkerProc.__new__(WorkerProc)  # its frame reader alone: no process
        reader.buf, reader.have, reader.need = reader.empty_reader()
        r, w = os.pipe()
        os.set_blocking(r, False)
        reader.results_fd = r
        got: list[object] = []
        try:
            at = 0
            while at < len(stream):
                k = rng.choice([1, 3, 4, 5, 11, 12, 13, 4096, 65536])
                at += os.write(w, stream[at : at + k])
                while frames := reader.read_frames():
                    got.extend(f for f in frames)
        finally:
            os.close(r)
            os.close(w)
        assert got == objs
        assert reader.have == 0 and len(reader.buf) == len(WorkerProc.empty_reader()[0])  # shrunk


def test_a_frame_over_the_bound_kills_its_worker_and_nothing_after_it_is_read():
    """A worker that claims a frame longer than its bound (max_bytes) breaks the protocol:
    the frames before it count, it is killed, and the reader neither reserves room for
    the claim nor reads on (as at the pipe's end)."""
    killed: list[bool] = []
    reader = WorkerProc.__new__(WorkerProc)
    reader.buf, reader.have, reader.need = reader.empty_reader()
    reader.index, reader.dead, reader.frame_bound = 0, False, 1024 + 12
    reader.proc = type("Proc", (), {"kill": lambda self: killed.append(True)})()
    good = pickle.dumps((1, 0, None))
    stream = (
        struct.pack("!i", len(good)) + good + struct.pack("!i", -1) + struct.pack("!Q", 1 << 40)
    )
    r, w = os.pipe()
    os.set_blocking(r, False)
    reader.results_fd = r
    try:
        os.write(w, stream + good)
        assert reader.read_frames() == [(1, 0, None)]
        assert killed == [True]
        assert reader.read_frames() is None
        assert len(reader.buf) == len(WorkerProc.empty_reader()[0])
    finally:
        os.close(r)
        os.close(w)


@pytest.fixture(scope="module")
def ex():
    with Executor(2, time_limit=10) as executor:
        yield executor


def test_every_kind_of_waiter_is_woken_when_its_job_ends(ex):
    """Four threads take each job as it is submitted and wait on it in the stdlib's four
    ways while jobs end in batches: a waiter that made the job's condition just as its
    outcome was written must still wake, and none may wake before it."""
    handed: queue.Queue[tuple[int, cf.Future[object]] | None] = queue.Queue()
    missed: list[str] = []
    waited = [0]

    def waiter() -> None:
        while (item := handed.get()) is not None:
            i, job = item
            waited[0] += not job.done()
            try:
                if i % 4 == 0:
                    job.result(WAIT_S)
                elif i % 4 == 1:
                    done, _ = cf.wait([job], WAIT_S)
                    assert done
                elif i % 4 == 2:
                    ended = threading.Event()
                    job.add_done_callback(lambda _j, e=ended: e.set())
                    assert ended.wait(WAIT_S) and job.done()
                else:
                    assert next(cf.as_completed([job], WAIT_S)) is job
            except (AssertionError, TimeoutError, cf.TimeoutError) as e:
                missed.append(f"job {i}: {e!r}")

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    jobs = []
    try:
        for i in range(5_000):  # 1 ms each: most waits begin before their job ends
            jobs.append(ex.submit(J.hang, 0.001))
            handed.put((i, jobs[-1]))
    finally:
        for _ in threads:
            handed.put(None)
        for t in threads:
            t.join(4 * WAIT_S)
    assert not any(t.is_alive() for t in threads)
    assert missed == []
    assert waited[0] > 100  # waits began before their job ended: the race was run
    assert all(j.done() and j.result() is None for j in jobs)
