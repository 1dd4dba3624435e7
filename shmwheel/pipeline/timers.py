"""The per-timer table: one row per timer (or operation) with its schedule, its decisions
and the tallies of its runs, from which every rule of the audit is a filter.

Theory of operation. A timer's records (its schedule, cancel, fires and outcomes) are
spread over the coordinator's and the reaper's segments, so building the table needs one
shuffle by id; Spark's partial aggregation cannot help (an id's records are never in one
input partition), so the shuffle carries every record and is the audit's main cost.
It is paid once:

1. **By id**, over every record: counts of each kind, first and last epochs of the fires
   and of the outcomes, the first fire's lateness, the latest outcome. For a timer with
   at most one fire and one outcome (one-shots, operations: nearly all records), that is
   already exact per run.
2. **By (id, run)**, only for the ids with several fires or outcomes (repeating timers,
   runs repeated after a whole-service crash): the same aggregates per run, summed per id.
   These ids are few, so this second grouping is small.

The per-run checks (``_run_flags``) are written once and applied to both. Aggregates are
numeric only (kinds, outcomes and task names as small ints): Spark's hash aggregation keeps
no strings in its buffers and would fall back to sorting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import Column
from pyspark.sql import functions as f

from ..journal import format as J

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

# kinds as the journal's codes (docs/journal.md), outcomes as contract.h's
#: ids with several runs up to which their tables are broadcast (no shuffle of the others)
BROADCAST_IDS = 1_000_000
KIND = {name: code for code, name in J.KIND_NAMES.items()}
OUTCOME = {name: code for code, name in J.OUTCOMES.items()}


@dataclass
class Scope:
    """The journal's extent and names, known before the rules (they compare against its
    end; the aggregates carry task names as 1-based indexes into ``tasks``)."""

    end_us: int
    start_us: int
    final_epoch: int
    grace_us: int
    tasks: list[str]

    def task_index(self, col: str) -> Column:
        return f.array_position(f.array(*[f.lit(t) for t in self.tasks or [""]]), f.col(col))

    def task_name(self, index: Column) -> Column:
        return f.element_at(f.array(*[f.lit(t) for t in self.tasks or [""]]), index.cast("int"))

    def overdue(self, deadline_ms: Column) -> Column:
        """The deadline is more than the grace before the journal's end."""
        return deadline_ms * 1000 < self.end_us - self.grace_us


def coded(events: DataFrame, sc: Scope) -> DataFrame:
    """The columns the aggregates read, kinds and names as ints (computed once per row)."""
    kc = f.lit(None).cast("int")
    for name, code in KIND.items():
        kc = f.when(f.col("kind") == name, code).otherwise(kc)
    oc = f.lit(None).cast("int")
    for name, code in OUTCOME.items():
        oc = f.when(f.col("outcome") == name, code).otherwise(oc)
    return events.select(
        "id", "epoch", "t_us", "run", "deadline_ms", "period_ms", "producer", "duration_us",
        "next_deadline_ms", kc.alias("kc"), oc.alias("oc"),
        sc.task_index("task").alias("task_i"),
        sc.task_index("on_complete").alias("on_complete_i"),
        sc.task_index("on_expire").alias("on_expire_i"),
    )  # fmt: skip


def _is(kind: str) -> Column:
    return f.col("kc") == KIND[kind]


def _of(kind: str, col: str | Column) -> Column:
    return f.when(_is(kind), f.col(col) if isinstance(col, str) else col)


def _run_aggregates() -> list[Column]:
    """What a run needs: its fires and outcomes (by id, or by (id, run))."""
    out_t = _of("outcome", "t_us")
    late = f.col("t_us") - f.col("deadline_ms") * 1000
    return [
        f.count_if(_is("fired")).alias("n_fired"),
        f.count_if(_is("outcome")).alias("n_outcome"),
        f.min(_of("fired", "epoch")).alias("fire_epoch_min"),
        f.max(_of("fired", "epoch")).alias("fire_epoch_max"),
        f.max(_of("fired", "t_us")).alias("last_fire_us"),
        f.min(_of("fired", late)).alias("late_us"),
        f.min(_of("outcome", "epoch")).alias("out_epoch_min"),
        f.max(_of("outcome", "epoch")).alias("out_epoch_max"),
        f.max(_of("outcome", "run")).alias("out_run"),
        f.max_by(_of("outcome", "oc"), out_t).alias("result"),
        f.max_by(_of("outcome", "duration_us"), out_t).alias("duration_us"),
        f.max_by(_of("outcome", "next_deadline_ms"), out_t).alias("next_deadline_ms"),
    ]


