"""The per-timer kernel (shmwheel/pipeline/tables/pertimer.py) with no Spark: its table equals a
plain Python reading of the audit's per-timer rules, record by record, on journals drawn
by hypothesis (several epochs, repeating runs, operations, missing and doubled records)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from journal_draws import TASKS, journals

from shmwheel.pipeline.tables import pertimer as P

K, OC = P.KIND, P.OUTCOME


def reference(records: list[dict[str, Any]], b: P.Bounds) -> dict[int, dict[str, Any]]:
    """The per-timer table, one timer at a time, from the rules as docs/pipeline.md and
    pertimer.py state them (None for a figure over no record)."""
    ids: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        ids.setdefault(r["id"], []).append(r)
    return {i: _timer(i, rs, b) for i, rs in ids.items()}


def _mx(vals: list[Any]) -> Any:
    return max(vals) if vals else None


def _mn(vals: list[Any]) -> Any:
    return min(vals) if vals else None


def _of(rs: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [r for r in rs if r["kc"] in [K[k] for k in kinds]]


def _run(rs: list[dict[str, Any]], b: P.Bounds) -> dict[str, Any]:
    """One run's figures and flags from its fire and outcome records."""
    fires, outs = _of(rs, "fired"), _of(rs, "outcome")
    fe = [r["epoch"] for r in fires]
    oe = [r["epoch"] for r in outs]
    late = _mn([r["t_us"] - r["deadline_ms"] * 1000 for r in fires])
    last = max(outs, key=lambda r: r["t_us"]) if outs else None
    unanswered = bool(fires) and not outs
    in_flight = (
        bool(fires)
        and max(fe) == b.final_epoch
        and (max(r["t_us"] for r in fires) > b.end_us - b.grace_us)
    )
    twice = bool(fires) and (
        (bool(outs) and min(oe) < max(fe)) or len(fires) > max(fe) - min(fe) + 1
    )
    result = last["oc"] if last else None
    return {
        "runs_fired": int(bool(fires)),
        "outcomes": int(bool(outs)),
        "early_runs": int(late is not None and late < 0),
        "twice_runs": int(twice),
        "repeats": len(fires) - 1 if not twice and len(fires) > 1 else 0,
        "lost_runs": int(unanswered and not in_flight),
        "in_flight_runs": int(unanswered and in_flight),
        "outcomes_without_fire": int(bool(outs) and not fires and max(r["run"] for r in outs) > 0),
        "ok": int(result == OC["ok"]),
        "error": int(result == OC["error"]),
        "crashed": int(result == OC["crashed"]),
        "outcome_epochs": max(oe) - min(oe) + 1 if oe else 0,
        "late": late,
        "duration": last["duration_us"] if last else None,
        "next": last["next_deadline_ms"] if last else None,
        "run": _mx([r["run"] for r in rs]),
    }


