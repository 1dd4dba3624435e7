"""What `python -m shmwheel.bench` prints, checked without running a workload: the report
fed the recorded default run's figures (bench/results/bench-default.json) and figures at
the extremes. Every line fits 100 columns; the tables print every figure of a workload and
only its figures, with the value the JSON keeps and a comparison that points the right
way; every goal line carries what the goal is for; the summary and the exit status agree.
The printed tables are read back by tests/bench_tables.py (also used on a real --quick run
in tests/test_bench.py)."""

import json
import re
from pathlib import Path

import pytest
from bench_tables import LOWER_IS_BETTER, check_tables, longest_lines

from shmwheel.bench import report as R
from shmwheel.bench.table.registry import workloads
from shmwheel.bench.workload import Goal, Workload

RECORDED = Path(__file__).parent.parent / "bench" / "results" / "bench-default.json"


def _report(selected: list[Workload], quick: bool = False) -> str:
    verdicts = R.goal_verdicts(selected)
    return "\n".join(
        [
            R.wrap(R.HOW_TO_READ),
            R.table(selected),
            R.goals_text(verdicts, quick=quick, busy="load " * 40),
            R.summary(verdicts, False, [])[0],
        ]
    )


def _recorded() -> tuple[list[Workload], dict]:
    doc = json.loads(RECORDED.read_text())
    selected = [
        w
        for w in workloads(
            doc["producers"], doc["scale_levels"], doc["redis"]["ran"], doc["sizes"]["recovery"]
        )
        if w.key in doc["workloads"]
    ]
    for w in selected:
        w.reps = doc["workloads"][w.key]["reps"]
    return selected, doc


def test_the_report_of_the_recorded_run_fits_and_prints_every_figure():
    selected, _ = _recorded()
    assert len(selected) >= 15, "the recorded run no longer matches the registry"
    text = _report(selected)
    assert longest_lines(text) == []
    check_tables(text, selected)
    # the absurd-looking row of issue 23 is explained where it is printed
    w2 = next(w for w in selected if w.key == "svc_cancel")
    block = R.table([w2])
    assert "e+" not in block and "sched cancel" in block
    assert re.search(r"vs sched cancel .* faster \[1\]", block)
    assert "[1] sched.scheduler.cancel" in block and "O(pending)" in block


def _extreme(w: Workload, high: float, low: float) -> dict[str, float]:
    mine = {a for a, _ in w.rows}
    keys = {k for row in w.rows for k in row} | set(w.notes)
    keys |= {Goal(*g).figure for g in w.goals}
    return {k: (high if k in mine else low) for k in sorted(keys)}


@pytest.mark.parametrize("high, low", [(123_456_789_012.0, 0.000123), (0.000123, 98_765_432.1)])
def test_the_report_fits_at_the_extremes(high, low):
    """Every workload of the widest configuration (Redis rows, 10M pending, three producer
    counts), with figures 1e15 apart either way: every line still fits."""
    selected = workloads([1, 2, 64], [10_000, 100_000, 1_000_000, 10_000_000], True, 1_000_000)
    for w in selected:
        w.reps = [_extreme(w, high, low), _extreme(w, high * 1.01, low * 0.99)]
    text = _report(selected, quick=True)
    assert longest_lines(text) == []
    check_tables(text, selected)
    for w in selected:  # alone, as --workloads KEY prints it
        alone = _report([w])
        assert longest_lines(alone) == [], w.key
        check_tables(alone, [w])


def test_a_single_runs_longest_step_is_not_shown_as_a_regression_without_its_note():
    """One run where a machine stall made pre-cascade's longest step the larger (33.9 ms
    against 8.8 ms, as a --quick run on a loaded machine measured): the row says so, and
    the note under it says what the maximum is and that it is not a regression."""
    (w,) = [w for w in workloads() if w.key == "stall"]
    w.reps = [
        {
            "max step: pre-cascade": 33_859.0,
            "max step: cascade at expiry (Kafka)": 8_780.0,
            "p99.9 step: pre-cascade": 169.0,
            "p99.9 step: cascade at expiry (Kafka)": 142.0,
        }
    ]
    block = R.table([w])
    assert re.search(
        r"vs max step: cascade at expiry \(Kafka\) +8,780 us  3\.86x higher \[1\]", block
    )
    note = " ".join(block[block.index("[1] ") :].split())
    assert "one sample per repetition" in note and "not a regression" in note


