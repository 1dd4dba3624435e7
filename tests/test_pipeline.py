"""The PySpark pipeline (issue 11): the shmwheel-journal data source and the binaryFile
reader over the one decoder, and the audit job on a journal written by a real service run
and on journals with planted faults (each found exactly, nothing else flagged)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgpack
import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import copy_v2_journal
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from shmwheel import journal as J
from shmwheel.journal import format as F
from shmwheel.journal.write.writer import JournalOptions, SegmentWriter
from shmwheel.pipeline import cli
from shmwheel.pipeline.demo import write_demo_journal
from shmwheel.pipeline.read import decode, events
from shmwheel.pipeline.read.datasource import binaryfile_events
from shmwheel.pipeline.run import job
from shmwheel.pipeline.tables.seconds import COLUMNS as SECONDS_COLUMNS
from shmwheel.pipeline.tables.seconds import Seconds

# every Spark test runs in one xdist worker, which starts one JVM for them all
pytestmark = pytest.mark.xdist_group("spark")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, int]]:
    d = tmp_path_factory.mktemp("demo") / "journal"
    counts = write_demo_journal(str(d), one_shots=600, repeating=3, operations=60)
    return str(d), counts.as_dict()


# -- a synthetic journal, to plant faults in -------------------------------------------------
T0 = 50_000_000_000  # monotonic us at the journal's start
TASKS = ["noop", "fail"]


def _writer(d: Path, role: str, epoch: int = 1) -> SegmentWriter:
    return SegmentWriter(JournalOptions(str(d), "none", epoch=epoch), role, "svc-test", TASKS, 1)


def synthetic(d: Path, faults: bool) -> dict[str, object]:
    """Ten clean one-shots (ids 1..10, one of them failing), a cancelled one (20), a
    repeating timer with three runs then a cancel (30), a completed and an expired
    operation (40, 41); with `faults`, also: an early fire (50), a run fired twice in one
    epoch (51), a timer that ran and was cancelled (52), one with no outcome (53), a fire
    without a schedule (54), a flipped byte in a duplicate record (the CRC reject) and a
    torn tail. Returns where the rejects are."""
    d.mkdir(parents=True, exist_ok=True)
    co, re = _writer(d, "coordinator"), _writer(d, "reaper")
    t = T0

    def sched(i: int, deadline_ms: int, task: int = 0, period: int = 0, run: int = 1) -> None:
        flags = F.FLAG_REPEAT if period else 0
        co.append(F.body(F.SCHEDULED, i, t, deadline_ms, task, 4242, flags, period, run, b"\xc0"))

    def fire(i: int, at_us: int, run: int, deadline_ms: int, outcome: int = 1, nxt: int = -1):
        re.append(F.body(F.FIRED, i, at_us, run, deadline_ms))
        re.append(F.body(F.OUTCOME, i, at_us + 300, run, outcome, 250, nxt))

    for i in range(1, 11):
        dl = T0 // 1000 + 10 * i
        sched(i, dl, task=1 if i == 7 else 0)
        fire(i, dl * 1000 + 400, 1, dl, outcome=2 if i == 7 else 1)
    sched(20, T0 // 1000 + 900)
    co.append(F.body(F.CANCELLED, 20, T0 + 1000))
    base = T0 // 1000 + 50
    sched(30, base, period=20)
    for run in (1, 2, 3):
        dl = base + 20 * (run - 1)
        fire(30, dl * 1000 + 200, run, dl, nxt=dl + 20)
    co.append(F.body(F.CANCELLED, 30, (base + 45) * 1000))
    for i, decided in ((40, F.COMPLETED), (41, F.EXPIRED)):
        dl = T0 // 1000 + 100
        blob = msgpack.packb([["k"], None])
        co.append(F.body(F.WATCHED, i, T0, dl, 1, 1, 0, 0, blob))
        at = T0 + 5000 if decided == F.COMPLETED else dl * 1000 + 100
        re.append(F.body(decided, i, at))
        re.append(F.body(F.OUTCOME, i, at + 100, 1, 1, 50, -1))
    crc_at = torn_at = None
    if faults:
        dl = T0 // 1000 + 200
        sched(50, dl)
        fire(50, dl * 1000 - 700, 1, dl)  # early
        sched(51, dl)
        fire(51, dl * 1000 + 100, 1, dl)
        fire(51, dl * 1000 + 900, 1, dl)  # the same run again, same epoch
        sched(52, dl)
        fire(52, dl * 1000 + 100, 1, dl)
        co.append(F.body(F.CANCELLED, 52, dl * 1000))  # and cancelled
        sched(53, T0 // 1000 + 300)  # never decided, long before the end
        fire(54, dl * 1000 + 100, 1, dl)  # never scheduled
        co.flush()
        crc_at = os.path.getsize(co.path)
        sched(1, T0 // 1000 + 10)  # a duplicate of id 1's schedule: its loss changes nothing
    # the journal's end: a record long after every deadline
    re.append(F.body(F.FIRED, 60, T0 + 60_000_000, 1, T0 // 1000 + 59_999))
    re.append(F.body(F.OUTCOME, 60, T0 + 60_000_300, 1, 1, 10, -1))
    sched(60, T0 // 1000 + 59_999)
    for w in (co, re):
        w.flush()
        w.close()
    if faults:
        data = bytearray(Path(co.path).read_bytes())
        data[crc_at + F.FRAME_BYTES + 3] ^= 0xFF  # inside the duplicate's body
        Path(co.path).write_bytes(bytes(data))
        raw = Path(re.path).read_bytes()
        Path(re.path).write_bytes(raw[:-7])
        torn_at = _last_frame(raw)
    return {"crc": (co.path, crc_at), "torn": (re.path, torn_at)}


def _last_frame(data: bytes) -> int:
    at, last = len(F.MAGIC), 0
    while at < len(data):
        last = at
        at += F.FRAME_BYTES + int.from_bytes(data[at : at + 4], "little")
    return last


FAULTS = {
    ("early", 50),
    ("ran twice", 51),
    ("two outcomes", 52),
    ("no outcome", 53),
    ("fired without a schedule", 54),
}


def _audit(spark: SparkSession, journal: str, out: Path, **kw: object) -> dict:
    return job.run(spark, journal, str(out), **kw)


def _violations(out: Path) -> set[tuple[str, int]]:
    t = pq.read_table(out / "violations").to_pylist()
    return {(r["rule"], r["id"]) for r in t}


# -- the data source ---------------------------------------------------------------------------
def test_datasource_schema_and_contents_match_the_decoder(spark, tmp_path):
    synthetic(tmp_path / "j", faults=False)
    df = spark.read.format("shmwheel-journal").load(str(tmp_path / "j"))
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        (c[0], c[2]) for c in events.COLUMNS
    ]
    want = []
    for seg in J.read(tmp_path / "j"):
        for off, rec in zip(seg.rows[:, 0].tolist(), seg.records, strict=True):
            d = F.as_dict(rec)
            want.append((seg.path, off, d["kind"], d["id"], d["t_us"], d.get("run")))
    got = df.select("file", "offset", "kind", "id", "t_us", "run").collect()
    assert sorted(tuple(r) for r in got) == sorted(want)
    # the task names come from the header; rows of other kinds have nulls
    tasks = {r["id"]: r["task"] for r in df.filter("kind = 'scheduled'").collect()}
    assert tasks[7] == "fail" and tasks[1] == "noop"
    assert df.filter("kind = 'fired'").select("task").distinct().collect()[0]["task"] is None


def test_binaryfile_reader_gives_the_same_rows(spark, tmp_path):
    synthetic(tmp_path / "j", faults=True)
    cols = ("file", "offset", "kind", "id", "t_us", "run", "deadline_ms", "outcome", "reason")
    a = job.read_journal(spark, str(tmp_path / "j"), "datasource", cols)
    b = binaryfile_events(spark, str(tmp_path / "j"), cols)
    assertDataFrameEqual(a, b)  # row order aside


def test_schema_is_the_projection_and_partitions_follow_segments(spark, tmp_path):
    synthetic(tmp_path / "j", faults=False)
    segments = len(J.segment_files(tmp_path / "j"))
    df = (
        spark.read.format("shmwheel-journal")
        .schema("id bigint, kind string")
        .load(str(tmp_path / "j"))
    )
    assert df.columns == ["id", "kind"]
    assert df.rdd.getNumPartitions() == segments  # one partition per segment
    assert df.count() == sum(len(s.rows) for s in J.read(tmp_path / "j"))
    # the option columns is the same projection as .schema()
    by_option = spark.read.format("shmwheel-journal").option("columns", "kind, id")
    assert by_option.load(str(tmp_path / "j")).columns == ["kind", "id"]
    grouped = spark.read.format("shmwheel-journal").option("partitionBytes", str(1 << 30))
    assert grouped.load(str(tmp_path / "j")).rdd.getNumPartitions() == 1  # small ones grouped
    with pytest.raises(Exception, match="unknown journal column"):
        spark.read.format("shmwheel-journal").schema("nope int").load(str(tmp_path)).count()
    with pytest.raises(Exception, match="a read writes nothing"):
        spark.read.format("shmwheel-journal").option("writeTo", str(tmp_path / "x")).load(
            str(tmp_path / "j")
        ).count()
    assert not (tmp_path / "x").exists()


def test_both_readers_write_the_same_bucketed_events(spark, tmp_path):
    """The decoding job (decode.write_events), with the segments opened by path or handed
    over by binaryFile: each segment's events, rejects included, written by its task as
    one Parquet file with a row group per bucket; the job's table is a row per segment;
    both write the rows the data source returns."""
    synthetic(tmp_path / "j", faults=True)
    j = str(tmp_path / "j")
    segs = list(J.read(j))
    cols = ("file", "offset", "kind", "id", "t_us", "run", "deadline_ms", "outcome", "reason")
    ds_dir, bf_dir = str(tmp_path / "ds"), str(tmp_path / "bf")
    written = decode.write_events(spark, j, ds_dir, 3, "datasource", cols).collect()
    assert sorted((r["file"], r["records"], r["rejects"]) for r in written) == sorted(
        (s.path, len(s.rows), len(s.rejects)) for s in segs
    )
    bf_written = decode.write_events(spark, j, bf_dir, 3, "binaryfile", cols).collect()
    # each task's per-second figures, added up, are the figures of the whole table (the
    # columns they need counted though not written), the same through either entry point
    figures = [
        Seconds.merge(Seconds.from_bytes(r["seconds"]) for r in rows)
        for rows in (written, bf_written)
    ]
    whole = Seconds.of_events(job.read_journal(spark, j, "datasource", SECONDS_COLUMNS).toArrow())
    for got in figures:
        assert all(
            np.array_equal(getattr(got, f), getattr(whole, f))
            for f in ("second", "counts", "late_max", "hist_second", "hist_code", "hist_n")
        )
        assert (got.kinds(), got.overall(), got.tasks) == (
            whole.kinds(),
            whole.overall(),
            whole.tasks,
        )
        assert got.kinds()["reject"] == 2 and got.kinds()["fired"] > 0
    names = sorted(os.path.basename(s.path) + ".parquet" for s in segs)
    assert sorted(os.listdir(ds_dir)) == names == sorted(os.listdir(bf_dir))
    for name in names:
        assert pq.ParquetFile(os.path.join(ds_dir, name)).num_row_groups == 3
    returned = job.read_journal(spark, j, "datasource", cols)
    assertDataFrameEqual(spark.read.parquet(ds_dir), returned)
    assertDataFrameEqual(
        spark.read.parquet(bf_dir).drop("file"), returned.drop("file")
    )  # binaryFile names files by URI
    with pytest.raises(ValueError, match="must include id"):
        decode.write_events(spark, j, ds_dir, 3, "datasource", ("kind",))


def test_both_readers_read_version_2_and_version_3_journals(spark, tmp_path):
    """A version 2 journal (tests/fixtures/journal-v2, CRC-32 frames) and a version 3 one
    (CRC-32C): the data source and the binaryFile reader give the decoder's rows for each,
    and a byte flipped in one record of each is that record's reject, named by its
    version's checksum."""
    copy_v2_journal(tmp_path / "v2")
    synthetic(tmp_path / "v3", faults=False)
    cols = ("file", "offset", "kind", "id", "t_us", "run", "reason")
    for d, version, crc in (
        (tmp_path / "v2", 2, "bad CRC-32"),
        (tmp_path / "v3", 3, "bad CRC-32C"),
    ):
        segs = list(J.read(d))
        assert {s.data[7] for s in segs} == {version} and not any(s.rejects for s in segs)
        path, at = segs[0].path, int(segs[0].rows[2, 0])
        data = bytearray(Path(path).read_bytes())
        data[at + F.FRAME_BYTES + 1] ^= 0x10
        Path(path).write_bytes(bytes(data))
        want = sorted(
            (s.path, off, F.as_dict(rec)["kind"], F.as_dict(rec)["id"])
            for s in J.read(d)
            for off, rec in zip(s.rows[:, 0].tolist(), s.records, strict=True)
            if off != at or s.path != path
        )
        a = job.read_journal(spark, str(d), "datasource", cols)
        assertDataFrameEqual(a, binaryfile_events(spark, str(d), cols))
        rows = a.collect()
        got = sorted(
            (r["file"], r["offset"], r["kind"], r["id"]) for r in rows if r["kind"] != "reject"
        )
        assert got == want and len(want) > 20
        rejects = [(r["file"], r["offset"], r["reason"]) for r in rows if r["kind"] == "reject"]
        assert rejects == [(path, at, crc)], rejects


