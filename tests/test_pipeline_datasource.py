"""The shmwheel-journal data source as a Spark citizen (issue 24): filters pushed into it
(rows exactly as SQL selects them; whole segments skipped only where their headers prove
no row can match), the read schema as the projection, one partition per segment, paths,
globs and file:// URIs, registration without user code, and what Spark 4.3 does with a
pushed-down read (docs/pipeline.md, "The data source")."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from shmwheel import journal as J
from shmwheel.pipeline.demo import write_demo_journal
from shmwheel.pipeline.read import datasource as D
from shmwheel.pipeline.read import events as E
from shmwheel.pipeline.read import filters as FL

# every Spark test runs in one xdist worker, which starts one JVM for them all
pytestmark = pytest.mark.xdist_group("spark")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def chained(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real journal of two epochs, each writer's chain of many small segments."""
    d = tmp_path_factory.mktemp("chained") / "journal"
    write_demo_journal(str(d), one_shots=3000, repeating=2, operations=40, spread_ms=600.0,
                       segment_bytes=1 << 16, epochs=2, pause_s=0.3)  # fmt: skip
    return str(d)


# -- the filters, without Spark -------------------------------------------------------------
def _sql(op: str, v: object, x: object) -> bool | None:
    """SQL's three-valued result of `v op x` for one value."""
    if op == "eqns":
        return v == x if v is not None and x is not None else v is None and x is None
    if v is None:
        return None
    a: Any = v
    fn: dict[str, Callable[[], bool]] = {
        "eq": lambda: a == x, "gt": lambda: a > x, "ge": lambda: a >= x, "lt": lambda: a < x,
        "le": lambda: a <= x, "in": lambda: a in x,  # type: ignore[operator]
        "starts": lambda: str(a).startswith(str(x)), "ends": lambda: str(a).endswith(str(x)),
        "contains": lambda: str(x) in str(a),
    }  # fmt: skip
    return fn[op]()


def test_filters_select_the_rows_sql_selects():
    ids = [None, -3, 0, 7, 42]
    kinds = [None, "fired", "outcome", "firedx", "reject"]
    table = pa.table({"id": pa.array([i for i, _ in itertools.product(ids, kinds)], pa.int64()),
                      "kind": pa.array([k for _, k in itertools.product(ids, kinds)])})  # fmt: skip
    rows = table.to_pylist()
    cases: list[FL.Pred] = []
    for op in ("eq", "eqns", "gt", "ge", "lt", "le"):
        cases += [(op, "id", 0), (op, "id", 7)]
    cases += [("eqns", "id", None), ("in", "id", (0, 42)), ("in", "kind", ("fired", "reject"))]
    cases += [("starts", "kind", "fire"), ("ends", "kind", "ed"), ("contains", "kind", "ire")]
    cases += [("null", "kind", None), ("notnull", "id", None)]
    for p in list(cases):
        cases.append(("not", p))
    for p in cases:
        got = FL.mask(table, [p]).tolist()

        def truth(r: dict, p: FL.Pred = p) -> bool | None:
            if p[0] == "not":
                inner = truth(r, p[1])
                return None if inner is None else not inner
            op, c, v = p
            if op in ("null", "notnull"):
                return (r[c] is None) == (op == "null")
            return _sql(op, r[c], v)

        assert got == [truth(r) is True for r in rows], p
    both = [("ge", "id", 0), ("eq", "kind", "fired")]
    assert FL.mask(table, both).tolist() == [
        r["id"] is not None and r["id"] >= 0 and r["kind"] == "fired" for r in rows
    ]


def test_which_filters_are_taken():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, Not, StringContains

    taken, left = FL.accept([
        EqualTo(("service",), "a"), In(("epoch",), (1, 2)), Not(EqualTo(("kind",), "fired")),
        GreaterThan(("t_us",), 5), EqualTo(("nope",), 1), EqualTo(("a", "b"), 1),
        EqualTo(("epoch",), "1"), StringContains(("id",), "1"), GreaterThan(("id",), True),
    ])  # fmt: skip
    assert taken == [("eq", "service", "a"), ("in", "epoch", (1, 2)),
                     ("not", ("eq", "kind", "fired")), ("gt", "t_us", 5)]  # fmt: skip
    assert len(left) == 5  # an unknown or nested column, a literal of another type


