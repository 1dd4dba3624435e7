"""The audit across a fleet (issue 24): several journals in one audit, timers keyed by
(service, id), each service's segment chains checked with the journal's own rules, and
the exit codes (docs/pipeline.md, "Several journals")."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pyarrow.parquet as pq
import pytest

from shmwheel import journal as J
from shmwheel.journal import format as F
from shmwheel.pipeline import cli
from shmwheel.pipeline.demo import write_demo_journal
from shmwheel.pipeline.read import fleet
from shmwheel.pipeline.run import job

# every Spark test runs in one xdist worker, which starts one JVM for them all
pytestmark = pytest.mark.xdist_group("spark")

SEGMENT_BYTES = 1 << 16  # the least: a few thousand records make chains of 3+ segments


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, dict[str, int]]]:
    """Two real services' journals (their ids overlap), by service name."""
    root = tmp_path_factory.mktemp("fleet")
    out = {}
    for k, seed in (("svc-a", 1), ("svc-b", 2)):
        d = root / k / "journal"
        n = write_demo_journal(
            str(d), one_shots=5000, repeating=2, operations=20, seed=seed,
            segment_bytes=SEGMENT_BYTES,
        )  # fmt: skip
        out[_service(str(d))] = (str(d), n.as_dict())
    return out


def _service(d: str) -> str:
    return next(iter(fleet.services(fleet.local_reports([d]))))


def _ids(d: str) -> set[int]:
    return {r["id"] for r in J.records(d) if r["kind"] == "scheduled"}


def _check_counts(s: dict, two: dict) -> None:
    got = {v["service"]: v for v in s["services"]}
    assert set(got) == set(two)
    for name, (_, n) in two.items():
        v = got[name]
        t = v["timers"]
        assert v["records"] == n["records"]
        assert t["one-shot"]["n"] == n["one_shots"]
        assert t["one-shot"]["cancelled"] == n["cancelled"]
        assert t["repeating"]["n"] == n["repeating"]
        assert t["operation"]["n"] == n["operations"]
        assert (t["operation"]["completed"], t["operation"]["expired"]) == (
            n["completed"],
            n["expired"],
        )
        assert v["violations"] == 0 and v["rejects"] == 0 and v["gaps"] == []
    assert s["timers"]["one-shot"]["n"] == sum(n["one_shots"] for _, n in two.values())


def test_two_services_together_and_copied_into_one_directory_are_clean(
    spark, two, tmp_path, capsys
):
    (a, _), (b, _) = two.values()
    assert len(_ids(a) & _ids(b)) > 1000  # the same ids in both: keyed by id alone, they collide
    # several journals (a glob), through the command line
    out = tmp_path / "together"
    pattern = os.path.join(os.path.dirname(os.path.dirname(a)), "svc-*", "journal")
    assert cli.main(["audit", pattern, str(out)]) == 0, capsys.readouterr()
    s = json.loads((out / "report" / "summary.json").read_text())
    assert s["clean"] and sorted(s["journals"]) == sorted([a, b])
    _check_counts(s, two)
    assert "## Services" in (out / "report" / "index.md").read_text()
    timers = pq.read_table(out / "timers").to_pylist()
    keys = {(t["service"], t["id"]) for t in timers}
    assert len(keys) == len(timers) > len({t["id"] for t in timers})
    events = pq.read_table(out / "events", columns=["service", "boot_id"]).to_pylist()
    assert {e["service"] for e in events} == set(two)
    assert {e["boot_id"] for e in events} == {F.boot_id()}
    # both services' segments copied into one directory
    one = tmp_path / "one"
    one.mkdir()
    for d in (a, b):
        for p in J.segment_files(d):
            shutil.copy2(p, one)
    s = job.run(spark, str(one), str(tmp_path / "copied"))
    assert s["clean"], (s["violations_by_rule"], s["reject_sample"])
    _check_counts(s, two)


def _longest_chain(d: str) -> list[str]:
    """The segments of the writer with the most (a batch may run past the segment size,
    so how many each writer has depends on the machine's load)."""
    by_role: dict[str, list[str]] = {}
    for p in J.segment_files(d):
        by_role.setdefault(F.SegmentName.parse(os.path.basename(p)).role, []).append(p)
    return max(by_role.values(), key=len)


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_missing_segment_is_a_reject_naming_the_gap(spark, two, tmp_path, capsys, which):
    src, _ = next(iter(two.values()))
    d = tmp_path / "journal"
    shutil.copytree(src, d)
    chain = _longest_chain(str(d))
    assert len(chain) >= 3, chain
    gone = chain[{"first": 0, "middle": len(chain) // 2, "last": -1}[which]]
    os.unlink(gone)
    assert cli.main(["audit", str(d), str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert f"segment {os.path.basename(gone)} is missing" in out, out
    assert "NOT clean" in out


@pytest.mark.parametrize("role", ["coordinator", "reaper"])
def test_each_removal_is_a_gap_of_its_service_only(two, tmp_path, role):
    """The completeness check alone (no Spark): every single removal of a segment of one
    service, with the other service's segments in the same directory, is a gap of that
    service, naming the missing file."""
    (a, _), (b, _) = two.values()
    name_a = _service(a)
    chain = [p for p in J.segment_files(a) if F.SegmentName.parse(os.path.basename(p)).role == role]
    assert len(chain) >= 2 or role == "coordinator"
    for gone in chain:
        d = tmp_path / f"{role}-{os.path.basename(gone)}"
        d.mkdir()
        for p in J.segment_files(a) + J.segment_files(b):
            if p != gone:
                shutil.copy2(p, d)
        gaps, _ = fleet.completeness(fleet.services(fleet.local_reports([str(d)])))
        assert gaps and {g.service for g in gaps} == {name_a}
        named = os.path.basename(gone) in " ".join(g.what for g in gaps)
        assert named or (len(chain) == 1 and "no " + role in gaps[0].what), gaps


def test_exit_codes_for_bad_input_and_a_failed_job(spark, two, tmp_path, capsys, monkeypatch):
    (a, _), _ = two.values()
    # 2: no such directory, a directory without segments, a glob that matches nothing,
    # the same journal under two names
    assert cli.main(["audit", a, str(tmp_path / "missing"), str(tmp_path / "o")]) == 2
    assert "no journal directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["audit", str(tmp_path / "empty"), str(tmp_path / "o")]) == 2
    assert "holds no journal segments" in capsys.readouterr().err
    assert cli.main(["audit", str(tmp_path / "nope-*"), str(tmp_path / "o")]) == 2
    assert "matches" in capsys.readouterr().err
    shutil.copytree(a, tmp_path / "copy")
    assert cli.main(["audit", a, str(tmp_path / "copy"), str(tmp_path / "o")]) == 2
    assert "given twice" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["shmwheel-audit", str(tmp_path / "missing"), "o"])
    assert cli.script() == 2  # the console script is the same command
    capsys.readouterr()

    # 3: the job itself failed; the cause is the last line of stderr
    def boom(*args: object, **kw: object) -> dict:
        raise RuntimeError("executor lost: planted")

    monkeypatch.setattr(job, "run", boom)
    assert cli.main(["audit", a, str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: the audit job failed: RuntimeError: executor lost: planted"
    assert spark.range(3).count() == 3  # the session it found is left running