def _timer(i: int, rs: list[dict[str, Any]], b: P.Bounds) -> dict[str, Any]:
    n = {k: len(_of(rs, k)) for k in ("scheduled", "watched", "cancelled", "completed",
                                      "expired", "fired", "outcome")}  # fmt: skip
    made = _of(rs, "scheduled", "watched")
    sched, watched = _of(rs, "scheduled"), _of(rs, "watched")
    t: dict[str, Any] = {"id": i, **{f"n_{k}": n[k] for k in
                                      ("scheduled", "watched", "cancelled", "completed",
                                       "expired")}}  # fmt: skip
    t["deadline_ms"] = _mx([r["deadline_ms"] for r in made])
    t["period_ms"] = _mx([r["period_ms"] for r in sched])
    t["producer"] = _mx([r["producer"] for r in sched if r["producer"] > 0])
    t["created_us"] = _mn([r["t_us"] for r in made])
    t["cancel_us"] = _mn([r["t_us"] for r in _of(rs, "cancelled")])
    t["completed_us"] = _mn([r["t_us"] for r in _of(rs, "completed")])
    t["expired_us"] = _mn([r["t_us"] for r in _of(rs, "expired")])
    t["last_fire_us"] = _mx([r["t_us"] for r in _of(rs, "fired")])
    fo = _of(rs, "fired", "outcome")
    if n["fired"] <= 1 and n["outcome"] <= 1:
        runs = [_run(fo, b)]  # at most one of each: one run, whatever its run numbers
    else:
        by_run: dict[int, list[dict[str, Any]]] = {}
        for r in fo:
            by_run.setdefault(r["run"], []).append(r)
        runs = [_run(v, b) for _, v in sorted(by_run.items())]
    for c in P.RUN_TALLIES:
        t[c] = sum(r[c] for r in runs)
    t["outcome_epochs"] = max(r["outcome_epochs"] for r in runs)
    lates = [r["late"] for r in runs if r["late"] is not None]
    t["late_sum_us"], t["late_max_us"] = (sum(lates) if lates else None), _mx(lates)
    t["late_min_us"], t["late_n"] = _mn(lates), len(lates)
    durs = [r["duration"] for r in runs if r["duration"] is not None]
    t["duration_sum_us"], t["duration_max_us"] = (sum(durs) if durs else None), _mx(durs)
    answered = [r for r in runs if r["outcomes"]]
    t["last_next_deadline_ms"] = max(answered, key=lambda r: r["run"])["next"] if answered else None
    op = n["watched"] > 0
    ran, cancelled = t["runs_fired"] > 0, n["cancelled"] > 0
    completed, expired = n["completed"] > 0, n["expired"] > 0
    if op:
        t["type"] = "operation"
    elif t["period_ms"] is not None and t["period_ms"] > 0:
        t["type"] = "repeating"
    else:
        t["type"] = "one-shot" if sched else "unscheduled"
    t["decisions"] = completed + expired + cancelled if op else ran + cancelled
    ends = (("completed", op and completed), ("expired", op and expired),
            ("cancelled", cancelled), ("ran", ran))  # fmt: skip
    t["end"] = next((e for e, c in ends if c), None)
    if op:
        idx = (
            _mx([r["on_complete_i"] for r in watched])
            if completed
            else (_mx([r["on_expire_i"] for r in watched]) if expired else None)
        )
    else:
        idx = _mx([r["task_i"] for r in sched])
    t["run_task"] = TASKS[idx - 1] if idx and idx <= len(TASKS) else None
    return t


def kernel(records: list[dict[str, Any]], b: P.Bounds) -> dict[int, dict[str, Any]]:
    table = pa.table({c: pa.array([r[c] for r in records], pa.int64()) for c in P.INPUT})
    out = P.per_timer_table(table, b)
    assert out.column_names == [c for c, _ in P.OUTPUT]
    return {row["id"]: row for row in out.to_pylist()}


@settings(max_examples=200, deadline=None)
@given(journals())
def test_the_kernel_is_the_rules_timer_by_timer(j: tuple[list[dict[str, Any]], P.Bounds]) -> None:
    records, b = j
    assert kernel(records, b) == reference(records, b)


