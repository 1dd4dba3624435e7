"""Arrow columns as numpy arrays for the audit's kernels (``pertimer.py``, ``seconds.py``,
``figures.py``): the one place that says what a null becomes. Every function takes an
Arrow array or chunked array (strings plain or dictionary-encoded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Column: TypeAlias = "pa.Array | pa.ChunkedArray"


def ints(col: Column) -> np.ndarray:
    """The values as int64, a null as 0."""
    return np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), np.int64)


def valid(col: Column) -> np.ndarray:
    """True where the value is not null."""
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), bool)


def index_in(col: Column, names: Sequence[str]) -> np.ndarray:
    """Each string's index in `names` (int64; -1 for a null or a string not among them)."""
    at = pc.index_in(col, value_set=pa.array(list(names), pa.string()))
    return np.asarray(pc.fill_null(at, -1).to_numpy(zero_copy_only=False), np.int64)


def among(col: Column, *names: str) -> np.ndarray:
    """True where the string is one of `names` (a null is none)."""
    return index_in(col, names) >= 0


def strings(col: Column) -> set[str]:
    """The strings a column holds, nulls left out."""
    return {str(s) for s in pc.unique(col).drop_null().to_pylist()}


def ms(us: float | None) -> float | None:
    """Microseconds as milliseconds; None stays None."""
    return None if us is None else us / 1000