def test_every_goal_says_what_it_is_for_and_what_a_miss_means():
    configs = [
        workloads(),
        workloads([1, 2, 8], [10_000], True, 20_000),
        workloads([4], None, False, 1_000_000),
    ]
    for selected in configs:
        for w in selected:
            for g in w.goals:
                assert isinstance(g, Goal), (w.key, g)
                assert re.search(r"\bissues? \d+", g.why), (w.key, g.what, "names no issue")
                assert len(g.why) > 40 and len(g.miss) > 20, (w.key, g.what)
            for k in w.explain:  # a note is printed only beside a figure the table shows
                assert k in {x for row in w.rows for x in row} | set(w.notes), (w.key, k)
    selected, _ = _recorded()
    verdicts = R.goal_verdicts(selected)
    assert any(not g["met"] for g in verdicts), "the recorded run has a miss to explain"
    text = R.goals_text(verdicts)
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if re.match(r"^  (met|MISSED|n/a) ", line)]
    assert len(heads) == len(verdicts)
    said = ""
    for i, j, g in zip(heads, heads[1:] + [len(lines)], verdicts, strict=True):
        para = " ".join(" ".join(lines[i:j]).split())
        if g["met"] is None:  # a goal newer than the recorded run: said, not judged
            assert g["goal"] in para and "not measured in this run" in para, para
            continue
        assert g["goal"] in para and ("MISSED" in lines[i]) is not g["met"], para
        why = "as above" if g["why"] == said else g["why"]
        assert f"for: {why}" in para, para
        said = g["why"]
        assert (f"a miss: {g['miss']}" in para) is not g["met"], para
    assert longest_lines(text) == []


def test_a_goal_whose_figure_the_run_lacks_is_not_judged():
    w = Workload("x", "t", lambda n: {}, "core", [], goals=[("g", "f", ">=", 1.0)])
    w.reps = [{"other": 1.0}]
    verdicts = R.goal_verdicts([w])
    assert verdicts[0]["met"] is None
    assert "not measured in this run" in R.goals_text(verdicts)
    text, status = R.summary(verdicts, strict=True, leaked=[])
    assert status == 0 and text == "Summary: 0 of 1 goals met; 1 not measured in this run."


def test_a_goal_without_its_reason_is_shown_as_such():
    w = Workload("x", "t", lambda n: {}, "core", [], goals=[("g", "f", ">=", 1.0)])
    w.reps = [{"f": 0.5}]
    text = R.goals_text(R.goal_verdicts([w]))
    assert "for: (not stated in the registry)" in text and "MISSED" in text


def test_the_summary_and_exit_status_tell_the_truth_about_misses():
    selected, _ = _recorded()
    verdicts = R.goal_verdicts(selected)
    missed = [g for g in verdicts if g["met"] is False]
    text, status = R.summary(verdicts, strict=False, leaked=[])
    assert status == 0 and f"{len(missed)} of {len(verdicts)} goals MISSED" in text
    assert all(g["goal"] in " ".join(text.split()) for g in missed)
    assert "--strict" in text
    text, status = R.summary(verdicts, strict=True, leaked=[])
    assert status == R.STRICT_STATUS == 3 and "Exit status 3" in " ".join(text.split())
    text, status = R.summary(verdicts, strict=True, leaked=["s1"])
    assert status == 1 and "s1" in text
    met = [dict(g, met=True) for g in verdicts]
    text, status = R.summary(met, strict=True, leaked=[])
    assert status == 0 and text == f"Summary: all {len(met)} goals met."


def test_comparisons_keep_every_row_with_its_direction():
    selected, _ = _recorded()
    for w in selected:
        rows = R.comparisons(w)
        assert [(c["shmwheel"], c["baseline"]) for c in rows] == list(w.rows)
        for c in rows:
            lower = w.unit in LOWER_IS_BETTER
            a, b = c["shmwheel_value"], c["baseline_value"]
            assert c["advantage"] == pytest.approx(b / a if lower else a / b)
            assert c["reads"] == R.reads(c["advantage"], w.unit)