def test_a_time_range_skips_only_segments_that_ended_before_it(chained):
    """For every record's time X (and X + 1): ``t_us >= X`` keeps every segment holding a
    record at X or later, and skips some (the successor's header bounds a segment)."""
    segs = {s.path: s for s in J.read(chained)}
    top = {p: int(s.rows[:, 4].max()) for p, s in segs.items() if len(s.rows)}
    hdr = {p: s.header for p, s in segs.items()}
    times = sorted({t for s in segs.values() for t in s.rows[:, 4].tolist()})
    skipped_any = False
    for x in [*times[:: max(1, len(times) // 300)], times[-1], times[-1] + 1]:
        plan = D.plan(chained, [("ge", "t_us", x)])
        need = {p for p, t in top.items() if t >= x}
        assert need <= set(plan.segments), (x, need - set(plan.segments))
        skipped_any |= plan.total > len(plan.segments)
    assert skipped_any
    # on the wall clock: a segment's records' wall_us are its t_us moved by its header
    walls = {p: top[p] - hdr[p]["mono_us"] + hdr[p]["wall_us"] for p in top}
    for x in sorted(walls.values()):
        plan = D.plan(chained, [("gt", "wall_us", x - 1)])
        assert {p for p, w in walls.items() if w >= x} <= set(plan.segments)
    late = D.plan(chained, [("ge", "t_us", times[-1])])
    assert len(late.segments) < late.total and late.skipped == {
        "t_us": late.total - len(late.segments)
    }


def test_the_header_columns_skip_segments(chained):
    segs = list(J.read(chained))
    service = segs[0].header["service"]
    assert D.plan(chained, [("eq", "service", "nope")]).segments == []
    assert len(D.plan(chained, [("eq", "service", service)]).segments) == len(segs)
    e2 = [s.path for s in segs if s.header["epoch"] == 2]
    assert D.plan(chained, [("eq", "epoch", 2)]).segments == e2
    assert D.plan(chained, [("not", ("eq", "epoch", 2))]).segments == [
        s.path for s in segs if s.header["epoch"] != 2
    ]
    reaper = D.plan(chained, [("eq", "role", "reaper"), ("eq", "epoch", 1)])
    assert reaper.segments == [
        s.path for s in segs if s.header["epoch"] == 1 and s.header["role"] == 2
    ]
    # kind is in every segment: rows only
    assert len(D.plan(chained, [("eq", "kind", "fired")]).segments) == len(segs)


# -- in Spark ---------------------------------------------------------------------------------
def _has_filter(df) -> bool:  # type: ignore[no-untyped-def]
    """Whether Spark evaluates a Filter above the scan (not pushed into the source)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return re.search(r"\bFilter \(", plan) is not None


@pytest.fixture
def pushdown(spark):
    spark.conf.set(D.PUSHDOWN_CONF, "true")
    try:
        yield spark
    finally:
        spark.conf.set(D.PUSHDOWN_CONF, "false")


WHERE = [
    "epoch = 2 AND kind IN ('fired', 'outcome')",
    "role = 'reaper' AND t_us >= {late}",
    "wall_us > {late_wall} OR id < 5",  # an OR: Spark keeps it
    "service = 'nope'",
    "NOT (role = 'reaper') AND task IS NOT NULL",
]


def test_pushed_filters_skip_segments_and_give_the_rows_spark_gives(pushdown, chained):
    spark = pushdown
    segs = list(J.read(chained))
    late = sorted(int(t) for s in segs for t in s.rows[:, 4])[-500]
    late_wall = spark.read.format(D.NAME).load(chained).agg(F.max("wall_us")).first()[0] - 50_000
    for where in WHERE:
        w = where.format(late=late, late_wall=late_wall)
        pushed = spark.read.format(D.NAME).load(chained).filter(w)
        spark.conf.set(D.PUSHDOWN_CONF, "false")
        plain = spark.read.format(D.NAME).load(chained).filter(w)
        want = sorted(tuple(r) for r in plain.select("file", "offset").collect())
        assert plain.rdd.getNumPartitions() == len(segs) and _has_filter(plain)
        spark.conf.set(D.PUSHDOWN_CONF, "true")
        assert sorted(tuple(r) for r in pushed.select("file", "offset").collect()) == want, w
        assert _has_filter(pushed) == (" OR " in w), w  # taken by the source, but the OR
    # the partitions are the segments the planner kept: the reader's counter
    w = f"epoch = 2 AND t_us >= {late}"
    kept = D.plan(chained, [("eq", "epoch", 2), ("ge", "t_us", late)])
    assert 0 < len(kept.segments) < len(segs)
    df = spark.read.format(D.NAME).load(chained).filter(w)
    assert df.rdd.getNumPartitions() == len(kept.segments)
    assert spark.read.format(D.NAME).load(chained).filter("service = 'x'").count() == 0


def test_spark_reuses_a_pushed_down_read_for_the_next_query_of_the_same_dataframe(
    pushdown, chained
):
    """Spark 4.3 keeps a Python source's planned read with the DataFrame: a query of the
    same DataFrame with no filter it can push reads what the last filtered one read
    (docs/pipeline.md says to load() once per query with pushdown on). This test pins
    that behaviour, so the docs change when Spark does."""
    spark = pushdown
    df = spark.read.format(D.NAME).load(chained)
    total = df.count()
    assert df.filter("kind = 'fired'").count() < total
    assert df.count() < total  # the earlier query's filter, reused
    assert spark.read.format(D.NAME).load(chained).count() == total  # a new load() is right


def test_without_the_pushdown_conf_the_source_still_reads(spark, chained):
    assert spark.conf.get(D.PUSHDOWN_CONF) == "false"  # Spark's default
    df = spark.read.format(D.NAME).load(chained)
    n = sum(len(s.rows) for s in J.read(chained))
    assert df.count() == n and df.filter("kind = 'fired'").count() > 0
    assert df.rdd.getNumPartitions() == len(J.segment_files(chained))


def test_the_read_schema_is_the_projection(spark, chained):
    """Only the columns asked for are built (the scan's output); a select of a full read
    cannot reach the source (PySpark 4.3's scan builder takes no columns)."""
    by_option = spark.read.format(D.NAME).option("columns", "id").load(chained)
    scan = _scan(by_option.select("id"))
    assert re.findall(r"(\w+)#\d+", scan) == ["id"], scan
    full = _scan(spark.read.format(D.NAME).load(chained).select("id"))
    assert len(re.findall(r"(\w+)#\d+", full)) >= 24  # every column built, then dropped
    assert by_option.count() == sum(len(s.rows) for s in J.read(chained))


def _scan(df) -> str:  # type: ignore[no-untyped-def]
    plan = df._jdf.queryExecution().executedPlan().toString()
    return next(ln for ln in plan.splitlines() if "BatchScan" in ln).split("]")[0]


def test_paths_lists_globs_and_file_uris(spark, chained, tmp_path):
    n = sum(len(s.rows) for s in J.read(chained))
    other = tmp_path / "other" / "journal"
    write_demo_journal(str(other), one_shots=50, repeating=0, operations=2)
    m = sum(len(s.rows) for s in J.read(other))

    def read():  # type: ignore[no-untyped-def]
        return spark.read.format(D.NAME)

    assert read().load(f"file://{chained}").count() == n
    assert read().option("paths", json.dumps([chained, str(other)])).load().count() == n + m
    # a glob over this test's own directory (the session's base directory holds other
    # tests' journals): "o*" matches "other" and nothing else
    assert read().load(str(tmp_path / "o*" / "journal")).count() == m
    # the binaryFile entry point reads what Hadoop's filesystems reach: file:// here
    assert D.binaryfile_events(spark, f"file://{chained}", ["id"]).count() == n
    with pytest.raises(Exception, match="--reader binaryfile"):
        spark.read.format(D.NAME).load("hdfs://namenode/journal").count()
    with pytest.raises(Exception, match="no journal directory matches"):
        spark.read.format(D.NAME).load(str(tmp_path / "nope-*")).count()


@pytest.mark.system  # starts Spark (a plain session in a subprocess: not the shared one)
@pytest.mark.xdist_group("spark-cluster")
def test_registered_without_user_code(tmp_path, chained):
    """A plain SparkSession finds the source through Spark's lookup of ``pyspark_*``
    modules. An editable install's packages are not on sys.path (an import hook finds
    them, which Spark's lookup does not ask), so the repository is put there, as a wheel's
    install puts pyspark_shmwheel in site-packages."""
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .getOrCreate())
        print("ROWS", spark.read.format("shmwheel-journal").load({chained!r}).count())
        spark.stop()
    """)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK"))}
    env.update(PYSPARK_PYTHON=sys.executable, PYTHONPATH=REPO)
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    rows = [ln for ln in got.stdout.splitlines() if ln.startswith("ROWS ")]
    assert rows == [f"ROWS {sum(len(s.rows) for s in J.read(chained))}"], got.stderr[-3000:]


def test_per_file_values_are_the_header_s():
    header = {"epoch": 1, "role": 2, "pid": 5, "service": "s", "boot_id": "b"}
    seg = J.Segment("/x/000001-1-reaper-5.shwj", header=header)
    assert E.per_file(seg.path, seg.header) == {
        "file": "/x/000001-1-reaper-5.shwj", "epoch": 1, "role": "reaper", "writer_pid": 5,
        "service": "s", "boot_id": "b",
    }  # fmt: skip
    facts = FL.SegmentFacts.of(seg.path, seg.header, None)
    assert facts.excludes([("eq", "epoch", 2)]) == "epoch"
    assert facts.excludes([("eq", "epoch", 1), ("ge", "t_us", 10**18)]) is None  # no bound
