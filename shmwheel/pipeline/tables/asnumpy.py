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


def ints(col: Column, null: int = 0) -> np.ndarray:
    """The values as int64, a null as `null`."""
    if col.null_count:
        col = pc.fill_null(col, null)
    return np.asarray(col.to_numpy(zero_copy_only=False), np.int64)


def valid(col: Column) -> np.ndarray:
    """True where the value is not null."""
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), bool)


def index_in(col: Column, names: Sequence[str]) -> np.ndarray:
    """Each string's index in `names` (int64; -1 for a null or a string not among them).
    A dictionary-encoded column is looked up once per dictionary value, then each row
    by its index with numpy (pyarrow's index_in decodes the dictionary first: 5x the
    time on the audit's columns, docs/performance.md)."""
    value_set = pa.array(list(names), pa.string())
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if not all(pa.types.is_dictionary(c.type) for c in chunks):
        at = pc.index_in(col, value_set=value_set)
        return np.asarray(pc.fill_null(at, -1).to_numpy(zero_copy_only=False), np.int64)
    parts = [np.zeros(0, np.int64)]
    for c in chunks:
        lut = pc.fill_null(pc.index_in(c.dictionary, value_set=value_set), -1)
        lut = np.append(np.asarray(lut.to_numpy(zero_copy_only=False), np.int64), -1)
        idx = np.asarray(pc.fill_null(c.indices, -1).to_numpy(zero_copy_only=False), np.int64)
        parts.append(lut[idx])  # a null index is -1: the appended -1
    return np.concatenate(parts) if len(parts) > 2 else parts[-1]


def among(col: Column, *names: str) -> np.ndarray:
    """True where the string is one of `names` (a null is none)."""
    return index_in(col, names) >= 0


def strings(col: Column) -> set[str]:
    """The strings a column holds, nulls left out."""
    return {str(s) for s in pc.unique(col).drop_null().to_pylist()}


def ms(us: float | None) -> float | None:
    """Microseconds as milliseconds; None stays None."""
    return None if us is None else us / 1000
