"""What a failed attempt's outcome frame becomes: the ``TaskError`` (or ``JobTimeout``) a
job's ``result()`` raises, and what its ``Retry.on`` is matched against. Runs on the
pool's manager thread.
"""

from __future__ import annotations

import pickle
from typing import Any, TypeVar

from ...errors import JobTimeout, TaskError
from . import worker as W
from .job import Job

E = TypeVar("E", bound=TaskError)

KILLED = -2  # an outcome kind of the manager's own: killed at the hard stop


def attempt_error(
    job: Job, kind: int, value: Any, grace: float
) -> tuple[str, TaskError, BaseException, str | None]:
    """(a one-line summary, what result() raises, what ``Retry.on`` is matched
    against: the job's own exception when it travelled back, the remote traceback)."""
    if kind == W.RAISED:
        type_name, message, text, blob = value
        err = _made(TaskError, job, f"raised {type_name}: {message}", type_name, message, text)
        remote = None
        if blob is not None:
            try:
                remote = pickle.loads(blob)
            except Exception:
                remote = None
        err.remote = remote  # type: ignore[attr-defined]
        return f"{type_name}: {message}", err, remote if remote is not None else err, text
    if kind in (W.TIMED_OUT, KILLED):
        killed = kind == KILLED
        text = f"passed its time limit of {job.time_limit:g} s" + (
            f" and was killed after the grace of {grace:g} s" if killed else ""
        )
        tb = value if isinstance(value, str) else None
        timeout = _made(JobTimeout, job, text, "JobTimeout", "time limit", tb)
        timeout.limit, timeout.killed = job.time_limit, killed
        summary = f"time limit {job.time_limit:g} s" + (" (killed)" if killed else "")
        return summary, timeout, timeout, None
    err = _made(TaskError, job, f"failed: {value}", None, str(value), None)
    return str(value), err, err, None


def _made(
    cls: type[E], job: Job, what: str, type_name: str | None, message: str, tb: str | None
) -> E:
    """A `cls` for `job`'s current attempt: "job ID (NAME) `what`"."""
    return cls(f"job {job.id} ({job.name}) {what}", id=job.id, run=job.attempts,
               task=job.name, type_name=type_name, message=message, traceback=tb)  # fmt: skip
