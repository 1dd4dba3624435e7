"""The journal as Arrow: one table of events per segment, built from the rows of the one
decoder (``shmwheel.journal.reader``) with numpy, never a Python loop per record.

This module owns the pipeline's table encoding: the column names, their types and what
each holds (``COLUMNS``), and how a segment's records and rejects become one Arrow record
batch (``segment_batch``). Both entry points (the ``shmwheel-journal`` data source and the
``binaryFile`` + ``mapInArrow`` reader) call ``segment_batch``, so they give the same rows.

A reject (a torn tail, a bad CRC, a foreign file, ...) is a row of kind ``"reject"`` with
the file, the byte offset and the reason; nothing the decoder could not read is dropped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ...journal import format as journal_format
from ...journal.reader import Segment
from ...wheel.constants import TASK_NONE

#: the event table: (column, Arrow type, Spark DDL type, what it holds). A column that does
#: not apply to a row's kind is null.
COLUMNS: tuple[tuple[str, pa.DataType, str, str], ...] = (
    ("file", pa.string(), "string", "the segment file's path"),
    ("offset", pa.int64(), "bigint", "the record's byte offset in its file"),
    ("epoch", pa.int32(), "int", "the service run that wrote it (the header's epoch)"),
    ("role", pa.string(), "string", "the writer: coordinator, reaper or recovery"),
    ("writer_pid", pa.int64(), "bigint", "the writer's process id"),
    (
        "service",
        pa.string(),
        "string",
        "the service's name (the header's; with the id, a timer's key)",
    ),
    (
        "boot_id",
        pa.string(),
        "string",
        "the boot of the machine the writer ran on (the header's; it has no host name)",
    ),
    (
        "kind",
        pa.string(),
        "string",
        "scheduled, cancelled, fired, outcome, watched, completed, expired, or reject",
    ),
    ("id", pa.int64(), "bigint", "the timer's (or operation's) id"),
    ("t_us", pa.int64(), "bigint", "when the writer recorded it (monotonic us)"),
    ("wall_us", pa.int64(), "bigint", "the same instant on the wall clock (us since 1970)"),
    ("run", pa.int32(), "int", "scheduled, fired, outcome: the run (from 1; 0 unknown)"),
    (
        "deadline_ms",
        pa.int64(),
        "bigint",
        "scheduled, fired: the run's deadline; watched: the timeout (monotonic ms)",
    ),
    ("task", pa.string(), "string", "scheduled: the task's name"),
    ("producer", pa.int64(), "bigint", "scheduled: the client's pid (0: re-armed)"),
    ("flags", pa.int32(), "int", "scheduled: 1 keyed, 8 repeating, 256 re-armed"),
    ("period_ms", pa.int64(), "bigint", "scheduled: the period (0: a one-shot)"),
    ("outcome", pa.string(), "string", "outcome: ok, error or crashed"),
    ("duration_us", pa.int64(), "bigint", "outcome: the task's duration"),
    ("next_deadline_ms", pa.int64(), "bigint", "outcome: the next run's deadline (-1: none)"),
    ("required", pa.int32(), "int", "watched: the amount that completes it"),
    ("keys", pa.int32(), "int", "watched: how many keys it watches"),
    ("on_complete", pa.string(), "string", "watched: the task run when it completes"),
    ("on_expire", pa.string(), "string", "watched: the task run when it expires"),
    ("payload_bytes", pa.int32(), "int", "scheduled, watched: the payload's size"),
    ("reason", pa.string(), "string", "reject: why the bytes were not read as a record"),
)
NAMES = tuple(c[0] for c in COLUMNS)
ARROW_SCHEMA = pa.schema([(c[0], c[1]) for c in COLUMNS])
DDL = ", ".join(f"{c[0]} {c[2]}" for c in COLUMNS)
REJECT = "reject"

_KINDS = np.array(
    [journal_format.KIND_NAMES.get(k, "") for k in range(max(journal_format.KIND_NAMES) + 1)]
    + [REJECT],
    dtype=object,
)
_OUTCOMES = [journal_format.OUTCOMES.get(k, "") for k in range(max(journal_format.OUTCOMES) + 1)]

# where field k of a record is in a reader row (reader.Segment.rows): column 3 + k
_BLOB_LEN = 12
_ID_WORD = 3


def _field(kind: int, name: str) -> int:
    return 3 + journal_format.FIELDS[kind].index(name)


def _names(index: np.ndarray, valid: np.ndarray, names: Sequence[str]) -> pa.Array:
    """Strings by index into `names` (an index out of range is null), dictionary-encoded."""
    valid = valid & (index >= 0) & (index < len(names))
    idx = pa.array(np.where(valid, index, 0).astype(np.int32), mask=~valid)
    return pa.DictionaryArray.from_arrays(idx, pa.array(list(names) or [""], pa.string()))


def _repeat(value: object, n: int, typ: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, typ)
    if typ == pa.string():  # dictionary-encoded: one value
        return pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([value], typ)
        )
    return pa.array(np.full(n, value, np.int64)).cast(typ)


#: kind codes a lookup table by kind covers (a record of another code has no field)
_KIND_SPAN = max(journal_format.KIND_NAMES) + 1


class _Words:
    """The words of a segment's record rows (``reader.Segment.rows``), one column at a
    time, in the order `order` (a permutation of the rows; None: file order). A row is a
    record's SCAN_WORDS words, so reading a column of the row-major matrix strides over
    all of it: each column is taken once, with the reordering in the same gather (no
    copy of whole rows), and a field that sits in a different word for each kind is one
    gather of (row, word) pairs."""

    def __init__(self, rows: np.ndarray, order: np.ndarray | None) -> None:
        self.rows, self.order = rows, order
        self._got: dict[int, np.ndarray] = {}
        self._of: dict[tuple[int, ...], np.ndarray] = {}
        kinds = self.word(2)
        #: each row's kind as an index into lookup tables of _KIND_SPAN + 1 entries (the
        #: last: a kind no table knows)
        self.kind_at = np.where((kinds >= 0) & (kinds < _KIND_SPAN), kinds, _KIND_SPAN)
        self.kinds = kinds

    def word(self, col: int) -> np.ndarray:
        """Word `col` of every row, in order (contiguous)."""
        got = self._got.get(col)
        if got is None:
            src = self.rows[:, col] if self.order is None else self.rows[self.order, col]
            got = self._got[col] = np.ascontiguousarray(src)
        return got

    def of(self, kinds: Sequence[int]) -> np.ndarray:
        """True where a row is of one of `kinds`."""
        key = tuple(sorted(kinds))
        got = self._of.get(key)
        if got is None:
            lut = np.zeros(_KIND_SPAN + 1, bool)
            lut[[k for k in key if 0 <= k < _KIND_SPAN]] = True
            got = self._of[key] = lut[self.kind_at]
        return got

    def field(self, sources: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(values, valid): for each row of a kind in `sources`, its word sources[kind];
        0 and not valid for the others."""
        cols = set(sources.values())
        valid = self.of(list(sources))
        if len(cols) == 1:
            values = self.word(cols.pop())
        else:  # one gather of (row, word) pairs
            lut = np.zeros(_KIND_SPAN + 1, np.intp)
            for k, c in sources.items():
                if 0 <= k < _KIND_SPAN:
                    lut[k] = c
            rows = np.arange(len(self.rows)) if self.order is None else self.order
            values = self.rows[rows, lut[self.kind_at]]
        return np.where(valid, values, 0), valid


