"""``Retry``: how many attempts a job gets, which failures earn another, and how long the
job backs off between them. A value object, checked when it is made; the pool
(pool.py) asks it two questions: ``retries(error, attempt)`` and ``backoff_s(attempt)``.
"""

from __future__ import annotations

import math
import random

__all__ = ["Retry", "check_job", "check_pool"]

MAX_LIMIT_S = 30 * 86400  # a time limit's upper bound


def _number(what: str, value: object, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be in [{low:g}, {high:g}], got {value!r}")
    return float(value)


class Retry:
    """A retry policy for jobs.

    ``attempts`` is the most attempts a job gets (1: no retry). After attempt k fails
    with an exception matching ``on`` (``isinstance``; the remote exception when it
    travelled back, else the ``TaskError`` / ``JobTimeout`` that stands for it), attempt
    k+1 starts no earlier than ``min(max_backoff, backoff * factor**(k-1)) * (1 - jitter)``
    seconds after attempt k ended: the pause is drawn uniformly from
    ``[d * (1 - jitter), d]`` with ``d = min(max_backoff, backoff * factor**(k-1))``, and
    it is a timer in the pool's wheel, so it never ends early.

    ``JobTimeout`` is retried when ``on`` names it or one of its bases (the default,
    ``Exception``, is one); a job stopped by ``Job.stop()`` is never retried.
    """

    __slots__ = ("attempts", "backoff", "factor", "jitter", "max_backoff", "on")

    def __init__(
        self,
        attempts: int = 3,
        *,
        backoff: float = 0.1,
        factor: float = 2.0,
        max_backoff: float = 60.0,
        jitter: float = 0.1,
        on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"Retry: attempts must be an integer >= 1, got {attempts!r}")
        self.attempts = attempts
        self.backoff = _number("backoff", backoff, 0.0, 86400.0)
        self.factor = _number("factor", factor, 1.0, 1e6)
        self.max_backoff = _number("max_backoff", max_backoff, 0.0, 86400.0)
        self.jitter = _number("jitter", jitter, 0.0, 1.0)
        kinds = on if isinstance(on, tuple) else (on,)
        if not kinds or not all(
            isinstance(k, type) and issubclass(k, BaseException) for k in kinds
        ):
            raise ValueError(f"Retry: on must be an exception class or a tuple of them, got {on!r}")
        self.on: tuple[type[BaseException], ...] = kinds

    def retries(self, error: BaseException, attempt: int) -> bool:
        """Whether a job whose attempt number `attempt` (1 for the first) failed with
        `error` gets another attempt."""
        return attempt < self.attempts and isinstance(error, self.on)

    def pause_s(self, attempt: int) -> float:
        """The upper bound of the pause after attempt `attempt` (1 for the first):
        ``min(max_backoff, backoff * factor**(attempt-1))``."""
        try:
            d = self.backoff * self.factor ** (attempt - 1)
        except OverflowError:
            d = math.inf
        return min(self.max_backoff, d)

    def backoff_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """The pause before the attempt after `attempt`, jitter drawn (``rng`` for tests)."""
        d = self.pause_s(attempt)
        u = (rng or random).random()
        return d * (1.0 - self.jitter * u)

    def __repr__(self) -> str:
        on = ", ".join(k.__name__ for k in self.on)
        return (
            f"Retry(attempts={self.attempts}, backoff={self.backoff}, factor={self.factor}, "
            f"max_backoff={self.max_backoff}, jitter={self.jitter}, on=({on},))"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Retry) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, k) for k in self.__slots__))

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _retry,
            (self.attempts, self.backoff, self.factor, self.max_backoff, self.jitter, self.on),
        )


def _retry(
    attempts: int,
    backoff: float,
    factor: float,
    max_backoff: float,
    jitter: float,
    on: tuple[type[BaseException], ...],
) -> Retry:
    return Retry(
        attempts, backoff=backoff, factor=factor, max_backoff=max_backoff, jitter=jitter, on=on
    )


def check_job(time_limit: float | None, retry: Retry | None) -> None:
    """ValueError / TypeError for a time limit or retry policy a job cannot have."""
    if time_limit is not None:
        _number("time_limit", time_limit, 0.0, MAX_LIMIT_S)
        if time_limit == 0:
            raise ValueError("time_limit must be > 0 seconds (None: no limit)")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"retry must be a shmwheel.Retry, got {retry!r}")


def check_pool(workers: int, grace: float) -> None:
    """ValueError for a job pool's size or grace it cannot have."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"job workers must be an integer >= 1, got {workers!r}")
    _number("grace", grace, 0.0, 60.0)