# -- the audit ------------------------------------------------------------------------------
def test_audit_of_a_real_service_run_is_clean_and_counts_what_was_scheduled(spark, demo, tmp_path):
    journal, n = demo
    s = _audit(spark, journal, tmp_path / "out")
    assert s["clean"], (s["violations_by_rule"], s["reject_sample"])
    assert s["records"] == n["records"]
    one, ops, rep = s["timers"]["one-shot"], s["timers"]["operation"], s["timers"]["repeating"]
    assert one["n"] == n["one_shots"]
    assert one["cancelled"] == n["cancelled"]
    assert one["ran"] == n["one_shots"] - n["cancelled"]
    assert ops["n"] == n["operations"]
    assert (ops["completed"], ops["expired"]) == (n["completed"], n["expired"])
    assert rep["n"] == n["repeating"] and rep["runs"] >= n["repeating_runs"] > 0
    tasks = {t["task"]: t for t in s["per_task"]}
    assert tasks["fail"]["error"] == n["failing"] and tasks["fail"]["error_rate"] == 1.0
    assert [t["task"] for t in s["task_failures"]] == ["fail"]  # named beside the verdict
    assert tasks["noop"]["error"] == 0
    assert s["lateness_ms"]["fires"] > 0 and s["lateness_ms"]["min_ms"] >= 0
    for table in job.TABLES:
        assert (tmp_path / "out" / table).is_dir(), table
    rep_dir = tmp_path / "out" / "report"
    assert json.loads((rep_dir / "summary.json").read_text())["clean"] is True
    index = (rep_dir / "index.md").read_text()
    assert index.startswith("# Journal audit: CLEAN, with task failures")
    assert f"`fail` 100.0 % of {n['failing']:,} runs" in index
    for png in ("lateness.png", "lateness_cdf.png", "throughput.png"):
        assert (rep_dir / png).stat().st_size > 1000 and f"]({png})" in index
    producers = pq.read_table(tmp_path / "out" / "per_producer").to_pylist()
    assert sum(p["timers"] for p in producers) == n["one_shots"] + n["repeating"]
    # timers/: one row per timer and operation, written by the per-timer tasks
    timers = pq.read_table(tmp_path / "out" / "timers").to_pylist()
    assert len(timers) == len({t["id"] for t in timers})
    assert len(timers) == n["one_shots"] + n["repeating"] + n["operations"]
    assert (
        sum(t["type"] == "operation" and t["end"] == "completed" for t in timers) == n["completed"]
    )


