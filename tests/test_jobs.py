"""Jobs (shmwheel.Executor): results, failures, time limits that stop the work, workers
that die alone, cancel and stop, shutdown, and the stdlib's and asyncio's waiting on jobs.
Retries are test_job_retries.py's; jobs beside timers (lanes) test_job_lanes.py's."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import pickle
import sys
import threading
import time

import job_fns
import pytest
from helpers import alive, pool_processes, wait_for

import shmwheel
from shmwheel import Executor, JobTimeout, Retry, TaskError

FLAG_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def ex():
    with Executor(2, grace=0.5) as executor:
        yield executor
        pids = pool_processes(executor)
    assert not alive(pids), "the pool's zygote and workers are gone once shutdown returns"


def serves_again(ex: Executor) -> None:
    """Every worker of `ex` takes jobs: as many distinct pids answer as there are workers."""
    pids: set[int] = set()

    def all_answered() -> bool:
        pids.update(j.result(10) for j in [ex.submit(job_fns.sleep_pid, 0.05) for _ in range(4)])
        return len(pids) >= ex.max_workers

    wait_for(all_answered, 20, lambda: f"every worker (only {len(pids)} answered)", pause=0)


def test_a_job_returns_its_functions_value(ex):
    assert ex.submit(job_fns.add, 2, b=3).result(10) == 5
    assert ex.submit(job_fns.noop).result(10) is None
    job = ex.submit(job_fns.big_result, 1000)
    assert job.result(10) == b"x" * 1000 and job.attempts == 1 and job.done()


def test_a_job_that_raises_gives_a_task_error_with_the_remote_type_and_message(ex):
    job = ex.submit(job_fns.boom, "no such thing")
    with pytest.raises(TaskError) as info:
        job.result(10)
    e = info.value
    assert not isinstance(e, JobTimeout)
    assert e.type_name == "ValueError" and e.message == "no such thing"
    assert "in boom" in e.traceback and isinstance(e.remote, ValueError)
    assert "no such thing" in str(e) and e.id == job.id
    assert job.exception() is e
    # it pickles with its fields (a scheduler may hand it on)
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is TaskError and again.type_name == "ValueError"


def test_map_yields_results_in_order_with_chunks_and_a_timeout(ex):
    assert list(ex.map(job_fns.add, range(20), range(20))) == [2 * i for i in range(20)]
    assert list(ex.map(job_fns.add, range(7), range(7), chunksize=3)) == [2 * i for i in range(7)]
    results = ex.map(job_fns.sleep, [5.0], timeout=0.2)
    with pytest.raises(TimeoutError):
        next(results)


def test_stdlib_wait_as_completed_and_asyncio_gather_on_jobs(ex):
    jobs = [ex.submit(job_fns.add, i, 1) for i in range(10)]
    done, not_done = cf.wait(jobs, timeout=20)
    assert not not_done and {j.result() for j in done} == set(range(1, 11))
    jobs = [ex.submit(job_fns.add, i) for i in range(10)]
    assert sorted(f.result() for f in cf.as_completed(jobs, timeout=20)) == list(range(10))
    failing = ex.submit(job_fns.boom, "in gather")
    done, _ = cf.wait([failing], return_when=cf.FIRST_EXCEPTION, timeout=20)
    assert failing in done

    async def main():
        values = await asyncio.gather(*(ex.submit(job_fns.add, i, 2) for i in range(5)))
        single = await ex.submit(job_fns.add, 40, 2)
        with pytest.raises(TaskError):
            await ex.submit(job_fns.boom, "awaited")
        return values, single

    assert asyncio.run(main()) == ([2, 3, 4, 5, 6], 42)


def test_a_hung_job_is_stopped_at_its_limit_with_its_finally_blocks_run(ex, tmp_path):
    flag = tmp_path / "cleanup"
    start = time.monotonic()
    job = ex.submit(job_fns.hang_with_cleanup, str(flag), 30.0, time_limit=0.3)
    with pytest.raises(JobTimeout) as info:
        job.result(20)
    assert time.monotonic() - start >= 0.3  # never before its limit
    e = info.value
    assert not isinstance(e, TimeoutError) and isinstance(e, TaskError)
    assert e.limit == 0.3 and e.killed is False and job.attempts == 1
    assert flag.read_text() == "cleaned up"  # the soft stop ran the job's finally
    serves_again(ex)


def test_a_job_that_swallows_the_soft_stop_is_killed_after_the_grace(ex):
    before = ex.stats()["worker_restarts"]
    start = time.monotonic()
    job = ex.submit(job_fns.swallow, 60.0, time_limit=0.2)
    with pytest.raises(JobTimeout) as info:
        job.result(20)
    assert time.monotonic() - start >= 0.2 + 0.5  # the limit, then the grace
    assert info.value.killed is True
    wait_for(lambda: ex.stats()["worker_restarts"] > before, 10, "the worker's successor")
    serves_again(ex)


@pytest.mark.parametrize(
    "fn, args, how",
    [
        (job_fns.exit_now, (3,), "exit code 3"),
        (job_fns.segfault, (), "SIGSEGV"),
    ],
)
def test_a_job_whose_worker_dies_fails_alone(ex, fn, args, how):
    others = [ex.submit(job_fns.sleep, 0.02) for _ in range(6)]
    job = ex.submit(fn, *args)
    others += [ex.submit(job_fns.add, i) for i in range(6)]
    with pytest.raises(TaskError) as info:
        job.result(20)
    assert how in str(info.value) and not isinstance(info.value, JobTimeout)
    # every other job, sent to the same worker or not, ran once and returned
    assert [j.result(20) for j in others] == [0.02] * 6 + list(range(6))
    assert all(j.attempts == 1 for j in others)
    serves_again(ex)


def test_cancel_wins_only_before_the_job_starts_and_stop_ends_a_running_one(ex, tmp_path):
    flag = tmp_path / "release"
    marks = [tmp_path / f"started-{i}" for i in range(2)]
    blockers = [ex.submit(job_fns.wait_for_file, str(flag), FLAG_TIMEOUT, str(m)) for m in marks]
    wait_for(lambda: all(m.exists() for m in marks), 20, "both workers busy")
    queued = ex.submit(job_fns.add, 1)
    assert queued.cancel() and queued.cancelled() and queued.done()
    with pytest.raises(cf.CancelledError):
        queued.result(0)
    assert not blockers[0].cancel()  # running: the stdlib's cancel does not stop it
    assert blockers[0].stop() and blockers[0].cancelled()
    with pytest.raises(cf.CancelledError):
        blockers[0].result(0)
    flag.write_text("go")
    assert blockers[1].result(20) == "released"
    assert not blockers[1].cancel() and not blockers[1].stop()  # done: nothing to cancel
    serves_again(ex)


def test_stop_of_a_job_that_ignores_it_kills_and_replaces_its_worker(ex, tmp_path):
    started = tmp_path / "started"
    job = ex.submit(job_fns.swallow, 60.0, str(started))
    wait_for(started.exists, 20, "the job to start in its worker")
    before = ex.stats()["worker_restarts"]
    assert job.stop() and job.cancelled()
    wait_for(lambda: ex.stats()["worker_restarts"] > before, 10, "the killed worker's successor")
    serves_again(ex)


def test_shutdown_cancels_what_has_not_started_and_refuses_new_jobs(tmp_path):
    flag = tmp_path / "release"
    ex = Executor(1)
    try:
        running = ex.submit(job_fns.wait_for_file, str(flag), FLAG_TIMEOUT)
        wait_for(running.running, 20, "the job to start")
        queued = [ex.submit(job_fns.add, i) for i in range(5)]
        ex.shutdown(wait=False, cancel_futures=True)
        assert all(q.cancelled() for q in queued)
        with pytest.raises(RuntimeError, match="after shutdown"):
            ex.submit(job_fns.add, 1)
        flag.write_text("go")
        assert running.result(20) == "released"  # what had started finishes
    finally:
        flag.write_text("go")
        ex.shutdown(wait=True)


def test_jobs_submitted_from_threads_during_shutdown_are_each_settled_or_refused():
    """Threads that submit while the pool shuts down get a job that runs or is cancelled,
    or a refusal; no job they were given is left waiting once the shutdown has returned.
    The GIL switches every 10 us here, so that submitters are stopped anywhere in a submit
    while the shutdown runs."""
    stranded = 0
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for _ in range(30):
            stranded += _submit_through_a_shutdown()
    finally:
        sys.setswitchinterval(interval)
    assert stranded == 0


def _submit_through_a_shutdown() -> int:
    """Jobs left waiting after an Executor shut down while 4 threads submitted."""
    ex = Executor(1)
    got: list[cf.Future[object]] = []
    started = threading.Barrier(5)

    def submitter() -> None:
        started.wait(10)
        try:
            while True:
                got.append(ex.submit(job_fns.noop))
        except RuntimeError:
            pass

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait(10)
    time.sleep(0.002)
    ex.shutdown(wait=True, cancel_futures=True)
    for t in threads:
        t.join(10)
    _, waiting = cf.wait(got, timeout=5)
    return len(waiting)


def test_bad_arguments_are_refused_at_the_call(ex):
    with pytest.raises(TypeError, match="module-level function"):
        ex.submit(lambda: 1)
    with pytest.raises(ValueError, match="time_limit"):
        ex.submit(job_fns.noop, time_limit=0)
    with pytest.raises(ValueError, match="time_limit"):
        ex.submit(job_fns.noop, time_limit=float("nan"))
    with pytest.raises(TypeError, match="Retry"):
        ex.submit(job_fns.noop, retry=3)
    with pytest.raises(ValueError, match="over the bound"):
        ex.submit(job_fns.add, b"x" * (65 << 20))
    with pytest.raises(ValueError, match="time_limit"):
        Executor(1, time_limit=-1)


@pytest.mark.parametrize(
    "fn, args, says",
    [
        (job_fns.big_result, (70 << 20,), "over the bound"),
        (job_fns.unpicklable_result, (), "cannot be pickled"),
    ],
)
def test_a_result_that_cannot_travel_fails_the_job_with_a_clear_error(ex, fn, args, says):
    with pytest.raises(TaskError, match=says):
        ex.submit(fn, *args).result(30)


def test_a_service_with_job_workers_serves_executors_and_fails_running_jobs_at_stop():
    with shmwheel.TimerService(job_workers=2) as svc:
        ex = svc.executor(time_limit=10.0)
        assert ex.submit(job_fns.add, 20, 22).result(20) == 42
        long = ex.submit(job_fns.sleep, 60.0)
        wait_for(long.running, 20, "the job to start")
        jobs = svc.stats()["jobs"]
        assert jobs["running"] == 1 and jobs["succeeded"] == 1 and len(jobs["workers"]) == 2
        ex.shutdown(wait=False)  # an Executor on a service leaves the service running
        assert svc.job_pool().size == 2
    with pytest.raises(shmwheel.ShmwheelError, match="service stopped"):
        long.result(10)
    with shmwheel.TimerService(tasks={"noop": "shmwheel.examples.tasks:noop"}) as svc:
        with pytest.raises(shmwheel.ShmwheelError, match="job_workers"):
            svc.executor()


def test_failures_log_one_warning_per_retry_and_the_traceback_once(ex, caplog, tmp_path):
    path = tmp_path / "attempts"
    with caplog.at_level(logging.DEBUG, logger="shmwheel.jobs"):
        job = ex.submit(job_fns.attempt_log, str(path), 99, retry=Retry(3, backoff=0.01))
        with pytest.raises(TaskError):
            job.result(20)
    mine = [r for r in caplog.records if f"job {job.id} " in r.getMessage()]
    warnings = [r for r in mine if r.levelno == logging.WARNING]
    errors = [r for r in mine if r.levelno == logging.ERROR]
    assert len(warnings) == 2 and all("\n" not in r.getMessage() for r in warnings)
    assert len(errors) == 1 and "Traceback" in errors[0].getMessage()


def test_a_service_stopping_while_a_stopped_job_still_runs_settles_each_job_once(
    tmp_path, monkeypatch
):
    """stop() of a job that ignores its soft stop, then the service's stop at once: the
    worker's death at shutdown must not set that job's future a second time (it raised
    InvalidStateError on the pool's manager thread)."""
    crashed: list = []
    monkeypatch.setattr("threading.excepthook", lambda args: crashed.append(args))
    started = tmp_path / "started"
    with shmwheel.TimerService(job_workers=1, job_grace=30.0) as svc:
        job = svc.executor().submit(job_fns.swallow, 60.0, str(started))
        wait_for(started.exists, 20, "the job to start in its worker")
        assert job.stop() and job.cancelled()
    assert crashed == [], [a.exc_value for a in crashed]
