"""What the per-timer table adds up to (shmwheel/pipeline/tables/figures.py) with no Spark:
on journals drawn by hypothesis (tests/journal_draws.py), the per-producer, per-task and
operations figures equal a plain reading of the table's rows as the audit's SQL defined
them, and the figures of any split of the rows, through JSON and merged, equal the whole's."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from journal_draws import journals

from shmwheel.pipeline.tables import figures as F
from shmwheel.pipeline.tables import histogram as H
from shmwheel.pipeline.tables import pertimer as P
from shmwheel.pipeline.tables.figures import TimerFigures

Journal = tuple[list[dict[str, Any]], P.Bounds]


def _table(records: list[dict[str, Any]], b: P.Bounds) -> pa.Table:
    return P.per_timer_table(
        pa.table({c: pa.array([r[c] for r in records], pa.int64()) for c in P.INPUT}), b
    )


def _ratio(num: float, den: float, scale: float = 1.0) -> float | None:
    return num / den / scale if den else None


def producers_reference(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["type"] in ("one-shot", "repeating"):
            by.setdefault(r["producer"] or 0, []).append(r)
    out = []
    for p, rs in sorted(by.items()):
        lates = [r["late_max_us"] for r in rs if r["late_max_us"] is not None]
        out.append({
            "producer": p, "timers": len(rs),
            "repeating": sum(r["type"] == "repeating" for r in rs),
            "runs": sum(r["runs_fired"] for r in rs),
            "cancelled": sum(r["end"] == "cancelled" for r in rs),
            "mean_late_ms": _ratio(sum(r["late_sum_us"] or 0 for r in rs),
                                   sum(r["late_n"] for r in rs), 1000),
            "max_late_ms": max(lates) / 1000 if lates else None,
        })  # fmt: skip
    return out


def tasks_reference(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["run_task"] is not None:
            by.setdefault(r["run_task"], []).append(r)
    out = []
    for t, rs in sorted(by.items()):
        runs = sum(r["outcomes"] for r in rs)
        durs = [r["duration_max_us"] for r in rs if r["duration_max_us"] is not None]
        s = {c: sum(r[c] for r in rs) for c in ("ok", "error", "crashed")}
        out.append({
            "task": t, "runs": runs, **s,
            "mean_duration_ms": _ratio(sum(r["duration_sum_us"] or 0 for r in rs), runs, 1000),
            "max_duration_ms": max(durs) / 1000 if durs else None,
            "error_rate": _ratio(s["error"], runs), "crash_rate": _ratio(s["crashed"], runs),
        })  # fmt: skip
    return out


def _check_operations(fig: TimerFigures, rows: list[dict[str, Any]]) -> None:
    ops = [r for r in rows if r["type"] == "operation"]
    got = fig.operations_summary()
    ends = {e: sum(r["end"] == e for r in ops) for e in ("completed", "expired", "cancelled")}
    assert {k: got[k] for k in ("operations", *ends, "pending")} == {
        "operations": len(ops), **ends, "pending": len(ops) - sum(ends.values())
    }  # fmt: skip
    ttc = sorted(r["completed_us"] - r["created_us"] for r in ops
                 if r["completed_us"] is not None and r["created_us"] is not None)  # fmt: skip
    t = got["time_to_complete_ms"]
    if not ttc:
        assert t == {"p50": None, "p90": None, "p99": None, "p999": None, "max": None}
        return
    assert t["max"] == ttc[-1] / 1000
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        exact = ttc[max(1, math.ceil(q * len(ttc))) - 1]
        lo, hi = H.bounds(H.code(np.array([exact])))
        assert max(lo[0], ttc[0]) / 1000 <= t[name] <= min(hi[0], ttc[-1]) / 1000


@settings(max_examples=100, deadline=None)
@given(journals())
def test_the_figures_are_the_rows_read_one_by_one(j: Journal) -> None:
    records, b = j
    table = _table(records, b)
    rows = table.to_pylist()
    fig = TimerFigures.of_table(table, b)
    assert fig.per_producer().to_pylist() == producers_reference(rows)
    assert fig.per_task().to_pylist() == tasks_reference(rows)
    _check_operations(fig, rows)


@settings(max_examples=80, deadline=None)
@given(journals(), st.lists(st.integers(0, 8), max_size=3))
def test_the_figures_of_any_split_add_up_to_the_whole(j: Journal, cuts: list[int]) -> None:
    """What the driver does with the buckets' figures: through JSON, merged."""
    records, b = j
    table = _table(records, b)
    edges = [0, *sorted(min(c, table.num_rows) for c in cuts), table.num_rows]
    parts = [
        TimerFigures.from_json(TimerFigures.of_table(table.slice(a, z - a), b).to_json())
        for a, z in itertools.pairwise(edges)
    ]
    merged, whole = TimerFigures.merge(parts), TimerFigures.of_table(table, b)
    assert merged == whole
    assert merged.per_producer().equals(whole.per_producer())
    assert merged.per_task().equals(whole.per_task())
    assert merged.operations_summary() == whole.operations_summary()
    assert merged.tally == whole.tally


