"""The audit's report (issue 24): the verdict names failing tasks and their error rates, a
second with no record breaks a plotted line instead of bridging it, every plot is drawn
(each service's too). No Spark: the report is drawn from the summary and small tables."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from shmwheel.pipeline.run import report

T0 = pd.Timestamp("2026-01-01 00:00:00", tz="UTC")


def _seconds(offsets: list[int], **cols: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"window": [T0 + pd.Timedelta(seconds=s) for s in offsets], **cols})


def test_a_missing_second_breaks_the_line():
    df = _seconds([0, 1, 2, 10, 11, 30], v=[1.0, 2, 3, 4, 5, 6])
    g = report.gapped(df)
    assert len(g) == len(df) + 2  # after second 2 and after second 11
    t = list(g["window"])
    assert t == sorted(t)
    holes = g[g["v"].isna()]["window"].tolist()
    assert holes == [T0 + pd.Timedelta(seconds=3), T0 + pd.Timedelta(seconds=12)]
    assert len(report.gapped(_seconds([0, 1, 2], v=[1.0, 2, 3]))) == 3  # no gap: unchanged
    assert len(report.gapped(_seconds([5], v=[1.0]))) == 1


SUMMARY = {
    "journal": "/j", "journals": ["/j"], "reader": "datasource", "records": 100,
    "records_by_kind": {"scheduled": 50, "fired": 50}, "rejects": 0, "reject_sample": [],
    "gaps": [], "gap_warnings": [], "epochs": 2, "span_s": 12.0, "grace_ms": 10_000,
    "timers": {"one-shot": {"n": 50, "ran": 50, "cancelled": 0, "completed": 0, "expired": 0,
                            "pending": 0, "runs": 50, "repeats_in_window": 0, "in_flight": 0}},
    "violations": 0, "violations_by_rule": {}, "violation_sample": [],
    "lateness_ms": {"fires": 50, "p50_ms": 0.0, "p90_ms": 0.002, "p99_ms": 0.5,
                    "p999_ms": 3.0, "max_ms": 9.0, "min_ms": 0.0},
    "operations": {"operations": 0, "completed": 0, "expired": 0, "cancelled": 0, "pending": 0,
                   "time_to_complete_ms": {}},
    "per_task": [
        {"task": "fail", "runs": 20, "ok": 0, "error": 20, "crashed": 0, "error_rate": 1.0,
         "crash_rate": 0.0, "mean_duration_ms": 0.1, "max_duration_ms": 0.2},
        {"task": "noop", "runs": 30, "ok": 30, "error": 0, "crashed": 0, "error_rate": 0.0,
         "crash_rate": 0.0, "mean_duration_ms": 0.1, "max_duration_ms": 0.2},
    ],
    "task_failures": [{"task": "fail", "runs": 20, "error": 20, "crashed": 0, "error_rate": 1.0,
                       "crash_rate": 0.0}],
    "services": [
        {"service": svc, "hosts": ["b"], "segments": 2, "epochs": 2, "records": 50,
         "epoch_starts_us": {"1": int(T0.value // 1000), "2": int(T0.value // 1000) + 8_000_000},
         "rejects": 0, "gaps": [], "timers": {}, "lateness_ms": {"p99_ms": 0.5, "max_ms": 9.0},
         "task_failures": [], "violations": 0, "violations_by_rule": {}}
        for svc in ("a", "b")
    ],
    "clean": True,
}  # fmt: skip


def test_a_clean_verdict_names_the_failing_tasks():
    head, lines = report.verdict(SUMMARY)
    assert head == "CLEAN, with task failures"
    assert "`fail` 100.0 % of 20 runs (20 raised, 0 crashed)" in lines[1]
    quiet = copy.deepcopy(SUMMARY)
    quiet["task_failures"] = []
    assert report.verdict(quiet) == ("CLEAN", lines[:1])
    bad = copy.deepcopy(SUMMARY)
    bad.update(clean=False, violations=3)
    assert report.verdict(bad)[0] == "VIOLATIONS OR REJECTS FOUND"
    md = report.index_md(SUMMARY, [])
    assert md.startswith("# Journal audit: CLEAN, with task failures\n")
    assert "| fail | 20 | 0 | 20 | 0 | 100.0 % | 0.0 % |" in md


@pytest.mark.parametrize("services", [1, 2])
def test_every_plot_is_drawn(tmp_path, services):
    s = copy.deepcopy(SUMMARY)
    s["services"] = s["services"][:services]
    secs = [0, 1, 2, 3, 8, 9, 10]
    lat = _seconds(secs, fired=[5] * 7, p50_ms=[0.0] * 7, p90_ms=[0.001] * 7,
                   p99_ms=[0.5] * 7, p999_ms=[2.0] * 7, max_ms=[9.0] * 7)  # fmt: skip
    thr = _seconds(secs, **{c: [10] * 7 for c in ("scheduled", "fired", "outcome", "cancelled",
                                                  "watched", "completed", "expired",
                                                  "task_failures")})  # fmt: skip
    small = {"lateness": lat, "throughput": thr}
    if services > 1:
        small["services"] = {v["service"]: (thr, lat) for v in s["services"]}
    qs, vs = np.linspace(0.01, 0.999, 30), np.geomspace(1e-3, 5, 30)
    cdf = [[q, v] for q, v in zip(qs, vs, strict=True)]
    report.write_report(str(tmp_path), s, small, cdf)
    drawn = {p.name for p in (tmp_path / "report").glob("*.png")}
    want = {"lateness.png", "lateness_cdf.png", "throughput.png"}
    assert drawn == (want | {"services.png"} if services > 1 else want)
    md = (tmp_path / "report" / "index.md").read_text()
    for png in drawn:
        assert (tmp_path / "report" / png).stat().st_size > 10_000
        assert f"]({png})" in md
