"""What every workload of the bench measures with: the figures a repetition returns
(``{system: figure}``), a timed rate, an allocation count per object, and the no-op task
the peers run."""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

Figures = dict[str, float]
T = TypeVar("T")


def ops_per_s(n: int, fn: Callable[[], object]) -> float:
    """`n` operations over the seconds `fn()` takes (after a collection)."""
    gc.collect()
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def bytes_per_object(build: Callable[[], object], count: int) -> float:
    """Python heap bytes that `build()` allocates and keeps, per each of `count` objects."""
    gc.collect()
    tracemalloc.start()
    keep = build()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del keep
    return size / count


def noop() -> None:
    """The task every peer runs."""


def each(fn: Callable[[T], object], items: list[T]) -> None:
    """`fn` called on every item (a loop the peers' rates time)."""
    for x in items:
        fn(x)
