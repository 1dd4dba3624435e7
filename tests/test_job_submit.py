"""Client.submit: a registered task run as a job on the service's job workers, from any
process of the service; its value (msgpack) is the job's result."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time

import job_fns
import pytest
from helpers import module_service, wait_for

import shmwheel
from shmwheel import JobTimeout, Retry, TaskError

TASKS = {
    "double": "job_fns:task_double",
    "unencodable": "job_fns:task_unencodable",
    "noop": "shmwheel.examples.tasks:noop",
}


@pytest.fixture(scope="module")
def svc():
    yield from module_service(
        shmwheel.TimerService(tasks=TASKS, executors=1, job_workers=2, job_grace=0.5)
    )


def test_a_submitted_task_returns_its_value(svc):
    with svc.client() as client:
        job = client.submit("double", {"x": 21})
        value = job.result(30)
        assert value["double"] == 42 and job.attempts == 1 and job.done()
        pids = {w["pid"] for w in svc.stats()["jobs"]["workers"].values()}
        assert value["pid"] in pids  # it ran on a job worker, not an executor


def test_submit_from_spawned_processes(svc):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        out = pool.starmap(job_fns.submit_from_child, [(svc.name, i) for i in range(4)])
    assert out == [[2 * i, ["KeyError", "'nope'"]] for i in range(4)]


def test_time_limit_retry_and_delay_over_the_link(svc):
    with svc.client() as client:
        start = time.monotonic()
        job = client.submit("double", {"x": 1, "sleep": 30}, time_limit_ms=300)
        with pytest.raises(JobTimeout) as info:
            job.result(30)
        assert time.monotonic() - start >= 0.3 and info.value.limit == 0.3
        job = client.submit("double", {"fail": "x"}, retry=Retry(3, backoff=0.01, on=(KeyError,)))
        with pytest.raises(TaskError):
            job.result(30)
        assert job.attempts == 3
        start = time.monotonic()
        assert client.submit("double", {"x": 2}, delay_ms=200).result(30)["double"] == 4
        assert time.monotonic() - start >= 0.2  # never before its delay


def test_cancel_and_stop_over_the_link(svc):
    with svc.client() as client:
        later = client.submit("double", {"x": 1}, delay_ms=60_000)
        assert later.cancel() and later.cancelled()
        running = client.submit("double", {"x": 1, "sleep": 60})
        wait_for(running.running, 20, "the job to start")
        assert not running.cancel() and running.stop() and running.cancelled()
        with pytest.raises(cf.CancelledError):
            running.result(0)


def test_bad_submissions_are_refused_at_the_call(svc):
    with svc.client() as client:
        with pytest.raises(ValueError, match="unknown task"):
            client.submit("nope")
        with pytest.raises(TypeError, match="msgpack"):
            client.submit("double", {1, 2})
        with pytest.raises(ValueError, match="time_limit_ms"):
            client.submit("double", {"x": 1}, time_limit_ms=-5)
        with pytest.raises(ValueError, match="builtin exceptions"):
            client.submit("double", {"x": 1}, retry=Retry(2, on=(job_fns.Custom,)))
        with pytest.raises(TaskError, match="msgpack"):
            client.submit("unencodable").result(30)


def test_a_service_without_job_workers_says_so():
    with shmwheel.TimerService(tasks=TASKS) as s, s.client() as client:
        with pytest.raises(shmwheel.ShmwheelError, match="job_workers"):
            client.submit("double", {"x": 1})