def test_audit_finds_exactly_the_planted_faults(spark, tmp_path):
    where = synthetic(tmp_path / "j", faults=True)
    s = _audit(spark, str(tmp_path / "j"), tmp_path / "out")
    assert _violations(tmp_path / "out") == FAULTS
    assert not s["clean"] and s["violations"] == len(FAULTS)
    # ids in hex, as the rest of shmwheel prints them
    details = {v["id"]: v["detail"] for v in s["violation_sample"]}
    assert details[50].startswith("one-shot 0x32: 1 runs fired before their deadline")
    assert details[54].startswith("id 0x36: 1 runs fired")
    rejects = pq.read_table(tmp_path / "out" / "rejects").to_pylist()
    got = {(r["file"], r["offset"], r["reason"].split(":")[0]) for r in rejects}
    assert got == {
        (where["crc"][0], where["crc"][1], "bad CRC-32C"),
        (where["torn"][0], where["torn"][1], "torn"),
    }
    # the clean version of the same journal: nothing
    synthetic(tmp_path / "clean", faults=False)
    s = _audit(spark, str(tmp_path / "clean"), tmp_path / "out2")
    assert s["clean"], s["violation_sample"]
    t = s["timers"]
    assert t["one-shot"]["n"] == 12 and t["one-shot"]["cancelled"] == 1
    assert t["repeating"]["runs"] == 3 and t["repeating"]["cancelled"] == 1
    assert (t["operation"]["completed"], t["operation"]["expired"]) == (1, 1)