def _run_flags(sc: Scope) -> list[Column]:
    """The per-run checks, on the columns of _run_aggregates."""
    fires, outs = f.col("n_fired"), f.col("n_outcome")
    unanswered = (fires > 0) & (outs == 0)
    in_flight = f.coalesce(
        (f.col("fire_epoch_max") == sc.final_epoch)
        & (f.col("last_fire_us") > sc.end_us - sc.grace_us),
        f.lit(False),
    )
    # an earlier epoch recorded the run's outcome and a later one fired it again, or more
    # fire records than epochs they span (two fires in one epoch)
    twice = f.coalesce(f.col("out_epoch_min") < f.col("fire_epoch_max"), f.lit(False)) | (
        fires > f.col("fire_epoch_max") - f.col("fire_epoch_min") + 1
    )
    return [
        (fires > 0).cast("int").alias("runs_fired"),
        (outs > 0).cast("int").alias("outcomes"),
        f.coalesce(f.col("late_us") < 0, f.lit(False)).cast("int").alias("early_runs"),
        twice.cast("int").alias("twice_runs"),
        f.when(~twice & (fires > 1), fires - 1).otherwise(0).alias("repeats"),
        (unanswered & ~in_flight).cast("int").alias("lost_runs"),
        (unanswered & in_flight).cast("int").alias("in_flight_runs"),
        ((f.coalesce(f.col("out_run"), f.lit(0)) > 0) & (fires == 0) & (outs > 0))
        .cast("int")
        .alias("outcomes_without_fire"),
        f.coalesce(f.col("out_epoch_max") - f.col("out_epoch_min") + 1, f.lit(0)).alias(
            "outcome_epochs"
        ),
        f.coalesce((f.col("result") == OUTCOME["ok"]).cast("int"), f.lit(0)).alias("ok"),
        f.coalesce((f.col("result") == OUTCOME["error"]).cast("int"), f.lit(0)).alias("error"),
        f.coalesce((f.col("result") == OUTCOME["crashed"]).cast("int"), f.lit(0)).alias("crashed"),
    ]


RUN_TALLIES = (
    "runs_fired",
    "outcomes",
    "early_runs",
    "twice_runs",
    "repeats",
    "lost_runs",
    "in_flight_runs",
    "outcomes_without_fire",
    "ok",
    "error",
    "crashed",
)


