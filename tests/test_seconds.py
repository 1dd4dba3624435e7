"""The per-second figures (shmwheel/pipeline/tables/seconds.py) and the lateness histogram
(histogram.py) with no Spark: on tables of events drawn by hypothesis, they equal a plain
Python reading of the same events, a segment's figures added to another's equal the
figures of both together, and a percentile is the exact one up to its bin's width."""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmwheel.pipeline.tables import histogram as H
from shmwheel.pipeline.tables import seconds as S

I64 = np.iinfo(np.int64)


# -- the histogram ----------------------------------------------------------------------


@given(st.lists(st.integers(int(I64.min), int(I64.max)), min_size=1, max_size=200))
def test_every_value_is_in_its_bin_and_codes_sort_as_values_do(values: list[int]) -> None:
    v = np.array(values, np.int64)
    c = H.code(v)
    lo, hi = H.bounds(c)
    clipped = np.clip(v, -H.LIMIT, H.LIMIT)
    assert ((lo <= clipped) & (clipped <= hi)).all()
    order = np.argsort(clipped, kind="stable")
    assert (np.diff(c[order]) >= 0).all()
    # a bin holds one value below 2**SUB_BITS, else under 1/2**SUB_BITS of its values
    mag = np.abs(clipped)
    width = (hi - lo + 1).astype(np.float64)
    small = mag < (1 << H.SUB_BITS)
    assert (width[small] == 1).all()
    assert (width[~small] <= mag[~small] / (1 << H.SUB_BITS)).all()


def test_values_beside_every_power_of_two() -> None:
    """Where a float rounds a magnitude up to the next power of two (above 2**53)."""
    v = np.array([s * ((1 << k) + d) for k in range(1, 63) for d in (-1, 0, 1) for s in (1, -1)])
    lo, hi = H.bounds(H.code(v))
    clipped = np.clip(v, -H.LIMIT, H.LIMIT)
    assert ((lo <= clipped) & (clipped <= hi)).all()


def test_bins_tile_the_line_with_no_gap() -> None:
    """Adjacent codes' bins touch: every integer has a bin and only one."""
    top = int(H.code(np.array([H.LIMIT]))[0])  # the largest magnitude's code
    c = np.arange(-top - 1, top + 1, dtype=np.int64)
    c = c[c != -1]  # -(0 + 1): zero is not negative
    lo, hi = H.bounds(c)
    assert (lo[1:] == hi[:-1] + 1).all()
    assert (H.code(lo) == c).all() and (H.code(hi) == c).all()


@settings(max_examples=60)
@given(
    st.lists(st.integers(-5_000, 10**9), min_size=1, max_size=300),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6),
)
def test_a_quantile_is_the_exact_one_within_its_bin(values: list[int], qs: list[float]) -> None:
    v = np.array(values, np.int64)
    code, n = np.unique(H.code(v), return_counts=True)
    got = H.quantiles(code, n, qs, int(v.min()), int(v.max()))
    ordered = np.sort(v)
    for q, g in zip(qs, got, strict=True):
        exact = ordered[max(1, math.ceil(q * len(v))) - 1]  # the value of rank ceil(qn)
        lo, hi = H.bounds(H.code(np.array([exact])))
        assert max(lo[0], v.min()) <= g <= min(hi[0], v.max())


def test_no_values_no_quantiles() -> None:
    z = np.zeros(0, np.int64)
    assert all(math.isnan(x) for x in H.quantiles(z, z, [0.5, 0.99], 0, 0))


# -- the per-second figures ---------------------------------------------------------------

KINDS = (*S.KINDS, "reject")
BASE_S = 1_795_000_000  # a wall-clock second


@st.composite
def event_tables(draw: Any) -> list[dict[str, Any]]:
    """Rows of events/ as dicts: records of every kind over a few seconds (some with no
    wall time), fires early and late, outcomes ok or not, task names, rejects."""
    rows = []
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from(KINDS))
        if kind == "reject":
            rows.append({"kind": kind, "epoch": draw(st.integers(1, 3))})
            continue
        t_us = draw(st.integers(0, 5_000_000))
        wall = (
            None
            if draw(st.integers(0, 9)) == 0
            else (BASE_S + draw(st.integers(0, 3))) * 10**6 + t_us % 10**6
        )
        row: dict[str, Any] = {"kind": kind, "epoch": draw(st.integers(1, 3)), "t_us": t_us,
                               "wall_us": wall}  # fmt: skip
        if kind in ("scheduled", "fired", "watched"):
            row["deadline_ms"] = (t_us - draw(st.integers(-3_000, 200_000))) // 1000
        if kind == "outcome":
            row["outcome"] = draw(st.sampled_from(("ok", "error", "crashed")))
        if kind == "scheduled":
            row["task"] = draw(st.sampled_from(("noop", "fail")))
        if kind == "watched":
            row["on_complete"] = draw(st.sampled_from(("done", None)))
            row["on_expire"] = "late"
        rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]], dictionary: bool = False) -> pa.Table:
    ints = ("epoch", "t_us", "wall_us", "deadline_ms")
    cols: dict[str, Any] = {c: pa.array([r.get(c) for r in rows], pa.int64()) for c in ints}
    for c in ("kind", "outcome", "task", "on_complete", "on_expire"):
        col = pa.array([r.get(c) for r in rows], pa.string())
        cols[c] = col.dictionary_encode() if dictionary else col
    return pa.table(cols)