def test_a_run_repeated_after_a_crash_is_inside_the_window_unless_it_had_an_outcome(
    spark, tmp_path
):
    d = tmp_path / "j"
    d.mkdir()
    for epoch in (1, 2):
        co, re = _writer(d, "coordinator", epoch), _writer(d, "reaper", epoch)
        for i, dl in ((1, 1000), (2, 1000)):
            co.append(F.body(F.SCHEDULED, i, 500_000, dl, 0, 1, 256 * (epoch - 1), 0, 1, b"\xc0"))
            re.append(F.body(F.FIRED, i, dl * 1000 + epoch, 1, dl))
        # epoch 1 was killed before id 1's outcome: its re-run is inside the window; id 2
        # had its outcome recorded, so its second run is a violation
        if epoch == 2:
            re.append(F.body(F.OUTCOME, 1, 2_000_000, 1, 1, 5, -1))
        re.append(F.body(F.OUTCOME, 2, 2_000_000 + epoch, 1, 1, 5, -1))
        for w in (co, re):
            w.flush()
            w.close()
    s = _audit(spark, str(d), tmp_path / "out", grace_ms=1)
    assert _violations(tmp_path / "out") == {("ran twice", 2)}
    assert s["timers"]["one-shot"]["repeats_in_window"] == 1