def per_timer(events: DataFrame, sc: Scope, cached: list[DataFrame]) -> DataFrame:
    """One row per id (see the module docstring). Runs a job (it counts the ids with
    several runs) and caches two intermediate tables, appended to `cached`: the caller
    unpersists them when it is done with the result."""
    rows = coded(events, sc)
    lifecycle = f.col("kc").isin(KIND["scheduled"], KIND["watched"])
    by_id = rows.groupBy("id").agg(
        *[
            f.count_if(_is(k)).alias(f"n_{k}")
            for k in ("scheduled", "watched", "cancelled", "completed", "expired")
        ],
        f.max(f.when(lifecycle, f.col("deadline_ms"))).alias("deadline_ms"),
        f.max(_of("scheduled", "period_ms")).alias("period_ms"),
        f.max(_of("scheduled", "task_i")).alias("task_i"),
        f.max(f.when(_is("scheduled") & (f.col("producer") > 0), f.col("producer"))).alias(
            "producer"
        ),
        f.max(_of("watched", "on_complete_i")).alias("on_complete_i"),
        f.max(_of("watched", "on_expire_i")).alias("on_expire_i"),
        f.min(f.when(lifecycle, f.col("t_us"))).alias("created_us"),
        f.min(_of("cancelled", "t_us")).alias("cancel_us"),
        f.min(_of("completed", "t_us")).alias("completed_us"),
        f.min(_of("expired", "t_us")).alias("expired_us"),
        f.max(_of("fired", "run")).alias("last_run"),
        *_run_aggregates(),
    )
    single = by_id.select(
        "*",
        *_run_flags(sc),
        f.col("late_us").alias("late_sum_us"),
        f.col("late_us").alias("late_max_us"),
        f.col("late_us").alias("late_min_us"),
        f.col("late_us").isNotNull().cast("int").alias("late_n"),
        f.col("duration_us").alias("duration_sum_us"),
        f.col("duration_us").alias("duration_max_us"),
        f.when(f.col("n_outcome") > 0, f.col("next_deadline_ms")).alias("last_next_deadline_ms"),
    )
    by_id = by_id.persist(StorageLevel.MEMORY_AND_DISK)  # read twice: below, and as `single`
    multi_ids = by_id.filter((f.col("n_fired") > 1) | (f.col("n_outcome") > 1)).select("id")
    multi_ids = multi_ids.persist(StorageLevel.MEMORY_AND_DISK)
    cached += [by_id, multi_ids]
    small = multi_ids.count() <= BROADCAST_IDS
    per_run = (
        rows.filter(f.col("kc").isin(KIND["fired"], KIND["outcome"]))
        .join(f.broadcast(multi_ids) if small else multi_ids, "id", "left_semi")
        .groupBy("id", "run")
        .agg(*_run_aggregates())
        .select(
            "id", "run", "late_us", "duration_us", "next_deadline_ms", "n_outcome", *_run_flags(sc)
        )
    )
    answered = f.col("n_outcome") > 0
    multi = per_run.groupBy("id").agg(
        *[f.sum(c).alias(f"m_{c}") for c in RUN_TALLIES],
        f.max("outcome_epochs").alias("m_outcome_epochs"),
        f.sum("late_us").alias("m_late_sum_us"),
        f.max("late_us").alias("m_late_max_us"),
        f.min("late_us").alias("m_late_min_us"),
        f.count("late_us").alias("m_late_n"),
        f.sum("duration_us").alias("m_duration_sum_us"),
        f.max("duration_us").alias("m_duration_max_us"),
        f.max_by(f.when(answered, f.col("next_deadline_ms")), f.when(answered, f.col("run"))).alias(
            "m_last_next_deadline_ms"
        ),
    )
    merged = single.join(f.broadcast(multi) if small else multi, "id", "left")
    take = (
        *RUN_TALLIES, "outcome_epochs", "late_sum_us", "late_max_us", "late_min_us", "late_n",
        "duration_sum_us", "duration_max_us", "last_next_deadline_ms",
    )  # fmt: skip
    has_multi = f.col("m_runs_fired").isNotNull()
    merged = merged.select(
        *[c for c in single.columns if c not in take],
        *[f.when(has_multi, f.col(f"m_{c}")).otherwise(f.col(c)).alias(c) for c in take],
    )
    return _classify(merged, sc)


# columns only the aggregation needs (not kept in the per-timer table)
_WORKING = {
    "task_i", "on_complete_i", "on_expire_i", "last_run", "n_fired", "n_outcome",
    "fire_epoch_min", "fire_epoch_max", "late_us", "out_epoch_min", "out_epoch_max", "out_run",
    "result", "duration_us", "next_deadline_ms",
}  # fmt: skip


def _classify(t: DataFrame, sc: Scope) -> DataFrame:
    """Type, decisions, how it ended and the task its runs ran."""
    op = f.col("n_watched") > 0
    typ = (
        f.when(op, "operation")
        .when(f.col("period_ms") > 0, "repeating")
        .when(f.col("n_scheduled") > 0, "one-shot")
        .otherwise("unscheduled")
    )
    ran, cancelled = f.col("runs_fired") > 0, f.col("n_cancelled") > 0
    completed, expired = f.col("n_completed") > 0, f.col("n_expired") > 0
    decided = f.when(
        op, completed.cast("int") + expired.cast("int") + cancelled.cast("int")
    ).otherwise(ran.cast("int") + cancelled.cast("int"))
    end = (
        f.when(op & completed, "completed")
        .when(op & expired, "expired")
        .when(cancelled, "cancelled")
        .when(ran, "ran")
    )
    task = (
        f.when(op & completed, f.col("on_complete_i"))
        .when(op & expired, f.col("on_expire_i"))
        .when(~op, f.col("task_i"))
    )
    return t.select(
        *[c for c in t.columns if c not in _WORKING],
        typ.alias("type"),
        decided.alias("decisions"),
        end.alias("end"),
        sc.task_name(task).alias("run_task"),
    )
