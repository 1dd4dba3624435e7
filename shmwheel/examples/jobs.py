"""Sample job functions (module-level, so a job worker imports them by reference): what
the bench's jobs workload and the quick start's recipes run."""

from __future__ import annotations

import random
import time


def noop() -> None:
    """Does nothing: the cost of a job itself."""


def hang(seconds: float) -> None:
    """Sleeps `seconds`: a job that overruns any shorter time limit."""
    time.sleep(seconds)


def flaky(failure_rate: float, seed: int | None = None) -> str:
    """Fails (ConnectionError) with probability `failure_rate`: a job worth retrying."""
    if random.Random(seed).random() < failure_rate:
        raise ConnectionError("the service this job calls did not answer")
    return "done"


def square(x: float) -> float:
    return x * x
