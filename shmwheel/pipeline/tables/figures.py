"""What the per-timer table adds up to: the tally of how timers ended, the per-producer
and per-task figures and the purgatory operations, computed by the task that builds each
bucket's rows and added up in the driver.

Theory of operation. Like the per-second figures (``seconds.py``), every figure here is
a count, a sum, a maximum or a histogram over the rows of the per-timer table, so the
figures of disjoint buckets add up (``merge``). Each bucket's task computes them with
numpy on the rows it has just built (``of_table``) and returns them in its one output
row as JSON (``to_json``); Spark reads ``timers/`` back only for the rules. Three Spark
aggregations of ``timers/`` (per producer, per task, the operations) cost about 4 s of
a 26 s audit of 10 M records, mostly a cold JVM's (docs/performance.md).

The figures are those the audit's SQL computed: a producer's timers are its one-shots
and repeating timers (a null producer, re-armed by a recovery, counts as 0); a task's runs
are the runs with an outcome of the timers whose runs ran it (``run_task``); an
operation's time to complete is from its ``watched`` to its ``completed`` record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import asnumpy, histogram, pertimer
from .seconds import QNAMES, QUANTILES

#: what ``tally`` counts, per type of timer
TALLY = ("n", "ran", "cancelled", "completed", "expired", "pending", "runs",
         "repeats_in_window", "in_flight")  # fmt: skip

#: per producer, summed: how many timers, repeating, runs fired, cancelled, the lateness
#: sum and count (us) of their runs; then the greatest lateness (us), None if none
PRODUCER_SUMS = ("timers", "repeating", "runs", "cancelled", "late_sum_us", "late_n")
#: per task, summed: runs with an outcome, ok, error, crashed, their duration sum (us);
#: then the longest duration (us), None if none
TASK_SUMS = ("runs", "ok", "error", "crashed", "duration_sum_us")
_ENDS = ("completed", "expired", "cancelled")  # an operation's
_PRODUCER_COLUMNS = ("producer", "type", "runs_fired", "end", "late_sum_us", "late_n",
                     "late_max_us")  # fmt: skip
_TASK_COLUMNS = ("run_task", "outcomes", "ok", "error", "crashed", "duration_sum_us",
                 "duration_max_us")  # fmt: skip


@dataclass
class TimerFigures:
    """The figures of a set of per-timer rows (a bucket's, or the merge of several)."""

    #: ``tally``: how the timers ended, by type (the operations' ends among them)
    tally: dict[str, dict[str, int]] = field(default_factory=dict)
    #: producer pid -> [*PRODUCER_SUMS, greatest lateness or None]
    producers: dict[int, list[int | None]] = field(default_factory=dict)
    #: task name -> [*TASK_SUMS, longest duration or None]
    tasks: dict[str, list[int | None]] = field(default_factory=dict)
    #: the completed operations' times to complete (us): histogram cells, code -> count
    ttc: dict[int, int] = field(default_factory=dict)
    ttc_min_us: int | None = None
    ttc_max_us: int | None = None

    @classmethod
    def of_table(cls, table: pa.Table, bounds: pertimer.Bounds) -> TimerFigures:
        """The figures of per-timer rows (``pertimer.OUTPUT``)."""
        out = cls(tally=tally(table, bounds))
        # the columns used, then the rows: a filter copies every column it is given
        mine = table.select(_PRODUCER_COLUMNS).filter(
            pa.array(asnumpy.among(table.column("type"), "one-shot", "repeating"))
        )
        out.producers = {
            int(k): row
            for k, row in _grouped(
                pc.fill_null(mine.column("producer"), 0),
                [_flag(mine, "type", "repeating"), mine.column("runs_fired"),
                 _flag(mine, "end", "cancelled"), mine.column("late_sum_us"),
                 mine.column("late_n")],
                mine.column("late_max_us"),
                count=True,
            ).items()
        }  # fmt: skip
        ran = table.select(_TASK_COLUMNS).filter(pc.is_valid(table.column("run_task")))
        out.tasks = {
            str(k): row
            for k, row in _grouped(
                ran.column("run_task"),
                [ran.column(c) for c in ("outcomes", "ok", "error", "crashed", "duration_sum_us")],
                ran.column("duration_max_us"),
            ).items()
        }
        op = asnumpy.among(table.column("type"), "operation")
        done = (
            op
            & asnumpy.valid(table.column("completed_us"))
            & asnumpy.valid(table.column("created_us"))
        )
        ttc = (
            asnumpy.ints(table.column("completed_us"))[done]
            - asnumpy.ints(table.column("created_us"))[done]
        )
        if len(ttc):
            code, n = np.unique(histogram.code(ttc), return_counts=True)
            out.ttc = {int(c): int(k) for c, k in zip(code, n, strict=True)}
            out.ttc_min_us, out.ttc_max_us = int(ttc.min()), int(ttc.max())
        return out

    @classmethod
    def merge(cls, parts: Iterable[TimerFigures]) -> TimerFigures:
        """The figures of the union of disjoint sets of rows."""
        out = cls()
        ps = list(parts)
        out.tally = add_tallies(p.tally for p in ps)
        for p in ps:
            _add(out.producers, p.producers)
            _add(out.tasks, p.tasks)
            for c, n in p.ttc.items():
                out.ttc[c] = out.ttc.get(c, 0) + n
        out.ttc_min_us = min((p.ttc_min_us for p in ps if p.ttc_min_us is not None), default=None)
        out.ttc_max_us = max((p.ttc_max_us for p in ps if p.ttc_max_us is not None), default=None)
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TimerFigures:
        d = json.loads(text)
        d["producers"] = {int(k): v for k, v in d["producers"].items()}
        d["ttc"] = {int(k): v for k, v in d["ttc"].items()}
        return cls(**d)

    def per_producer(self) -> pa.Table:
        """per_producer/: by producer, ascending."""
        return _table(("producer", pa.int64()), self.producers, PRODUCER_SUMS,
                      ("timers", "repeating", "runs", "cancelled"),
                      {"mean_late_ms": lambda r: _ratio(r["late_sum_us"], r["late_n"], 1000),
                       "max_late_ms": lambda r: asnumpy.ms(r["top"])})  # fmt: skip

    def per_task(self) -> pa.Table:
        """per_task/: by task name, ascending."""
        return _table(("task", pa.string()), self.tasks, TASK_SUMS,
                      ("runs", "ok", "error", "crashed"),
                      {"mean_duration_ms": lambda r: _ratio(r["duration_sum_us"], r["runs"], 1000),
                       "max_duration_ms": lambda r: asnumpy.ms(r["top"]),
                       "error_rate": lambda r: _ratio(r["error"], r["runs"]),
                       "crash_rate": lambda r: _ratio(r["crashed"], r["runs"])})  # fmt: skip

    def operations_summary(self) -> dict[str, Any]:
        """Purgatory operations: how they ended and how long completion took (ms)."""
        o = self.tally.get("operation", dict.fromkeys(TALLY, 0))
        codes = np.array(sorted(self.ttc), np.int64)
        counts = np.array([self.ttc[int(c)] for c in codes], np.int64)
        if len(codes):
            qs = histogram.quantiles(codes, counts, list(QUANTILES), self.ttc_min_us or 0,
                             self.ttc_max_us or 0)  # fmt: skip
            q: list[float | None] = [v / 1000 for v in qs]
        else:
            q = [None] * len(QUANTILES)
        return {
            "operations": o["n"],  # the tally counted them
            **{e: o[e] for e in _ENDS},
            "pending": o["n"] - sum(o[e] for e in _ENDS),
            "time_to_complete_ms": {
                **dict(zip(QNAMES, q, strict=True)),
                "max": asnumpy.ms(self.ttc_max_us),
            },
        }


def _table(
    key: tuple[str, pa.DataType],
    groups: dict[Any, list[int | None]],
    names: tuple[str, ...],
    ints: tuple[str, ...],
    floats: dict[str, Callable[[dict[str, Any]], float | None]],
) -> pa.Table:
    """A small table, a row per key of `groups` (ascending): the key, the sums `ints`,
    and the `floats` computed from each row (its sums by `names`, then "top")."""
    keys = sorted(groups)
    rows = [dict(zip((*names, "top"), groups[k], strict=True)) for k in keys]
    cols: dict[str, pa.Array] = {key[0]: pa.array(keys, key[1])}
    cols.update({c: pa.array([r[c] for r in rows], pa.int64()) for c in ints})
    cols.update({c: pa.array([fn(r) for r in rows], pa.float64()) for c, fn in floats.items()})
    return pa.table(cols)


def _grouped(
    key: pa.Array | pa.ChunkedArray,
    sums: list[pa.Array | pa.ChunkedArray],
    top: pa.Array | pa.ChunkedArray,
    count: bool = False,
) -> dict[Any, list[int | None]]:
    """key -> [its rows if `count`, the sums of each of `sums` over them (null as 0), the
    greatest `top` of them (None if all are null)]: Arrow's hash aggregation."""
    cols = {"k": key, **{f"s{i}": pc.fill_null(c, 0) for i, c in enumerate(sums)}, "top": top}
    aggs: list[Any] = [([], "count_all")] if count else []
    aggs += [*[(f"s{i}", "sum") for i in range(len(sums))], ("top", "max")]
    names = [f"{c}_{a}" if c else a for c, a in aggs]
    got = pa.table(cols).group_by("k").aggregate(aggs)
    return {r["k"]: [*(int(r[n] or 0) for n in names[:-1]), r[names[-1]]]
            for r in got.to_pylist()}  # fmt: skip


def _flag(table: pa.Table, c: str, value: str) -> pa.Array:
    """1 where the string column `c` is `value`, else 0."""
    return pa.array(asnumpy.among(table.column(c), value).astype(np.int64))


def _add(into: dict[Any, list[int | None]], more: dict[Any, list[int | None]]) -> None:
    """Add `more`'s rows of sums (the last item a maximum) into `into`."""
    for k, row in more.items():
        have = into.get(k)
        if have is None:
            into[k] = list(row)
            continue
        *s, top = row
        tops = [t for t in (have[-1], top) if t is not None]
        into[k] = [int(a or 0) + int(b or 0) for a, b in zip(have[:-1], s, strict=True)]
        into[k].append(max(tops) if tops else None)


def _ratio(num: int | None, den: int | None, scale: float = 1.0) -> float | None:
    return None if not den else (num or 0) / den / scale


def tally(table: pa.Table, b: pertimer.Bounds) -> dict[str, dict[str, int]]:
    """How the timers of a per-timer table ended, by type (the types present): how many,
    how many ran / were cancelled / completed / expired, the one-shots and operations
    still pending (no decision, and due no more than the grace before the journal's
    end), and their runs fired, runs repeated in the crash window and runs in flight.
    Tallies of disjoint tables add up (``add_tallies``)."""

    def ints(c: str) -> np.ndarray:
        return asnumpy.ints(table.column(c))

    has_deadline = asnumpy.valid(table.column("deadline_ms"))
    undecided = (ints("decisions") == 0) & has_deadline & ~b.overdue(ints("deadline_ms"))
    end_names = ("ran", "cancelled", "completed", "expired")
    end = asnumpy.index_in(table.column("end"), end_names)  # each string column looked up once
    ends = {e: end == i for i, e in enumerate(end_names)}
    sums = {"runs": ints("runs_fired"), "repeats_in_window": ints("repeats"),
            "in_flight": ints("in_flight_runs")}  # fmt: skip
    types = asnumpy.index_in(table.column("type"), pertimer.TYPES)
    out: dict[str, dict[str, int]] = {}
    for i, typ in enumerate(pertimer.TYPES):
        m = types == i
        if not m.any():
            continue
        row = {"n": int(m.sum()), **{e: int((m & v).sum()) for e, v in ends.items()}}
        row["pending"] = int((m & undecided).sum()) if typ in ("one-shot", "operation") else 0
        row.update({k: int(v[m].sum()) for k, v in sums.items()})
        out[typ] = {k: row[k] for k in TALLY}
    return out


def add_tallies(tallies: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """The sum of tallies of disjoint tables."""
    out: dict[str, dict[str, int]] = {}
    for t in tallies:
        for typ, row in t.items():
            acc = out.setdefault(typ, dict.fromkeys(TALLY, 0))
            for k in TALLY:
                acc[k] += row[k]
    return out
