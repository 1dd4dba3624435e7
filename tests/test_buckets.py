"""The layout of events/ (shmwheel/pipeline/read/buckets.py), with no Spark: every record of an
id lands in one bucket, every file has one row group per bucket (empty ones included),
and a file written with another number of buckets is refused, not misread."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shmwheel.pipeline.read import buckets, parts

# every Spark test runs in one xdist worker, which starts one JVM for them all
pytestmark = pytest.mark.xdist_group("spark")


def _table(ids: list[int | None], seg: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "pos": pa.array(range(len(ids))),
            "seg": pa.array([seg] * len(ids)),
        }
    )


def _write(table: pa.Table, d: str, name: str, n: int, tail: int = 0) -> None:
    """As the decoding tasks do: the id rows in bucket order (``order``), then the `tail`
    rows without an id."""
    ids = table.column("id").slice(0, table.num_rows - tail).to_numpy()
    perm, sizes = buckets.order(ids, n, tail)
    buckets.write(
        table.take(np.concatenate([perm, np.arange(len(ids), table.num_rows)])), d, name, n, sizes
    )


def test_every_id_is_in_one_bucket_of_every_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n = 5
    d = parts.prepare(str(tmp_path / "events"))
    files = []
    for seg in range(3):  # three segments sharing ids, as coordinator and reaper do
        ids = [int(x) for x in rng.integers(1, 40, 300)] + [None]  # and a reject row
        _write(_table(ids, seg), d, f"seg{seg}.parquet", n, tail=1)
        files.append(f"{d}/seg{seg}.parquet")
    assert [buckets.count(f) for f in files] == [n] * 3
    seen: dict[int, int] = {}
    rows = 0
    for k in range(n):
        got = buckets.read(files, k, n, ["id", "pos", "seg"])
        rows += got.num_rows
        for i in got.column("id").to_pylist():
            assert seen.setdefault(i if i is not None else -1, k) == k, "an id in two buckets"
        # file by file, and in file order inside each file
        key = list(zip(got.column("seg").to_pylist(), got.column("pos").to_pylist(), strict=True))
        assert key == sorted(key)
    assert rows == 3 * 301  # nothing lost, nothing doubled
    assert seen[-1] == n - 1  # rows without an id (rejects) are in the last bucket
    # no column statistics: every row group spans its file's ids (parts.options)
    meta = pq.ParquetFile(files[0]).metadata
    chunks = [meta.row_group(k).column(c) for k in range(n) for c in range(meta.num_columns)]
    assert not any(c.is_stats_set for c in chunks)


def test_empty_buckets_keep_their_row_group(tmp_path: Path) -> None:
    d = parts.prepare(str(tmp_path / "events"))
    _write(_table([7, 7, 7]), d, "one.parquet", 4)  # one id: three buckets empty
    f = f"{d}/one.parquet"
    sizes = [buckets.read([f], k, 4, ["id"]).num_rows for k in range(4)]
    assert sorted(sizes) == [0, 0, 0, 3]
    assert sizes.index(3) == int(buckets.bucket_of(np.array([7]), 4)[0])


def test_a_file_of_other_buckets_is_refused(tmp_path: Path) -> None:
    d = parts.prepare(str(tmp_path / "events"))
    _write(_table([1, 2, 3]), d, "a.parquet", 3)
    with pytest.raises(ValueError, match="written with 4"):
        buckets.read([f"{d}/a.parquet"], 0, 4, ["id"])
    parts.write(_table([1]), d, "plain.parquet")
    with pytest.raises(ValueError, match="not a bucketed events file"):
        buckets.count(f"{d}/plain.parquet")


def test_buckets_are_even_for_dense_ids() -> None:
    sizes = np.bincount(buckets.bucket_of(np.arange(1, 100_001), 12), minlength=12)
    assert sizes.min() > 0.9 * sizes.mean() and sizes.max() < 1.1 * sizes.mean()


class _Conf:
    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = conf

    def get(self, key: str) -> str | None:
        return self.conf.get(key)


class _Session:
    """What timers.buckets_for reads of a SparkSession: the cores and the SparkConf."""

    def __init__(self, cores: int, conf: dict[str, str]) -> None:
        self.sparkContext = self
        self.defaultParallelism = cores
        self._conf = _Conf(conf)

    def getConf(self) -> _Conf:  # Spark's name
        return self._conf


def test_the_number_of_buckets() -> None:
    """The shuffle partitions if set, else the cores (never Spark's default 200); more
    for a large journal, a multiple of the cores."""
    from shmwheel.pipeline.tables.timers import MIN_RECORD_BYTES, ROWS_PER_TASK, buckets_for

    per_task = MIN_RECORD_BYTES * ROWS_PER_TASK  # the bytes that make one bucket full
    key = "spark.sql.shuffle.partitions"
    assert buckets_for(_Session(8, {}), 1000) == 8  # type: ignore[arg-type]
    assert buckets_for(_Session(8, {key: "3"}), 1000) == 3  # type: ignore[arg-type]
    assert buckets_for(_Session(2, {key: "4"}), 9 * per_task) == 10  # type: ignore[arg-type]
    assert buckets_for(_Session(2, {}), 3 * per_task) == 4  # type: ignore[arg-type]