def test_embedded_python_workers_run_numpy_without_huge_pages(spark):
    """The embedded session's Python workers start with NUMPY_MADVISE_HUGEPAGE=0
    (session.HUGEPAGE_ENV: huge pages made decoding 1.4x slower here)."""

    def hugepages(batches):  # type: ignore[no-untyped-def]
        import os

        import pyarrow as pa
        from numpy._core import multiarray

        for _ in batches:
            on = multiarray._get_madvise_hugepage()
            env = os.environ.get("NUMPY_MADVISE_HUGEPAGE", "unset")
            yield pa.RecordBatch.from_pydict({"v": [f"{env} {on}"]})

    got = spark.range(0, 2, 1, 2).mapInArrow(hugepages, "v string").collect()
    assert {r["v"] for r in got} == {"0 False"}


# -- the command line ----------------------------------------------------------------------
def test_cli_exit_codes(spark, tmp_path, capsys):
    synthetic(tmp_path / "bad", faults=True)
    synthetic(tmp_path / "good", faults=False)
    assert cli.main(["audit", str(tmp_path / "good"), str(tmp_path / "o1")]) == 0
    assert "clean" in capsys.readouterr().out
    assert cli.main(["audit", str(tmp_path / "bad"), str(tmp_path / "o2")]) == 1
    out = capsys.readouterr()
    assert "VIOLATION early: 1" in out.out and "REJECT" in out.out
    assert "[timers]" in out.err  # a progress line per stage
    assert cli.main(["audit", str(tmp_path / "missing"), str(tmp_path / "o3")]) == 2
    assert "no journal directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["audit", str(tmp_path / "empty"), str(tmp_path / "o4")]) == 2
    assert "holds no journal segments" in capsys.readouterr().err
    for bad in (["audit"], ["audit", "a", "b", "--shuffle-partitions", "0"], ["nope"]):
        with pytest.raises(SystemExit) as e:
            cli.main(bad)
        assert e.value.code == 2
    assert spark.range(3).count() == 3  # the CLI left the session it found running
