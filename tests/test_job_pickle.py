"""A Job pickles as (service, id): unpickled in a spawned process of the same user it is a
working Job of its pool (result, stop, cancel, waits); in the process that pickled it, it
is the same Job; a copy whose outcome the pool no longer keeps, or whose pool is gone,
fails with a clear ShmwheelError, never a hang."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import multiprocessing
import pickle

import job_fns
import job_pickle_fns as P
import pytest
from helpers import module_service, wait_for

import shmwheel
from shmwheel import JobTimeout, TaskError

TASKS = {
    "double": "job_fns:task_double",
    "gated": "job_pickle_fns:task_gated",
    "noop": "shmwheel.examples.tasks:noop",
}
WAIT_S = 90  # the bound on every call into the child


@pytest.fixture(scope="module")
def svc():
    yield from module_service(
        shmwheel.TimerService(tasks=TASKS, executors=1, job_workers=2, job_grace=0.5)
    )


@pytest.fixture(scope="module")
def child():
    """One spawned process (a fresh interpreter: nothing of this one's pools or links)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool


def call(child, fn, *args):
    """fn(*args) in the spawned child, bounded (a hang there fails the test, never blocks)."""
    return child.apply_async(fn, args).get(WAIT_S)


def pickled_pending(job):
    """pickle.dumps(job), checked to be the pickle of a pending job (no outcome in it)."""
    restore, args = job.__reduce__()
    assert args[-1] is None, f"{job!r} had ended before it was pickled"
    return _pickled(restore, *args)


def in_child(child, fn, blob, tmp_path):
    """fn(blob) started in the child, returned once the child has unpickled the Job (or
    Jobs) in `blob`: its AsyncResult, to get() bounded."""
    loaded = tmp_path / f"loaded-{len(list(tmp_path.glob('loaded-*')))}"
    pending = child.apply_async(fn, (blob, str(loaded)))
    wait_for(loaded.exists, 60, "the child to unpickle the job")
    return pending


@pytest.fixture()
def gate(tmp_path):
    """A job that runs until the test releases it: (args for job_fns.wait_for_file,
    started file, release())."""
    release, started = tmp_path / "release", tmp_path / "started"
    yield (str(release), 60.0, str(started)), started, lambda: release.write_text("go")
    release.write_text("go")  # never leave a job blocked


def test_a_pending_job_pickled_to_a_spawned_child_gives_its_result(child, gate, tmp_path):
    args, started, release = gate
    with shmwheel.Executor(1) as ex:  # an Executor's own pool: private, but it has a name
        job = ex.submit(job_fns.wait_for_file, *args)
        wait_for(started.exists, 30, "the job to start")
        blob = pickled_pending(job)
        here = pickle.loads(pickle.dumps(job)) is job and pickle.loads(blob) is job
        pending = in_child(child, P.take_result, blob, tmp_path)
        release()
        seen = pending.get(WAIT_S)
        assert job.result(30) == "released"
    assert here  # unpickled in this process: the same Job
    assert seen["result"] == "released" and seen["attempts"] == 1
    assert seen["same"] and seen["waited"] and seen["as_completed"] == ["released"]
    assert seen["awaited"] == "released" and seen["callback"] == ["released"]
    assert seen["flags"] == (True, False, False, None)


def test_a_pending_job_that_raises_raises_its_remote_error_in_the_child(child, tmp_path):
    release, started = tmp_path / "release", tmp_path / "started"
    with shmwheel.Executor(1) as ex:
        job = ex.submit(P.gated, str(release), str(started), "no good")
        wait_for(started.exists, 30, "the job to start")
        pending = in_child(child, P.outcome, pickled_pending(job), tmp_path)
        release.write_text("go")
        seen = pending.get(WAIT_S)
        with pytest.raises(TaskError) as here:
            job.result(30)
    assert here.value.type_name == "ValueError" and here.value.message == "no good"
    assert seen["raised"] == "TaskError" and not seen["done_at_load"]
    assert (seen["type_name"], seen["message"]) == ("ValueError", "no good")
    assert seen["attempts"] == 1


def test_a_pending_job_that_overruns_is_a_job_timeout_in_the_child(child, gate, tmp_path):
    args, started, _release = gate  # never released: the time limit ends it
    with shmwheel.Executor(1) as ex:
        job = ex.submit(job_fns.wait_for_file, *args, time_limit=5.0)
        wait_for(started.exists, 30, "the job to start")
        seen = in_child(child, P.outcome, pickled_pending(job), tmp_path).get(WAIT_S)
        with pytest.raises(JobTimeout):
            job.result(30)
        ended = call(child, P.outcome, pickle.dumps(job))  # now with its outcome in it
    for s in (seen, ended):
        assert s["raised"] == "JobTimeout" and not s["is_timeout_error"]
        assert s["limit"] == 5.0 and s["attempts"] == 1
    assert not seen["done_at_load"] and ended["done_at_load"]


def test_a_child_stops_a_running_job_and_the_parent_sees_it_cancelled(svc, child, gate):
    args, started, _release = gate
    ex = svc.executor()  # a TimerService's job workers
    job = ex.submit(job_fns.wait_for_file, *args)
    wait_for(started.exists, 30, "the job to start")
    seen = call(child, P.stop_running, pickled_pending(job))
    assert seen == {"running": True, "attempts": 1, "cancel": False, "stop": True,
                    "cancelled": True, "result": "CancelledError"}  # fmt: skip
    with pytest.raises(cf.CancelledError):
        job.result(30)
    assert job.cancelled() and svc.stats()["jobs"]["stopped"] >= 1
    # every worker serves again afterwards
    assert ex.submit(job_fns.add, 2, 3).result(30) == 5


def test_a_child_cancels_a_queued_job(svc, child):
    with svc.client() as client:
        later = client.submit("double", {"x": 1}, delay_ms=60_000)
        assert call(child, P.cancel_queued, pickled_pending(later)) == (False, True, True)
        with pytest.raises(cf.CancelledError):
            later.result(30)


def test_a_job_pickled_after_it_ended_carries_its_outcome(child):
    with shmwheel.Executor(1) as ex:
        ok = ex.submit(job_fns.add, (1,), (2,))
        bad = ex.submit(job_fns.raise_custom, "no")
        ok.result(30), bad.exception(30)
        blobs = pickle.dumps(ok), pickle.dumps(bad)
    # the Executor and its pool are gone: the outcome travels in the pickle
    seen = call(child, P.take_result, blobs[0])
    assert seen["result"] == (1, 2) and seen["attempts"] == 1  # a tuple: pickled, not msgpack
    failed = call(child, P.outcome, blobs[1])
    assert failed["done_at_load"] and failed["raised"] == "TaskError"
    assert (failed["type_name"], failed["message"]) == ("job_fns.Custom", "no")
    assert call(child, P.failure, blobs[1])["stop"] == ("returned", False)


def test_an_outcome_no_longer_kept_is_a_clear_error(child, gate):
    args, started, release = gate
    with shmwheel.Executor(1, outcome_ttl=0) as ex:  # outcomes of pickled jobs: not kept
        job = ex.submit(job_fns.wait_for_file, *args)
        wait_for(started.exists, 30, "the job to start")
        blob = pickled_pending(job)  # the pool would keep its outcome outcome_ttl s
        release()
        assert job.result(30) == "released"
        failed = call(child, P.failure, blob)
        assert failed["result"][0] == "ShmwheelError" and "no longer kept" in failed["result"][1]
        assert failed["stop"] == ("returned", False) and failed["seconds"] < 20  # it ended
        # a copy of another instance of the pool (its token) is refused, not confused
        restore, (svc_name, owner, token, id, _name, done) = job.__reduce__()
        assert done is not None  # ended: it now pickles its outcome
        forged = _pickled(restore, svc_name, owner, token + 1, id, "x", None)
        failed = call(child, P.failure, forged)
        assert "another instance" in failed["result"][1]


def test_a_copy_whose_pool_is_gone_fails_at_the_call(child, gate):
    args, started, release = gate
    ex = shmwheel.Executor(1)
    try:
        job = ex.submit(job_fns.wait_for_file, *args)
        wait_for(started.exists, 30, "the job to start")
        blob = pickled_pending(job)
    finally:
        release()
        ex.shutdown(wait=True)
    failed = call(child, P.failure, blob)
    assert failed["result"][0] == "ShmwheelError" and "cannot reach its pool" in failed["result"][1]
    assert failed["stop"][0] == "ShmwheelError" and failed["error"] == "ShmwheelError"
    assert failed["seconds"] < 20  # at once, not after result(30)'s wait


def test_a_client_job_whose_service_stopped_fails_at_the_call(child, tmp_path):
    release, started = tmp_path / "release", tmp_path / "started"
    svc = shmwheel.TimerService(tasks=TASKS, executors=1, job_workers=1, job_grace=0.5)
    try:
        with svc, svc.client() as client:
            job = client.submit("gated", {"release": str(release), "started": str(started)})
            wait_for(started.exists, 30, "the job to start")
            blob = pickled_pending(job)
            release.write_text("go")
            assert job.result(30) == {"said": "released"}
    finally:
        release.write_text("go")
    failed = call(child, P.failure, blob)
    assert failed["result"][0] == "ShmwheelError" and "cannot reach its pool" in failed["result"][1]
    assert failed["stop"][0] == "ShmwheelError" and failed["seconds"] < 20


def test_client_submit_jobs_pickled(svc, child, tmp_path):
    # jobs submitted in a child (two connect() calls there), pickled back to this process
    blobs = call(child, P.submit_twice, svc.name)
    jobs = [pickle.loads(b) for b in blobs]
    assert [j.result(30)["double"] for j in jobs] == [2, 4]
    release, started = tmp_path / "release", tmp_path / "started"
    gate = {"release": str(release), "started": str(started)}
    with svc.client() as client:
        ok = client.submit("gated", gate)
        bad = client.submit("gated", {**gate, "fail": "nope"})
        slow = client.submit("double", {"x": 1, "sleep": 30}, time_limit_ms=2_000)
        wait_for(started.exists, 30, "a job to start")
        blobs = [pickled_pending(j) for j in (ok, bad, slow)]
        assert pickle.loads(blobs[0]) is ok  # in this process: itself
        pending = in_child(child, P.outcomes, blobs, tmp_path)
        release.write_text("go")
        seen = pending.get(WAIT_S)
        assert ok.result(30) == {"said": "released"}
        # ended: each pickles with its outcome
        ended = [call(child, P.outcome, pickle.dumps(j)) for j in (ok, bad, slow)]
    assert [s["done_at_load"] for s in seen + ended] == [False] * 3 + [True] * 3
    for s in (seen[0], ended[0]):
        assert s["value"] == {"said": "released"} and s["attempts"] == 1
    for s in (seen[1], ended[1]):
        assert s["raised"] == "TaskError" and s["type_name"] == "ValueError"
        assert s["message"] == "nope"
    for s in (seen[2], ended[2]):
        assert s["raised"] == "JobTimeout" and not s["is_timeout_error"] and s["limit"] == 2.0


def test_round_trip_in_the_same_process():
    with shmwheel.Executor(1) as ex:
        job = ex.submit(job_fns.sleep, 0.2)
        blob = pickle.dumps(job)
        assert pickle.loads(blob) is job and pickle.loads(pickle.dumps(job)) is job
        # the original dropped: the copy is a Job of its pool again, over the job link
        del job
        gc.collect()
        copy = pickle.loads(blob)
        assert copy.result(30) == 0.2 and copy.attempts == 1 and copy.done()
        assert pickle.loads(blob) is copy
        ended = pickle.loads(pickle.dumps(copy))
        assert ended is copy


def _pickled(restore, *args):
    """The pickle of what unpickles as restore(*args): a Job's own (Job.__reduce__), or one
    made up (another pool instance's)."""

    class Forged:
        def __reduce__(self):
            return (restore, args)

    return pickle.dumps(Forged())
