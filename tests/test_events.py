"""The journal as Arrow (shmwheel/pipeline/events.py) and the numpy view of its string
columns (asnumpy.py), with no Spark: every column of ``segment_batch`` equals a plain
reading of the decoder's records one by one, in file order and in any order asked, and
``index_in`` gives the same indexes for a dictionary-encoded column as for its strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmwheel import journal as J
from shmwheel.journal import format as F
from shmwheel.journal.write.writer import JournalOptions, SegmentWriter
from shmwheel.pipeline import asnumpy as A
from shmwheel.pipeline import events as E
from shmwheel.wheel.constants import TASK_NONE

TASKS = ["noop", "fail", "other"]


def _journal(d: Path, seed: int) -> None:
    """One coordinator segment of every lifecycle kind, fields drawn at random (task
    indexes past the header's names and TASK_NONE among them), and a reaper segment."""
    rng = np.random.default_rng(seed)
    co = SegmentWriter(JournalOptions(str(d), "none", epoch=3), "coordinator", "svc", TASKS, 1)
    re = SegmentWriter(JournalOptions(str(d), "none", epoch=3), "reaper", "svc", TASKS, 1)

    def r(hi: int = 1 << 40) -> int:
        return int(rng.integers(0, hi))

    for i in range(400):
        t = 10_000_000 + i * 7
        k = int(rng.integers(0, 7))
        task = int(rng.choice([0, 1, 2, 5, TASK_NONE]))
        if k == 0:
            blob = bytes(r(20))
            co.append(F.body(F.SCHEDULED, i, t, r(), task, r(), r(512), r(), r(100), blob))
        elif k == 1:
            co.append(F.body(F.CANCELLED, i, t))
        elif k == 2:
            re.append(F.body(F.FIRED, i, t, r(100), r()))
        elif k == 3:
            re.append(F.body(F.OUTCOME, i, t, r(100), int(rng.integers(0, 5)), r(), r() - 5))
        elif k == 4:
            blob = msgpack.packb([["k"] * r(4), None])
            on_exp = int(rng.choice([0, 2, 7, TASK_NONE]))
            co.append(F.body(F.WATCHED, i, t, r(), r(9), r(5), task, on_exp, blob))
        else:
            re.append(F.body(F.COMPLETED if k == 5 else F.EXPIRED, i, t))
    for w in (co, re):
        w.flush()
        w.close()


def _name(index: Any, names: list[str], valid: bool = True) -> str | None:
    ok = valid and isinstance(index, int) and 0 <= index < len(names)
    return names[index] if ok else None


def _expected(seg: J.Segment) -> list[dict[str, Any]]:
    """The table's rows, one record at a time, as docs/pipeline.md describes each column."""
    h = seg.header or {}
    tasks, out = list(h.get("tasks", ())), []
    outcomes = [F.OUTCOMES.get(k, "") for k in range(max(F.OUTCOMES) + 1)]
    for off, rec in zip(seg.rows[:, 0].tolist(), seg.records, strict=True):
        d = F.as_dict(rec)
        k = d["kind"]
        row: dict[str, Any] = dict.fromkeys(E.NAMES)
        wall = d["t_us"] - h["mono_us"] + h["wall_us"]
        row.update(file=seg.path, offset=off, epoch=h["epoch"], role=F.ROLES[h["role"]],
                   writer_pid=h["pid"], service=h["service"], boot_id=h["boot_id"], kind=k,
                   id=d["id"], t_us=d["t_us"], wall_us=wall)  # fmt: skip
        for c in ("run", "deadline_ms", "producer", "flags", "period_ms", "duration_us",
                  "next_deadline_ms", "required", "keys"):  # fmt: skip
            row[c] = d.get(c)
        if k == "scheduled":
            row["task"] = _name(d["task"], tasks)
        if k == "outcome":
            row["outcome"] = _name(d["outcome"], outcomes)
        if k == "watched":
            for c in ("on_complete", "on_expire"):
                row[c] = _name(d[c], tasks, d[c] != TASK_NONE)
        if k in ("scheduled", "watched"):
            row["payload_bytes"] = len(d["blob"])
        out.append(row)
    return out


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dictionary=st.booleans())
def test_every_column_is_the_records_read_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, seed: int, dictionary: bool
) -> None:
    d = tmp_path_factory.mktemp("j")
    _journal(d, seed)
    segs = list(J.read(d))
    assert sum(len(s.rows) for s in segs) == 400
    for seg in segs:
        want = _expected(seg)
        got = E.segment_batch(seg, dictionary=dictionary).to_pylist()
        assert got == want
        order = np.random.default_rng(seed).permutation(len(seg.rows))
        got = E.segment_batch(seg, E.NAMES[::3], dictionary=dictionary, order=order)
        assert got.to_pylist() == [{c: want[i][c] for c in E.NAMES[::3]} for i in order]
        assert got.schema.names == list(E.NAMES[::3])


def test_an_order_of_the_wrong_length_is_refused(tmp_path: Path) -> None:
    _journal(tmp_path, 1)
    seg = next(J.read(tmp_path))
    with pytest.raises(ValueError, match="order has 3 rows"):
        E.segment_batch(seg, order=np.arange(3))


@settings(max_examples=50, deadline=None)
@given(
    chunks=st.lists(
        st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "c", "dd", ""])), max_size=20),
        max_size=4,
    ),
    names=st.lists(st.sampled_from(["a", "b", "dd", "zz", ""]), max_size=4, unique=True),
)
def test_index_in_of_dictionaries_is_index_in_of_their_strings(
    chunks: list[list[str | None]], names: list[str]
) -> None:
    plain = pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
    # each chunk its own dictionary (as Parquet row groups read back have them), some with
    # values no row uses, and null indexes
    encoded = pa.chunked_array(
        [pc.dictionary_encode(pa.concat_arrays([pa.array(["zz"]), c])).slice(1)
         for c in plain.chunks],
        pa.dictionary(pa.int32(), pa.string()),
    )  # fmt: skip
    want = A.index_in(plain, names)
    assert want.dtype == np.int64 and len(want) == len(plain)
    assert np.array_equal(A.index_in(encoded, names), want)
    for c in (plain, encoded):
        if len(c.chunks) == 1:  # an array, not a chunked one
            assert np.array_equal(A.index_in(c.chunk(0), names), want)