def test_operations_in_two_buckets_with_one_time_to_complete() -> None:
    """Two buckets' histograms with a cell in common add up (hypothesis rarely draws it)."""
    b = P.Bounds(end_us=10_000, final_epoch=1, grace_us=0, tasks=("done",))

    def rec(i: int, kind: str, t: int) -> dict[str, Any]:
        return {**dict.fromkeys(P.INPUT, 0), "id": i, "kc": P.KIND[kind], "t_us": t,
                "epoch": 1, "deadline_ms": 9, "on_complete_i": 1}  # fmt: skip

    tables = [_table([rec(i, "watched", 100 * i), rec(i, "completed", 100 * i + 700)], b)
              for i in (1, 2)]  # fmt: skip
    merged = TimerFigures.merge(TimerFigures.of_table(t, b) for t in tables)
    assert merged.ttc == {int(H.code(np.array([700]))[0]): 2}
    assert merged.operations_summary()["completed"] == 2
    assert merged.per_task().to_pylist()[0]["task"] == "done"


def _tally_reference(rows: list[dict[str, Any]], b: P.Bounds) -> dict[str, dict[str, int]]:
    """How the timers ended, by type, counted row by row (audit.py's rule for pending)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        t = out.setdefault(r["type"], dict.fromkeys(F.TALLY, 0))
        t["n"] += 1
        if r["end"] in ("ran", "cancelled", "completed", "expired"):
            t[r["end"]] += 1
        due = r["deadline_ms"]
        if (r["type"] in ("one-shot", "operation") and r["decisions"] == 0 and due is not None
                and not due * 1000 < b.end_us - b.grace_us):  # fmt: skip
            t["pending"] += 1
        t["runs"] += r["runs_fired"] or 0
        t["repeats_in_window"] += r["repeats"] or 0
        t["in_flight"] += r["in_flight_runs"] or 0
    return out


@settings(max_examples=80, deadline=None)
@given(journals(), st.integers(min_value=0, max_value=7))
def test_the_tally_counts_the_table_and_adds_up(
    j: tuple[list[dict[str, Any]], P.Bounds], cut: int
) -> None:
    """The per-bucket tally (summed by the driver) is the table's, whatever the split."""
    records, b = j
    out = _table(records, b)
    assert F.tally(out, b) == _tally_reference(out.to_pylist(), b)
    at = min(cut, out.num_rows)
    halves = [F.tally(out.slice(0, at), b), F.tally(out.slice(at), b)]
    assert F.add_tallies(halves) == F.tally(out, b)


def test_no_rows_no_figures() -> None:
    b = P.Bounds(end_us=0, final_epoch=1, grace_us=0, tasks=("noop",))
    for fig in (TimerFigures.of_table(P.empty(), b), TimerFigures.merge([])):
        assert fig.per_producer().num_rows == 0 and fig.per_task().num_rows == 0
        assert fig.operations_summary()["operations"] == 0


def test_garbage_json_is_refused() -> None:
    with pytest.raises(ValueError):
        TimerFigures.from_json("{not json")
