"""Parquet tables that Spark's Python tasks write themselves, with pyarrow.

Two of the audit's tables are written this way: ``events/`` by the tasks that decode the
journal (one file per segment) and ``timers/`` by the tasks that compute the per-timer
table (one file per bucket). Handing millions of rows back to the JVM only for
Spark to write them cost more than computing them (docs/performance.md).

Ground rules. The driver empties the directory once (``prepare``) before the job that
fills it; each task writes only the files named after its own unit of work, first under a
name of its own (hidden: a leading dot) and then moved onto the final name, so a retried
or speculative attempt replaces what another attempt wrote and never doubles it, and a
reader never sees half a file (Spark and pyarrow skip names that start with a dot).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs


def filesystem(directory: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem that holds `directory` (a path, or a URI pyarrow opens) and the
    path in it."""
    if "://" in directory:
        fs, path = pafs.FileSystem.from_uri(directory)
        return fs, str(path)
    return pafs.LocalFileSystem(), directory


def location(directory: str) -> str:
    """`directory` as every executor must name it: a local path made absolute (the
    driver's working directory, not each executor's); a URI as it is."""
    return directory if "://" in directory else os.path.abspath(directory)


def prepare(directory: str) -> str:
    """Create `directory` empty (deleting what it held); its ``location``."""
    directory = location(directory)
    fs, path = filesystem(directory)
    fs.create_dir(path, recursive=True)
    fs.delete_dir_contents(path)
    return directory


def write(
    table: pa.Table, directory: str, name: str, row_groups: Sequence[int] | None = None
) -> None:
    """`table` as `directory`/`name` (created if missing), whole or not at all (see the
    ground rules); with
    `row_groups`, as row groups of those sizes, in order (an empty one included)."""
    fs, path = filesystem(directory)
    fs.create_dir(path, recursive=True)  # a no-op once it is there
    tmp = f"{path}/.{name}.{uuid.uuid4().hex}.tmp"
    opts = options(table.schema)
    if row_groups is None:
        pq.write_table(table, tmp, filesystem=fs, **opts)
    else:
        assert sum(row_groups) == table.num_rows, "row groups must cover the table"
        with pq.ParquetWriter(tmp, table.schema, filesystem=fs, **opts) as w:
            at = 0
            for size in row_groups:
                w.write_table(table.slice(at, size), row_group_size=max(1, size))
                at += size
    fs.move(tmp, f"{path}/{name}")


def options(schema: pa.Schema) -> dict[str, Any]:
    """The Parquet writer's options for a table of `schema`: dictionary pages for its
    string columns only, and no column statistics. pyarrow's default tries a dictionary
    for every column, and an int column of distinct values (ids, times, offsets) never
    outgrows one in a row group of the audit's size: each value hashed on write and
    looked up on read, for nothing (docs/performance.md). Statistics (each row group's
    min and max) prune nothing here: events/ and timers/ are bucketed by a hash of the
    id, so every row group spans the ids and the times of its whole file; writing them
    cost 0.1 s of a 1.57 M-record segment's 0.5-0.6 s."""
    strings = [f.name for f in schema if _is_string(f.type)]
    return {"use_dictionary": strings, "write_statistics": False}


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))
