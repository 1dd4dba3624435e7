"""The layout of ``events/``: bucketed by id, so the per-timer table needs no shuffle.

Theory of operation. A timer's records are spread over the coordinator's and the reaper's
segments (and over epochs), so grouping them by id needs an exchange: every record of an
id must reach one task. Spark's shuffle did that, and it was the audit's main cost: each
record crossed from the Parquet reader into the JVM's rows, through the shuffle files and
back out to Python as Arrow (docs/performance.md). The decoding tasks already hold every
record in numpy, so they do the exchange's first half for free, as Spark's own bucketed
tables do (``bucketBy``): each segment's file in ``events/`` holds its rows ordered by
bucket, one Parquet row group per bucket, every file the same ``n`` row groups (empty ones
included). The task for bucket ``k`` then reads row group ``k`` of every file and has all
the records of its ids, with no shuffle at all.

A record's bucket is a multiplicative hash of its id modulo ``n`` (ids are dense and
sequential; the hash keeps buckets even whatever their low bits mean). Reject rows have
no id and go in the last bucket. ``n`` is written into each file's metadata and checked
on read. The decoding tasks build a segment's Arrow columns in bucket order
(``events.segment_batch`` with an order: each column gathered once from the decoder's
int64 matrix), so no column is reordered after it is built.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import parts

#: the key of each file's metadata that holds its number of buckets
META_KEY = b"shmwheel.buckets"
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / phi: Knuth's multiplicative hash


def bucket_of(ids: np.ndarray, n: int) -> np.ndarray:
    """Each id's bucket in [0, n)."""
    h = ids.astype(np.uint64) * _GOLDEN  # wraps modulo 2^64, as intended
    return ((h >> np.uint64(32)) % np.uint64(n)).astype(np.int64)


def order(ids: np.ndarray, n: int, tail: int = 0) -> tuple[np.ndarray, list[int]]:
    """The permutation that orders rows by the bucket of their id (stable: file order
    within a bucket), and each bucket's number of rows; the `tail` rows that follow the
    ids' rows and have no id (a segment's rejects) count in the last bucket."""
    b = bucket_of(ids, n)
    sizes = np.bincount(b, minlength=n)
    sizes[-1] += tail
    if n <= 1 << 16:  # numpy's stable sort of 16-bit keys is a radix sort: 3.6x faster
        b = b.astype(np.uint16)
    return np.argsort(b, kind="stable"), sizes.tolist()


def write(table: pa.Table, directory: str, name: str, n: int, sizes: list[int]) -> None:
    """`table`, whose rows are in bucket order (``order``), `sizes[k]` rows of bucket k,
    as `directory`/`name` (``parts.write``): one row group per bucket, `n` in the file's
    metadata."""
    assert len(sizes) == n and sum(sizes) == table.num_rows, (len(sizes), n)
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = str(n).encode()
    parts.write(table.replace_schema_metadata(meta), directory, name, row_groups=sizes)


def count(path: str) -> int:
    """The number of buckets of the events file at `path`."""
    fs, p = parts.filesystem(path)
    with fs.open_input_file(p) as f:
        meta = pq.ParquetFile(f).schema_arrow.metadata or {}
    if META_KEY not in meta:
        raise ValueError(f"{path} is not a bucketed events file (no {META_KEY.decode()})")
    return int(meta[META_KEY])


def read(files: Sequence[str], k: int, n: int, columns: Sequence[str]) -> pa.Table:
    """Bucket `k` of `n`: row group k of every events file, `columns` only."""
    tables = []
    for path in files:
        fs, p = parts.filesystem(path)
        with fs.open_input_file(p) as f:
            pf = pq.ParquetFile(f)
            got = int((pf.schema_arrow.metadata or {}).get(META_KEY, b"0"))
            if got != n or pf.num_row_groups != n:
                raise ValueError(
                    f"{path} has {pf.num_row_groups} row groups and {got} buckets; "
                    f"the events were written with {n}: write events/ again"
                )
            tables.append(pf.read_row_group(k, columns=list(columns)))
    return pa.concat_tables(tables)
