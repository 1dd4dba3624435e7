"""The audit: what the service promises, checked on its journal with Spark.

The per-timer table (``timers.py``: one row per timer or operation, no shuffle) carries
everything a rule needs, so every rule is a filter of it (``rules``) and a violation names
its timer. The per-producer, per-task and operations figures aggregate it. The
per-second figures and the journal's extent are not here: the decoding tasks compute
them (``seconds.py``).

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

from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as f

from .seconds import QNAMES, QUANTILES
from .timers import Scope

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

#: the event columns the audit reads (and writes to events/)
COLUMNS = (
    "file",
    "offset",
    "epoch",
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


def rules(sc: Scope) -> list[tuple[str, Column, Column]]:
    """(rule, condition on the per-timer table, detail) of every violation."""
    typ = f.col("type")
    single = typ.isin("one-shot", "operation")
    rep = typ == "repeating"
    no_next = f.col("last_next_deadline_ms").isNull() | (f.col("last_next_deadline_ms") < 0)
    rep_overdue = (
        rep
        & (f.col("n_cancelled") == 0)
        & (f.col("in_flight_runs") == 0)
        & f.when(f.col("runs_fired") == 0, sc.overdue(f.col("deadline_ms"))).otherwise(
            ~no_next & sc.overdue(f.col("last_next_deadline_ms"))
        )
    )
    ids = f.format_string("%s id %d", typ, f.col("id"))
    return [
        (
            "two outcomes",
            single & (f.col("decisions") > 1),
            f.format_string(
                "%s: fired %d runs, cancelled %d, completed %d, expired %d records",
                ids,
                "runs_fired",
                "n_cancelled",
                "n_completed",
                "n_expired",
            ),
        ),
        (
            "no outcome",
            (single & (f.col("decisions") == 0) & sc.overdue(f.col("deadline_ms"))) | rep_overdue,
            f.format_string(
                "%s: deadline %d ms (next %s), journal ends at %d ms",
                ids,
                "deadline_ms",
                f.coalesce(f.col("last_next_deadline_ms").cast("string"), f.lit("-")),
                f.lit(sc.end_us // 1000),
            ),
        ),
        (
            "fired without a schedule",
            typ == "unscheduled",
            f.format_string(
                "id %d: %d runs fired, %d cancels, no scheduled or watched record",
                "id",
                "runs_fired",
                "n_cancelled",
            ),
        ),
        (
            "early",
            (f.col("early_runs") > 0)
            | ((typ == "operation") & (f.col("expired_us") < f.col("deadline_ms") * 1000)),
            f.format_string(
                "%s: %d runs fired before their deadline (%d us at most); deadline %d ms, "
                "expired at %s us",
                ids,
                "early_runs",
                f.least(f.col("late_min_us"), f.lit(0)),
                "deadline_ms",
                f.coalesce(f.col("expired_us").cast("string"), f.lit("-")),
            ),
        ),
        (
            "ran twice",
            (f.col("twice_runs") > 0) | ((typ == "operation") & (f.col("outcome_epochs") > 1)),
            f.format_string(
                "%s: %d runs repeated outside the crash window (outcomes in %d epochs)",
                ids,
                "twice_runs",
                "outcome_epochs",
            ),
        ),
        (
            "fired, no outcome",
            f.col("lost_runs") > 0,
            f.format_string("%s: %d fired runs have no outcome anywhere", ids, "lost_runs"),
        ),
        (
            "outcome without a fire",
            (typ != "operation") & (f.col("outcomes_without_fire") > 0),
            f.format_string("%s: %d runs", ids, "outcomes_without_fire"),
        ),
        (
            "ran after its cancel",
            rep & (f.col("last_fire_us") > f.col("cancel_us")),
            f.format_string(
                "%s: cancelled at %d us, fired at %d us", ids, "cancel_us", "last_fire_us"
            ),
        ),
    ]


def violations(timers: DataFrame, sc: Scope) -> DataFrame:
    """Every violation: rule, id, type, detail (one row per timer and rule broken). One
    pass over the table: the rows breaking any rule, then one row per rule each breaks."""
    found = rules(sc)
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


def per_producer(timers: DataFrame) -> DataFrame:
    """Per client pid (0: re-armed by a recovery)."""
    return (
        timers.filter(f.col("type").isin("one-shot", "repeating"))
        .groupBy(f.coalesce(f.col("producer"), f.lit(0)).alias("producer"))
        .agg(
            f.count("*").alias("timers"),
            f.count_if(f.col("type") == "repeating").alias("repeating"),
            f.sum("runs_fired").alias("runs"),
            f.count_if(f.col("end") == "cancelled").alias("cancelled"),
            (f.sum("late_sum_us") / f.sum("late_n") / 1000).alias("mean_late_ms"),
            (f.max("late_max_us") / 1000).alias("max_late_ms"),
        )
        .orderBy("producer")
    )


def per_task(timers: DataFrame) -> DataFrame:
    """Per task: runs with an outcome, ok / error / crashed and their rates, durations."""
    return (
        timers.filter(f.col("run_task").isNotNull())
        .groupBy(f.col("run_task").alias("task"))
        .agg(
            f.sum("outcomes").alias("runs"),
            f.sum("ok").alias("ok"),
            f.sum("error").alias("error"),
            f.sum("crashed").alias("crashed"),
            (f.sum("duration_sum_us") / f.sum("outcomes") / 1000).alias("mean_duration_ms"),
            (f.max("duration_max_us") / 1000).alias("max_duration_ms"),
        )
        .select(
            "*",
            (f.col("error") / f.col("runs")).alias("error_rate"),
            (f.col("crashed") / f.col("runs")).alias("crash_rate"),
        )
        .orderBy("task")
    )


def operations(timers: DataFrame) -> dict[str, Any]:
    """Purgatory operations: how they ended and how long completion took."""
    ops = timers.filter(f.col("type") == "operation")
    ttc = (f.col("completed_us") - f.col("created_us")) / 1000.0
    row = ops.agg(
        f.count("*").alias("n"),
        *[f.count_if(f.col("end") == e).alias(e) for e in ("completed", "expired", "cancelled")],
        f.percentile_approx(ttc, list(QUANTILES), 10000).alias("q"),
        f.max(ttc).alias("max"),
    ).collect()[0]
    q = list(row["q"] or [None] * len(QUANTILES))
    return {
        "operations": int(row["n"]),
        "completed": int(row["completed"]),
        "expired": int(row["expired"]),
        "cancelled": int(row["cancelled"]),
        "pending": int(row["n"])
        - int(row["completed"])
        - int(row["expired"])
        - int(row["cancelled"]),
        "time_to_complete_ms": {
            **dict(zip(QNAMES, q, strict=True)),
            "max": row["max"],
        },
    }
