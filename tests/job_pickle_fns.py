"""What tests/test_job_pickle.py runs elsewhere: in its spawned children (each takes a
pickled Job, bytes, unpickles it there and reports what it saw), and as jobs (``gated``, a
function, and ``task_gated``, a registered task: busy until the test releases them)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import pickle
import time
from pathlib import Path
from typing import Any

from helpers import settle

import shmwheel


def _load(blob: bytes, loaded: str | None) -> Any:
    """The Job in `blob`, unpickled here; then the file `loaded` left, if given (the test
    ends the job only after that: the copy here watched it while it was pending)."""
    job = pickle.loads(blob)
    if loaded:
        Path(loaded).write_text("loaded")
    return job


def take_result(blob: bytes, loaded: str | None = None) -> dict[str, Any]:
    """The job's result by every way a future is waited for."""
    job = _load(blob, loaded)
    done, _ = cf.wait([job], timeout=60)
    seen: list[Any] = []
    job.add_done_callback(lambda j: seen.append(j.result()))
    return {
        "same": pickle.loads(blob) is job,
        "waited": job in done,
        "as_completed": [j.result() for j in cf.as_completed([job], timeout=60)],
        "awaited": asyncio.run(_await(job)),
        "result": job.result(60),
        "callback": seen,
        "attempts": job.attempts,
        "flags": (job.done(), job.running(), job.cancelled(), job.exception()),
    }


async def _await(job: Any) -> Any:
    return await asyncio.wait_for(job, 60)


def outcome(blob: bytes, loaded: str | None = None) -> dict[str, Any]:
    """What result() gives here, waited for (bounded): the value, or the exception's
    class, fields and whether it is a TimeoutError (a JobTimeout must not be one)."""
    return outcomes([blob], loaded)[0]


def outcomes(blobs: list[bytes], loaded: str | None = None) -> list[dict[str, Any]]:
    """``outcome`` of each Job of `blobs`, all unpickled first (then `loaded` is left)."""
    jobs = [pickle.loads(blob) for blob in blobs]
    seen: list[dict[str, Any]] = [{"done_at_load": job.done()} for job in jobs]
    if loaded:
        Path(loaded).write_text("loaded")
    for job, out in zip(jobs, seen, strict=True):
        try:
            out["value"] = job.result(60)
        except Exception as e:
            out["raised"] = type(e).__name__
            out["is_timeout_error"] = isinstance(e, TimeoutError)
            for name in ("type_name", "message", "limit", "killed"):
                out[name] = getattr(e, name, None)
            out["text"] = str(e)
        out["attempts"] = job.attempts
    return seen


def gated(release: str, started: str, fail: str | None = None) -> str:
    """A job busy until `release` exists (60 s at most); leaves `started` first. Then it
    raises ValueError(fail) if `fail`, else returns "released"."""
    Path(started).write_text("started")
    settle(lambda: os.path.exists(release), 60, pause=0.005)
    if fail:
        raise ValueError(fail)
    return "released"


def task_gated(payload: dict) -> dict:
    """``gated`` as a registered task (Client.submit): its value is msgpack."""
    return {"said": gated(payload["release"], payload["started"], payload.get("fail"))}


def stop_running(blob: bytes) -> dict[str, Any]:
    """Stop a running job from here: cancel() refuses (it runs), stop() wins."""
    job = pickle.loads(blob)
    settle(job.running, 60, pause=0.005)
    out = {"running": job.running(), "attempts": job.attempts, "cancel": job.cancel()}
    out["stop"] = job.stop()
    out["cancelled"] = job.cancelled()
    try:
        job.result(0)
    except cf.CancelledError:
        out["result"] = "CancelledError"
    return out


def cancel_queued(blob: bytes) -> tuple[bool, bool, bool]:
    job = pickle.loads(blob)
    return job.running(), job.cancel(), job.cancelled()


def failure(blob: bytes) -> dict[str, Any]:
    """How a job that cannot be followed from here fails: every call, bounded."""
    start = time.monotonic()
    job = pickle.loads(blob)
    out: dict[str, Any] = {"done": job.done()}
    for name, call in (("result", lambda: job.result(30)), ("stop", job.stop)):
        try:
            out[name] = ("returned", call())
        except BaseException as e:
            out[name] = (type(e).__name__, str(e))
    out["error"] = type(job.exception(0)).__name__
    out["seconds"] = time.monotonic() - start
    return out


def submit_twice(name: str) -> list[bytes]:
    """Two clients of service `name`, one after the other (a second connect() here), each
    submitting a task as a job: the Jobs pickled back, pending or ended."""
    out = []
    for x in (1, 2):
        with shmwheel.connect(name) as client:
            job = client.submit("double", {"x": x})
            out.append(pickle.dumps(job))
    return out