def _int_column(words: _Words, sources: dict[int, int], dtype: pa.DataType) -> pa.Array:
    """One int column: for each kind in `sources`, row word sources[kind]; else null."""
    values, valid = words.field(sources)
    return pa.array(values, type=pa.int64(), mask=~valid).cast(dtype)


def segment_batch(
    seg: Segment,
    columns: Sequence[str] = NAMES,
    dictionary: bool = False,
    order: np.ndarray | None = None,
) -> pa.RecordBatch:
    """One segment's events and rejects as one Arrow record batch with `columns` (a
    subset of NAMES, in that order): the records first, in file order (with `order`, a
    permutation of the records, in that order), then one row per reject. With
    `dictionary`, every string column is dictionary-encoded (the same strings: cheaper
    to build, reorder and write to Parquet, where a segment's path, say, is one value
    however many rows repeat it)."""
    rows, hdr = seg.rows, seg.header or {}
    n, nrej = len(rows), len(seg.rejects)
    if order is not None and len(order) != n:
        raise ValueError(f"order has {len(order)} rows; the segment has {n} records")
    w = _Words(rows, order)
    per_file = _per_file(seg)
    arrays = []
    for name in columns:
        typ = ARROW_SCHEMA.field(name).type
        col = _record_column(name, w, hdr, per_file) if n else pa.array([], typ)
        if nrej:  # rare: plain strings, then encoded again if asked
            rej = _reject_column(seg, per_file, name, typ).cast(typ)
            col = pa.concat_arrays([col.cast(typ), rej])
        arrays.append(_string_form(col, typ, dictionary))
    return pa.RecordBatch.from_arrays(
        arrays, schema=pa.schema([(c, a.type) for c, a in zip(columns, arrays, strict=True)])
    )


