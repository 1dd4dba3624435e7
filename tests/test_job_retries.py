"""Retries of jobs (shmwheel.Retry): the back-off is never early, the policy's bound and
its ``on`` filter hold, JobTimeout is retried when named, one Job spans every attempt."""

from __future__ import annotations

import random
from pathlib import Path

import job_fns
import pytest
from helpers import wait_for

from shmwheel import Executor, JobTimeout, Retry, TaskError


@pytest.fixture(scope="module")
def ex():
    with Executor(2, grace=0.5) as executor:
        yield executor


def stamps(path: Path) -> list[tuple[int, int]]:
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]


def test_each_retry_starts_no_earlier_than_its_backoff_after_the_attempt_before(ex, tmp_path):
    policy = Retry(4, backoff=0.08, factor=2.0, jitter=0.5)
    paths = [tmp_path / f"attempts-{i}" for i in range(4)]
    jobs = [ex.submit(job_fns.attempt_log, str(p), 3, retry=policy) for p in paths]
    for job, path in zip(jobs, paths, strict=True):
        assert job.result(30) == 4 and job.attempts == 4
        rows = stamps(path)
        assert len(rows) == 4
        for k in range(1, 4):  # attempt k+1 after attempt k: min(max, b * f**(k-1)) * (1 - j)
            floor_ns = policy.pause_s(k) * (1 - policy.jitter) * 1e9
            assert rows[k][0] - rows[k - 1][1] >= floor_ns, (k, rows)


def test_a_job_that_keeps_failing_gets_exactly_the_policys_attempts(ex, tmp_path):
    path = tmp_path / "attempts"
    job = ex.submit(job_fns.attempt_log, str(path), 99, retry=Retry(3, backoff=0.01))
    with pytest.raises(TaskError, match="attempt 3"):
        job.result(30)
    assert job.attempts == 3 and len(stamps(path)) == 3


def test_only_exceptions_matching_on_are_retried(ex, tmp_path):
    only_custom = Retry(3, backoff=0.01, on=(job_fns.Custom,))
    value_path, custom_path = tmp_path / "value", tmp_path / "custom"
    value_job = ex.submit(job_fns.attempt_log, str(value_path), 99, retry=only_custom)
    custom_job = ex.submit(job_fns.attempt_log, str(custom_path), 1, "custom", retry=only_custom)
    with pytest.raises(TaskError) as info:
        value_job.result(30)
    assert info.value.type_name == "ValueError" and value_job.attempts == 1
    assert custom_job.result(30) == 2 and custom_job.attempts == 2


def test_a_timed_out_attempt_is_retried_only_when_the_policy_names_job_timeout(ex, tmp_path):
    def overrun_once(path, on):  # its first attempt sleeps past a 0.3 s limit
        policy = Retry(2, backoff=0.01, on=on)
        return ex.submit(job_fns.attempt_log, str(path), 1, "sleep", time_limit=0.3, retry=policy)

    job = overrun_once(tmp_path / "named", (JobTimeout,))
    assert job.result(30) == 2 and job.attempts == 2
    job = overrun_once(tmp_path / "not-named", (ValueError,))
    with pytest.raises(JobTimeout):
        job.result(30)
    assert job.attempts == 1


def test_a_job_backing_off_can_be_cancelled_and_never_runs_again(ex, tmp_path):
    path = tmp_path / "attempts"
    job = ex.submit(job_fns.attempt_log, str(path), 99, retry=Retry(5, backoff=30.0))
    wait_for(lambda: path.exists() and ex.stats()["backing_off"] >= 1, 20, "the back-off")
    assert not job.running() and job.cancel() and job.cancelled()
    assert ex.stats()["backing_off"] == 0 and len(stamps(path)) == 1


def test_executor_defaults_apply_and_a_submit_overrides_them(tmp_path):
    with Executor(1, retry=Retry(2, backoff=0.01), time_limit=5.0) as ex:
        retried = ex.submit(job_fns.attempt_log, str(tmp_path / "a"), 1)
        assert retried.result(30) == 2
        once = ex.submit(job_fns.attempt_log, str(tmp_path / "b"), 1, retry=Retry(1))
        with pytest.raises(TaskError):
            once.result(30)


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 2.5}, "attempts"),
        ({"backoff": -1}, "backoff"),
        ({"factor": 0.5}, "factor"),
        ({"jitter": 1.5}, "jitter"),
        ({"max_backoff": float("nan")}, "max_backoff"),
        ({"on": (int,)}, "on"),
        ({"on": ()}, "on"),
    ],
)
def test_a_policy_with_bad_values_is_refused_when_made(kwargs, says):
    with pytest.raises(ValueError, match=says):
        Retry(**kwargs)


def test_the_drawn_pause_lies_between_its_floor_and_its_bound():
    policy = Retry(10, backoff=0.5, factor=3.0, max_backoff=4.0, jitter=0.25)
    rng = random.Random(7)
    for k in range(1, 10):
        bound = min(4.0, 0.5 * 3.0 ** (k - 1))
        assert policy.pause_s(k) == bound
        for _ in range(200):
            assert bound * 0.75 <= policy.backoff_s(k, rng) <= bound
    assert Retry(3) == Retry(3) and Retry(3) != Retry(4)