def test_the_cases_hypothesis_must_not_miss() -> None:
    """A repeating timer over two epochs (a run repeated inside the window), an operation,
    a run fired twice in one epoch, a timer with one fire and one outcome of different
    run numbers (read as one run), and fires at the edge of the grace at the end."""
    b = P.Bounds(end_us=100_000, final_epoch=2, grace_us=1000, tasks=TASKS)

    def rec(i: int, kind: str, t: int, **kw: int) -> dict[str, Any]:
        base = dict.fromkeys(P.INPUT, 0)
        return {**base, "id": i, "kc": K[kind], "t_us": t, "epoch": 1, **kw}

    records = [
        rec(1, "scheduled", 0, deadline_ms=1, period_ms=10, task_i=1, producer=7),
        rec(1, "fired", 1000, run=1, deadline_ms=1),
        rec(1, "fired", 1001, run=1, deadline_ms=1, epoch=2),  # no outcome in epoch 1
        rec(1, "outcome", 1500, run=1, oc=OC["ok"], next_deadline_ms=11, epoch=2),
        rec(1, "fired", 11_000, run=2, deadline_ms=11, epoch=2),
        rec(1, "outcome", 11_500, run=2, oc=OC["error"], next_deadline_ms=21, epoch=2),
        rec(2, "watched", 0, deadline_ms=50, on_complete_i=2, on_expire_i=3),
        rec(2, "completed", 2000),
        rec(2, "outcome", 2100, run=0, oc=OC["ok"]),
        rec(3, "scheduled", 0, deadline_ms=5),
        rec(3, "fired", 5000, run=1, deadline_ms=5),
        rec(3, "fired", 5001, run=1, deadline_ms=5),
        rec(3, "outcome", 5100, run=1, oc=OC["crashed"]),
        rec(4, "scheduled", 0, deadline_ms=5),
        rec(4, "fired", 5000, run=1, deadline_ms=5),
        rec(4, "outcome", 5100, run=2, oc=OC["ok"]),
        # fired in the last epoch with no outcome: at the grace's edge lost, after it in flight
        rec(5, "scheduled", 0, deadline_ms=99),
        rec(5, "fired", 99_000, run=1, deadline_ms=99, epoch=2),
        rec(6, "scheduled", 0, deadline_ms=99),
        rec(6, "fired", 99_001, run=1, deadline_ms=99, epoch=2),
    ]
    got = kernel(records, b)
    assert got == reference(records, b)
    assert (got[1]["type"], got[1]["repeats"], got[1]["twice_runs"]) == ("repeating", 1, 0)
    assert (got[1]["runs_fired"], got[1]["ok"], got[1]["error"]) == (2, 1, 1)
    assert got[1]["last_next_deadline_ms"] == 21 and got[1]["producer"] == 7
    assert (got[2]["type"], got[2]["end"], got[2]["run_task"]) == ("operation", "completed", "fail")
    assert got[3]["twice_runs"] == 1 and got[3]["crashed"] == 1
    assert (got[4]["runs_fired"], got[4]["lost_runs"], got[4]["outcomes_without_fire"]) == (1, 0, 0)
    assert (got[5]["lost_runs"], got[5]["in_flight_runs"]) == (1, 0)
    assert (got[6]["lost_runs"], got[6]["in_flight_runs"]) == (0, 1)


def test_on_a_tie_the_later_record_decides() -> None:
    """Two outcomes of one run recorded at the same microsecond: the later record (in the
    rows' order, the order the journal wrote them in) is the run's result, as SQL's
    max_by over the journal's order gives it; the rows' order is not the ids' order."""
    b = P.Bounds(end_us=10_000, final_epoch=1, grace_us=0, tasks=TASKS)

    def rec(i: int, kind: str, t: int, **kw: int) -> dict[str, Any]:
        return {**dict.fromkeys(P.INPUT, 0), "id": i, "kc": K[kind], "t_us": t, "epoch": 1, **kw}

    records = [
        rec(2, "scheduled", 0, deadline_ms=1),
        rec(1, "scheduled", 0, deadline_ms=1),
        rec(1, "fired", 1000, run=1, deadline_ms=1),
        rec(2, "fired", 1000, run=1, deadline_ms=1),
        rec(1, "outcome", 1500, run=1, oc=OC["error"], duration_us=7),
        rec(2, "outcome", 1500, run=1, oc=OC["ok"], duration_us=8),
        rec(1, "outcome", 1500, run=1, oc=OC["crashed"], duration_us=9),
        rec(2, "outcome", 1500, run=1, oc=OC["error"], duration_us=10),
    ]
    got = kernel(records, b)
    assert (got[1]["crashed"], got[1]["error"], got[1]["duration_max_us"]) == (1, 0, 9)
    assert (got[2]["error"], got[2]["ok"], got[2]["duration_max_us"]) == (1, 0, 10)


