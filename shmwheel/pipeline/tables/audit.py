"""The audit: what the service promises, checked on its journal with Spark.

The per-timer table (``timers.py``: one row per timer or operation, no shuffle) carries
everything a rule needs, so every rule is a filter of it (``rules``) and a violation names
its timer. The figures are not here: the tasks that decode the journal and build the
per-timer table compute them (``seconds.py``, ``figures.py``).

The rules (docs/pipeline.md says the same for users):

- two outcomes: a one-shot that ran and was cancelled; an operation with more than one
  of completed, expired, cancelled;
- no outcome: a one-shot or operation with none whose deadline is more than the grace
  before the journal's end (later ones are pending at the end: counted, not violations);
  a repeating timer, not cancelled, whose next run is that overdue;
- fired without a schedule: records of an id with no ``scheduled`` or ``watched``;
- early: a fire before its run's deadline; an operation expired before its timeout;
- ran twice: a run fired again in a later epoch although an earlier epoch recorded its
  outcome (outside the documented at-least-once window), or fired twice in one epoch; an
  operation's task with outcomes in two epochs. A run fired again in a later epoch with no
  outcome in the earlier one is inside the window: counted, not a violation;
- fired, no outcome: a run fired whose outcome is recorded nowhere, unless it is in
  flight at the end (fired in the last epoch within the grace of the end);
- outcome without a fire (a timer's run; an operation's task has no fire);
- ran after its cancel (a repeating timer fired after its cancel was recorded).

Times of different boots are not comparable (monotonic clocks): the audit assumes the
journal's epochs ran on one boot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as f

from .pertimer import Bounds

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

#: the event columns the audit reads (and writes to events/)
COLUMNS = (
    "file",
    "offset",
    "epoch",
    "service",
    "boot_id",
    "kind",
    "id",
    "t_us",
    "wall_us",
    "run",
    "deadline_ms",
    "task",
    "producer",
    "flags",
    "period_ms",
    "outcome",
    "duration_us",
    "next_deadline_ms",
    "required",
    "on_complete",
    "on_expire",
    "reason",
)
DEFAULT_GRACE_MS = 10_000
#: violations/ (``fleet_violations``)
VIOLATIONS_SCHEMA = pa.schema([("service", pa.string()), ("rule", pa.string()),
                               ("id", pa.int64()), ("type", pa.string()),
                               ("detail", pa.string())])  # fmt: skip


@dataclass(frozen=True)
class Ops:
    """How a rule's condition is built: Spark's Column functions (``SPARK``) or pyarrow's
    compute expressions (``ARROW``, the single-process pass of ``bench/audit_scale.py``).
    Both evaluate nulls as SQL does (``|`` and ``&`` are Kleene's)."""

    col: Callable[[str], Any]
    when: Callable[[Any, Any, Any], Any]  # when(condition, then, otherwise)
    isin: Callable[..., Any]  # isin(column, *values)
    is_null: Callable[[Any], Any]


SPARK = Ops(
    col=f.col,
    when=lambda c, a, b: f.when(c, a).otherwise(b),
    isin=lambda c, *v: c.isin(*v),
    is_null=lambda c: c.isNull(),
)


def _arrow_isin(c: Any, *values: str) -> Any:
    import pyarrow.compute as pc

    # SQL's IN: null for a null value (pyarrow's is_in says false)
    return pc.if_else(c.is_valid(), c.isin(list(values)), None)


def arrow_ops() -> Ops:
    """``Ops`` over pyarrow compute expressions (``pyarrow.compute.field``)."""
    import pyarrow.compute as pc

    return Ops(col=pc.field, when=pc.if_else, isin=_arrow_isin, is_null=lambda c: c.is_null())


def conditions(b: Bounds, ops: Ops = SPARK) -> list[tuple[str, Any]]:
    """(rule, condition on the per-timer table) of every rule, built with `ops`."""
    col = ops.col
    typ = col("type")
    single = ops.isin(typ, "one-shot", "operation")
    rep = typ == "repeating"
    no_next = ops.is_null(col("last_next_deadline_ms")) | (col("last_next_deadline_ms") < 0)
    rep_overdue = (
        rep
        & (col("n_cancelled") == 0)
        & (col("in_flight_runs") == 0)
        & ops.when(
            col("runs_fired") == 0,
            b.overdue(col("deadline_ms")),
            ~no_next & b.overdue(col("last_next_deadline_ms")),
        )
    )
    return [
        ("two outcomes", single & (col("decisions") > 1)),
        (
            "no outcome",
            (single & (col("decisions") == 0) & b.overdue(col("deadline_ms"))) | rep_overdue,
        ),
        ("fired without a schedule", typ == "unscheduled"),
        (
            "early",
            (col("early_runs") > 0)
            | ((typ == "operation") & (col("expired_us") < col("deadline_ms") * 1000)),
        ),
        (
            "ran twice",
            (col("twice_runs") > 0) | ((typ == "operation") & (col("outcome_epochs") > 1)),
        ),
        ("fired, no outcome", col("lost_runs") > 0),
        ("outcome without a fire", (typ != "operation") & (col("outcomes_without_fire") > 0)),
        ("ran after its cancel", rep & (col("last_fire_us") > col("cancel_us"))),
    ]


def _details(b: Bounds) -> dict[str, Column]:
    """What a violation's row says of its timer, by rule (Spark's format_string)."""
    # ids in hex, as the rest of shmwheel prints them (a handle: slot and generation)
    ids = f.format_string("%s %#x", f.col("type"), f.col("id"))
    return {
        "two outcomes": f.format_string(
            "%s: fired %d runs, cancelled %d, completed %d, expired %d records",
            ids, "runs_fired", "n_cancelled", "n_completed", "n_expired",
        ),
        "no outcome": f.format_string(
            "%s: deadline %d ms (next %s), journal ends at %d ms",
            ids, "deadline_ms",
            f.coalesce(f.col("last_next_deadline_ms").cast("string"), f.lit("-")),
            f.lit(b.end_us // 1000),
        ),
        "fired without a schedule": f.format_string(
            "id %#x: %d runs fired, %d cancels, no scheduled or watched record",
            "id", "runs_fired", "n_cancelled",
        ),
        "early": f.format_string(
            "%s: %d runs fired before their deadline (%d us at most); deadline %d ms, "
            "expired at %s us",
            ids, "early_runs", f.least(f.col("late_min_us"), f.lit(0)), "deadline_ms",
            f.coalesce(f.col("expired_us").cast("string"), f.lit("-")),
        ),
        "ran twice": f.format_string(
            "%s: %d runs repeated outside the crash window (outcomes in %d epochs)",
            ids, "twice_runs", "outcome_epochs",
        ),
        "fired, no outcome": f.format_string(
            "%s: %d fired runs have no outcome anywhere", ids, "lost_runs"
        ),
        "outcome without a fire": f.format_string("%s: %d runs", ids, "outcomes_without_fire"),
        "ran after its cancel": f.format_string(
            "%s: cancelled at %d us, fired at %d us", ids, "cancel_us", "last_fire_us"
        ),
    }  # fmt: skip


def rules(b: Bounds) -> list[tuple[str, Column, Column]]:
    """(rule, condition on the per-timer table, detail) of every violation (Spark)."""
    details = _details(b)
    return [(rule, cond, details[rule]) for rule, cond in conditions(b)]


def count_violations(table: Any, b: Bounds) -> dict[str, int]:
    """The violations of each rule broken in a per-timer table held by pyarrow (one
    service's; ``pertimer.OUTPUT``): the same conditions as the Spark job's, evaluated in
    one scan of the table (a filter per rule took 3x as long) and counted where true (a
    null is no violation, as in Spark's filter)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    conds = conditions(b, arrow_ops())
    scan = ds.Scanner.from_batches(table.to_batches(), schema=table.schema, columns=dict(conds))
    got = scan.to_table()
    return {rule: n for rule, _ in conds if (n := int(pc.sum(got.column(rule)).as_py() or 0))}


def violations(timers: DataFrame, b: Bounds) -> DataFrame:
    """Every violation: rule, id, type, detail (one row per timer and rule broken). One
    pass over the table: the rows breaking any rule, then one row per rule each breaks."""
    found = rules(b)
    broken = f.array(
        *[f.when(cond, f.struct(f.lit(rule).alias("rule"), detail.alias("detail")))
          for rule, cond, detail in found]
    )  # fmt: skip
    any_rule = found[0][1]
    for _, cond, _ in found[1:]:
        any_rule = any_rule | cond
    return (
        timers.filter(any_rule)
        .select("id", "type", f.explode(f.filter(broken, lambda v: v.isNotNull())).alias("v"))
        .select(f.col("v.rule").alias("rule"), "id", "type", f.col("v.detail").alias("detail"))
    )


def fleet_violations(timers: DataFrame, bounds: dict[str, Bounds]) -> DataFrame:
    """``violations`` of a per-timer table of several services (its ``service``
    column), each judged against its own bounds (its journal's end, its last epoch):
    service, rule, id, type, detail."""
    parts = [
        violations(timers.filter(f.col("service") == svc), b).select(
            f.lit(svc).alias("service"), "rule", "id", "type", "detail"
        )
        for svc, b in sorted(bounds.items())
    ]
    if not parts:  # no service: no timer
        return (
            violations(timers, Bounds(0, 0, 0, ()))
            .select(f.col("rule").alias("service"), "rule", "id", "type", "detail")
            .limit(0)
        )
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out