def reference(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures, one event at a time."""
    recs = [r for r in rows if r["kind"] != "reject"]
    per: dict[int | None, Counter[str]] = defaultdict(Counter)
    late: dict[int | None, list[int]] = defaultdict(list)
    for r in recs:
        sec = None if r["wall_us"] is None else r["wall_us"] // 10**6
        per[sec][r["kind"]] += 1
        if r["kind"] == "outcome" and r["outcome"] != "ok":
            per[sec]["task_failures"] += 1
        if r["kind"] == "fired":
            late[sec].append(r["t_us"] - r["deadline_ms"] * 1000)
    names = {r.get(c) for r in recs for c in ("task", "on_complete", "on_expire")} - {None}
    return {
        "per": per,
        "late": late,
        "rejects": len(rows) - len(recs),
        "start": min((r["t_us"] for r in recs), default=0),
        "end": max((r["t_us"] for r in recs), default=0),
        "epoch": max((r["epoch"] for r in recs), default=0),
        "tasks": tuple(sorted(names)),
    }


def _check(s: S.Seconds, rows: list[dict[str, Any]]) -> None:
    ref = reference(rows)
    assert (s.rejects, s.start_us, s.end_us, s.final_epoch, s.tasks) == (
        ref["rejects"], ref["start"], ref["end"], ref["epoch"], ref["tasks"]
    )  # fmt: skip
    totals = Counter[str]()
    for c in ref["per"].values():
        totals.update(c)
    assert s.kinds() == {**{k: totals[k] for k in S.KINDS}, "reject": ref["rejects"]}
    thr = s.throughput().to_pylist()
    want = sorted(k for k in ref["per"] if k is not None)
    assert [int(r["window"].timestamp()) for r in thr] == want
    for r in thr:
        c = ref["per"][int(r["window"].timestamp())]
        assert {k: r[k] for k in (*S.KINDS, "task_failures")} == {
            k: c[k] for k in (*S.KINDS, "task_failures")
        }
    lat = s.lateness().to_pylist()
    assert [int(r["window"].timestamp()) for r in lat] == [k for k in want if ref["late"][k]]
    for r in lat:
        vals = np.sort(np.array(ref["late"][int(r["window"].timestamp())]))
        assert r["fired"] == len(vals) and r["max_ms"] == vals[-1] / 1000
        for q, name in zip(S.QUANTILES, S.QNAMES, strict=True):
            exact = vals[max(1, math.ceil(q * len(vals))) - 1]
            lo, hi = H.bounds(H.code(np.array([exact])))
            assert lo[0] / 1000 <= r[f"{name}_ms"] <= hi[0] / 1000
    every = np.sort(np.array([v for vs in ref["late"].values() for v in vs], np.int64))
    o = s.overall()
    assert o["fires"] == len(every)
    if len(every):
        assert (o["min_ms"], o["max_ms"]) == (every[0] / 1000, every[-1] / 1000)
        exact = every[max(1, math.ceil(0.99 * len(every))) - 1]
        lo, hi = H.bounds(H.code(np.array([exact])))
        assert lo[0] / 1000 <= o["p99_ms"] <= hi[0] / 1000
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(o["cdf"]))
    else:
        assert o["p99_ms"] is None and o["cdf"] == []


@settings(max_examples=150, deadline=None)
@given(event_tables(), st.booleans())
def test_figures_of_a_table_equal_a_plain_reading(rows: list[dict[str, Any]], dic: bool) -> None:
    _check(S.Seconds.of_events(_table(rows, dic)), rows)


@settings(max_examples=150, deadline=None)
@given(event_tables(), st.lists(st.integers(0, 60), max_size=4))
def test_figures_of_parts_merged_equal_the_figures_of_the_whole(
    rows: list[dict[str, Any]], cuts: list[int]
) -> None:
    """What the driver does with the decoding tasks' figures: through bytes, merged."""
    edges = [0, *sorted(min(c, len(rows)) for c in cuts), len(rows)]
    parts = [
        S.Seconds.from_bytes(S.Seconds.of_events(_table(rows[a:b], True)).to_bytes())
        for a, b in itertools.pairwise(edges)
    ]
    merged, whole = S.Seconds.merge(parts), S.Seconds.of_events(_table(rows))
    for name in ("second", "counts", "late_max", "hist_second", "hist_code", "hist_n"):
        assert np.array_equal(getattr(merged, name), getattr(whole, name)), name
    assert merged.overall() == whole.overall()
    _check(merged, rows)


def test_seconds_far_apart_are_counted_apart() -> None:
    """A span of seconds too wide to count over (a sort instead) gives the same figures."""
    rows = [{"kind": "fired", "epoch": 1, "t_us": t, "wall_us": w, "deadline_ms": 0}
            for t, w in ((5, 0), (7, 10**15), (9, 10**15 + 1))]  # fmt: skip
    _check(S.Seconds.of_events(_table(rows)), rows)


def test_a_chunked_table_with_different_dictionaries() -> None:
    a = _table([{"kind": "fired", "epoch": 1, "t_us": 3, "wall_us": 0, "deadline_ms": 0}], True)
    b = _table([{"kind": "outcome", "epoch": 2, "t_us": 4, "wall_us": 0, "outcome": "error"}], True)
    s = S.Seconds.of_events(pa.concat_tables([a, b]))
    assert s.kinds()["fired"] == 1 and s.counts[0, -1] == 1 and s.final_epoch == 2


def test_garbage_bytes_are_refused_clearly() -> None:
    with pytest.raises(ValueError):
        S.Seconds.from_bytes(b"not an npz")
    assert S.Seconds.merge([]).kinds() == {**dict.fromkeys(S.KINDS, 0), "reject": 0}