def test_nulls_and_an_empty_partition() -> None:
    b = P.Bounds(end_us=0, final_epoch=1, grace_us=0, tasks=())
    empty = pa.table({c: pa.array([], pa.int64()) for c in P.INPUT})
    assert P.per_timer_table(empty, b).num_rows == 0
    # a scheduled record whose task is not among the names (null index) runs no named task
    cols = {c: pa.array([None], pa.int64()) for c in P.INPUT}
    cols.update(id=pa.array([9]), kc=pa.array([K["scheduled"]]), t_us=pa.array([1]))
    row = P.per_timer_table(pa.table(cols), b).to_pylist()[0]
    assert (row["type"], row["run_task"], row["end"], row["late_n"]) == (
        "one-shot", None, None, 0,
    )  # fmt: skip


def _events(rows: list[dict[str, Any]]) -> pa.Table:
    """A table of events/'s columns (``P.EVENT_COLUMNS``) with these rows (missing: null)."""
    strings = ("kind", "outcome", "task", "on_complete", "on_expire")
    return pa.table(
        {
            c: pa.array([r.get(c) for r in rows], pa.string() if c in strings else pa.int64())
            for c in P.EVENT_COLUMNS
        }
    )


def test_coded_gives_each_kind_its_fields() -> None:
    """Kinds and outcomes become the journal's codes, task names 1-based indexes into
    the scope's names; an unknown outcome is no outcome (-1, not code 0), an unknown or
    missing name is 0, a field a record does not have is 0; reject rows are left out."""
    events = _events([
        {"id": 1, "kind": "scheduled", "period_ms": 10, "producer": 4242, "task": "noop"},
        {"id": 2, "kind": "watched", "on_complete": "fail", "on_expire": "noop"},
        {"id": 3, "kind": "outcome", "outcome": "error", "duration_us": 300,
         "next_deadline_ms": 55},
        {"id": 4, "kind": "outcome", "outcome": "bogus"},
        {"kind": "reject"},
        {"id": 5, "kind": "scheduled", "task": "elsewhere"},
        {"id": 6, "kind": "cancelled"},
    ])  # fmt: skip
    r = P.coded(events, TASKS).to_pydict()
    assert list(r) == list(P.INPUT)
    assert r["id"] == [1, 2, 3, 4, 5, 6]
    assert r["kc"] == [K[k] for k in ("scheduled", "watched", "outcome", "outcome",
                                      "scheduled", "cancelled")]  # fmt: skip
    noop, fail = TASKS.index("noop") + 1, TASKS.index("fail") + 1
    assert (r["period_ms"][0], r["producer"][0], r["task_i"][0]) == (10, 4242, noop)
    assert (r["on_complete_i"][1], r["on_expire_i"][1]) == (fail, noop)
    assert (r["duration_us"][2], r["next_deadline_ms"][2], r["oc"][2]) == (300, 55, OC["error"])
    assert r["oc"][3] == -1 and r["oc"][0] == -1
    assert r["task_i"][4] == 0 and r["task_i"][5] == 0 and r["period_ms"][5] == 0


def test_per_timer_of_events_and_of_none() -> None:
    """The kernel reads events/'s own columns: a bucket with a timer's schedule, fire and
    outcome gives its row; an empty bucket gives an empty table of the output's schema."""
    b = P.Bounds(end_us=10**9, final_epoch=1, grace_us=0, tasks=TASKS)
    assert P.per_timer_of(_events([]), b).schema == P.empty().schema
    events = _events([
        {"id": 9, "epoch": 1, "t_us": 1000, "kind": "scheduled", "deadline_ms": 2,
         "run": 1, "task": "noop", "producer": 77},
        {"id": 9, "epoch": 1, "t_us": 2500, "kind": "fired", "deadline_ms": 2, "run": 1},
        {"id": 9, "epoch": 1, "t_us": 2600, "kind": "outcome", "run": 1, "outcome": "ok",
         "duration_us": 40, "next_deadline_ms": -1},
    ])  # fmt: skip
    row = P.per_timer_of(events, b).to_pylist()[0]
    assert (row["id"], row["type"], row["end"], row["run_task"], row["producer"]) == (
        9, "one-shot", "ran", "noop", 77,
    )  # fmt: skip
    assert (row["runs_fired"], row["outcomes"], row["ok"], row["late_sum_us"]) == (1, 1, 1, 500)