def _record_column(
    name: str, w: _Words, hdr: dict[str, Any], per_file: dict[str, object]
) -> pa.Array:
    """Column `name` of a segment's records (read through `w`; its header `hdr`, the
    columns it shares with every row `per_file`)."""
    n = len(w.rows)
    tasks = list(hdr.get("tasks", ()))
    mono0, wall0 = hdr.get("mono_us"), hdr.get("wall_us")
    if name in per_file:
        return _repeat(per_file[name], n, ARROW_SCHEMA.field(name).type)
    if name == "offset":
        return pa.array(w.word(0))
    if name == "kind":
        return _names(w.kinds, np.ones(n, bool), list(_KINDS))
    if name in ("id", "t_us"):
        return pa.array(w.word(_ID_WORD if name == "id" else _ID_WORD + 1))
    if name == "wall_us":
        if mono0 is None or wall0 is None:
            return pa.nulls(n, pa.int64())
        return pa.array(w.word(4) - mono0 + wall0)
    if name == "task":
        return _names(
            w.word(_field(journal_format.SCHEDULED, "task")),
            w.of([journal_format.SCHEDULED]),
            tasks,
        )
    if name in ("on_complete", "on_expire"):
        idx = w.word(_field(journal_format.WATCHED, name))
        return _names(idx, w.of([journal_format.WATCHED]) & (idx != TASK_NONE), tasks)
    if name == "outcome":
        return _names(
            w.word(_field(journal_format.OUTCOME, "outcome")),
            w.of([journal_format.OUTCOME]),
            _OUTCOMES,
        )
    if name == "reason":
        return pa.nulls(n, pa.string())
    if name == "payload_bytes":
        return _int_column(
            w,
            {journal_format.SCHEDULED: _BLOB_LEN, journal_format.WATCHED: _BLOB_LEN},
            pa.int32(),
        )
    typ = ARROW_SCHEMA.field(name).type
    sources = {
        k: 3 + f.index(name)
        for k, f in journal_format.FIELDS.items()
        if name in f and k != journal_format.HEADER
    }
    return _int_column(w, sources, typ)


def _string_form(col: pa.Array, typ: pa.DataType, dictionary: bool) -> pa.Array:
    """`col` as `typ`; a string column dictionary-encoded if `dictionary`, else plain."""
    if typ != pa.string() or not dictionary:
        return col.cast(typ)
    return col if pa.types.is_dictionary(col.type) else col.dictionary_encode()


def _per_file(seg: Segment) -> dict[str, object]:
    """The columns every row of a segment shares (its records' and its rejects')."""
    return per_file(seg.path, seg.header)


def per_file(path: str, header: dict[str, Any] | None) -> dict[str, object]:
    """The values of the columns every row of the segment at `path` with `header` shares
    (its records' and its rejects'; None where it has no header)."""
    hdr = header or {}
    return {
        "file": path,
        "epoch": hdr.get("epoch"),
        "role": journal_format.ROLES.get(hdr.get("role", 0)),
        "writer_pid": hdr.get("pid"),
        "service": hdr.get("service"),
        "boot_id": hdr.get("boot_id"),
    }


def _reject_column(
    seg: Segment, per_file: dict[str, object], name: str, typ: pa.DataType
) -> pa.Array:
    """Column `name` of a segment's reject rows: offset, reason, the per-file values."""
    k = len(seg.rejects)
    if name == "offset":
        return pa.array([r.offset for r in seg.rejects], typ)
    if name == "reason":
        return pa.array([r.reason for r in seg.rejects], typ)
    if name == "kind":
        return pa.array([REJECT] * k, typ)
    if name in per_file:
        return _repeat(per_file[name], k, typ)
    return pa.nulls(k, typ)


def record_ids(seg: Segment) -> np.ndarray:
    """The id of each of a segment's records (its rejects have none), in row order."""
    ids: np.ndarray = seg.rows[:, _ID_WORD]
    return ids


def check_columns(columns: Sequence[str]) -> list[str]:
    """The columns asked for, checked against the table (a clear error names the bad one)."""
    unknown = [c for c in columns if c not in NAMES]
    if unknown:
        raise ValueError(
            f"unknown journal column(s) {', '.join(map(repr, unknown))}; the columns are "
            f"{', '.join(NAMES)}"
        )
    return list(columns)


def segment_paths(directory: str | Sequence[str]) -> list[str]:
    """A journal directory's segment files, oldest first (of several directories: each
    one's in turn); FileNotFoundError (with a clear message) if there is no such
    directory or it holds no segment."""
    if not isinstance(directory, str):
        return [p for d in directory for p in segment_paths(d)]
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no journal directory at {directory!r}")
    paths = journal_format.segment_files(directory)
    if not paths:
        raise FileNotFoundError(f"{directory!r} holds no journal segments (*.shwj)")
    return paths


def plan_partitions(paths: Sequence[str], target_bytes: int) -> list[list[str]]:
    """Group segment files (oldest first) into partitions of about `target_bytes`: a large
    segment is a partition of its own, small ones are grouped."""
    parts: list[list[str]] = []
    size = 0
    for p in paths:
        s = os.path.getsize(p)
        if not parts or size + s > target_bytes:
            parts.append([])
            size = 0
        parts[-1].append(p)
        size += s
    return parts
