"""The per-timer kernel: one row per timer (or operation) from its records, in numpy.

This is the audit's arithmetic, with no Spark in it: each of ``timers.py``'s tasks reads
one bucket of events/ (every record of its ids, ``buckets.py``) and hands it to
``per_timer_of``, which codes it (``coded``) for ``per_timer_table``; the tests call both
on tables directly.

Theory of operation. A partition's ids are sorted once, to number each record's timer;
every per-id figure is then one ``ufunc.at`` over the records, left in their order, into
an array of the timers (``_Groups``). A *run* of a timer is what
one firing did: its fire records and its outcome records. For an id with at most one fire
and one outcome (one-shots, operations: nearly all of them) the id's figures are already
its one run's. The few ids with more (repeating timers, runs repeated after a whole-service
crash) are grouped a second time by (id, run), and their per-run flags summed per id.
The per-run checks (``_run_flags``) are written once and applied to both groupings.

Every column is a pair (values, valid): a figure over no record is null, as SQL's would
be. The input columns are ``INPUT`` (ints; kinds and outcomes as the journal's codes,
task names as 1-based indexes into the scope's ``tasks``, 0 or null for none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...journal import format as journal_format
from . import asnumpy

if TYPE_CHECKING:  # pragma: no cover
    from .seconds import Seconds

KIND = {name: code for code, name in journal_format.KIND_NAMES.items()}
OUTCOME = {name: code for code, name in journal_format.OUTCOMES.items()}

#: the coded record columns the kernel reads, in this order
INPUT = (
    "id", "epoch", "t_us", "run", "deadline_ms", "period_ms", "producer", "duration_us",
    "next_deadline_ms", "kc", "oc", "task_i", "on_complete_i", "on_expire_i",
)  # fmt: skip

#: the events/ columns ``coded`` reads
EVENT_COLUMNS = (
    "id", "epoch", "t_us", "run", "deadline_ms", "period_ms", "producer", "duration_us",
    "next_deadline_ms", "kind", "outcome", "task", "on_complete", "on_expire",
)  # fmt: skip
#: INPUT's fields that only some kinds have: 0 where a record has none
_FIELDS_OF_SOME = ("period_ms", "producer", "duration_us", "next_deadline_ms")
_NAMED = {"task": "task_i", "on_complete": "on_complete_i", "on_expire": "on_expire_i"}

#: the per-run tallies, summed over a timer's runs
RUN_TALLIES = (
    "runs_fired", "outcomes", "early_runs", "twice_runs", "repeats", "lost_runs",
    "in_flight_runs", "outcomes_without_fire", "ok", "error", "crashed",
)  # fmt: skip

#: the types of timer, as the table names them (``_classify``)
TYPES = ("operation", "repeating", "one-shot", "unscheduled")
_ENDS = ("completed", "expired", "cancelled", "ran")

#: the per-timer table: (column, Spark DDL type); strings last
OUTPUT: tuple[tuple[str, str], ...] = (
    *[(c, "bigint") for c in (
        "id", "n_scheduled", "n_watched", "n_cancelled", "n_completed", "n_expired",
        "deadline_ms", "period_ms", "producer", "created_us", "cancel_us", "completed_us",
        "expired_us", "last_fire_us", *RUN_TALLIES, "outcome_epochs", "late_sum_us",
        "late_max_us", "late_min_us", "late_n", "duration_sum_us", "duration_max_us",
        "last_next_deadline_ms", "decisions",
    )],
    ("type", "string"),
    ("end", "string"),
    ("run_task", "string"),
)  # fmt: skip
DDL = ", ".join(f"`{c}` {t}" for c, t in OUTPUT)

_LO, _HI = np.int64(np.iinfo(np.int64).min), np.int64(np.iinfo(np.int64).max)
Col = tuple[np.ndarray, np.ndarray]  # (values, valid)


@dataclass(frozen=True)
class Bounds:
    """What the per-run checks compare against: the journal's end and last epoch, the
    grace at its end, and the task names (``task_i`` is a 1-based index into them)."""

    end_us: int
    final_epoch: int
    grace_us: int
    tasks: tuple[str, ...]

    @classmethod
    def of(cls, secs: Seconds, grace_ms: int) -> Bounds:
        """The bounds of a journal from its per-second figures (``seconds.Seconds``)."""
        return cls(secs.end_us, secs.final_epoch, grace_ms * 1000, secs.tasks)

    def overdue(self, deadline_ms: Any) -> Any:
        """The deadline (ms) is more than the grace before the journal's end: for a numpy
        array (the kernel, the tally) or a Spark column (the rules, ``audit.rules``)."""
        return deadline_ms * 1000 < self.end_us - self.grace_us


class _Groups:
    """Groups of rows: ``of_row[i]`` is row i's group, in [0, groups). Each figure is one
    ``ufunc.at`` over the rows (``reduceat`` over runs of sorted rows costs a call of its
    inner loop per group: 3x the time for groups of three rows, and a gather of every
    column into sorted order before it; docs/performance.md)."""

    def __init__(self, of_row: np.ndarray, groups: int) -> None:
        self.of_row, self.groups = of_row, groups
        self._any: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # by id(mask): mask, any

    @classmethod
    def of_sorted(cls, *keys: np.ndarray) -> tuple[_Groups, np.ndarray]:
        """Groups of rows sorted by `keys` (equal in every key), and each one's first row."""
        n = len(keys[0])
        new = np.zeros(n, bool)
        if n:
            new[0] = True
            for k in keys:
                new[1:] |= k[1:] != k[:-1]
        return cls(np.cumsum(new) - 1, int(new.sum())), np.flatnonzero(new)

    @classmethod
    def of_keys(cls, keys: np.ndarray) -> tuple[_Groups, np.ndarray]:
        """Groups of rows with equal `keys` (in any order), numbered in ascending order of
        their key, and the keys ascending (one sort, which need not be stable: a group is
        a set of rows; ``arg_max`` breaks ties by row position)."""
        order = np.argsort(keys)
        ordered = keys[order]
        new = np.empty(len(keys), bool)
        new[:1] = True
        new[1:] = ordered[1:] != ordered[:-1]
        of_row = np.empty(len(keys), np.intp)
        of_row[order] = np.cumsum(new) - 1
        return cls(of_row, int(new.sum())), ordered[new]

    def _at(self, ufunc: np.ufunc, values: np.ndarray, initial: int | np.integer) -> np.ndarray:
        out = np.full(self.groups, initial, np.int64)
        ufunc.at(out, self.of_row, values.astype(np.int64, copy=False))
        return out

    def count(self, mask: np.ndarray) -> np.ndarray:
        return np.bincount(self.of_row[mask], minlength=self.groups).astype(np.int64)

    def any(self, mask: np.ndarray) -> np.ndarray:
        """Whether each group has a row of `mask` (a new array; the kernel asks again and
        again of the same few masks: kept while the mask is)."""
        got = self._any.get(id(mask))
        if got is None or got[0] is not mask:
            out = np.zeros(self.groups, bool)
            out[self.of_row[mask]] = True
            got = self._any[id(mask)] = (mask, out)
        return got[1].copy()

    def max(self, values: np.ndarray, mask: np.ndarray) -> Col:
        return self._at(np.maximum, np.where(mask, values, _LO), _LO), self.any(mask)

    def min(self, values: np.ndarray, mask: np.ndarray) -> Col:
        return self._at(np.minimum, np.where(mask, values, _HI), _HI), self.any(mask)

    def sum(self, values: np.ndarray, mask: np.ndarray) -> Col:
        return self._at(np.add, np.where(mask, values, 0), 0), self.any(mask)

    def arg_max(self, order: np.ndarray, mask: np.ndarray) -> Col:
        """Per group, the row (a position) of the masked row with the greatest `order`
        (the last such row on a tie), as SQL's max_by picks it."""
        top, has = self.max(order, mask)
        cand = mask & (order == top[self.of_row])
        pos = self._at(np.maximum, np.where(cand, np.arange(len(self.of_row)), -1), -1)
        return np.maximum(pos, 0), has


def _at(values: np.ndarray, pos: Col) -> Col:
    return values[pos[0]], pos[1].copy()


def _run_aggregates(g: _Groups, r: dict[str, np.ndarray]) -> dict[str, Col]:
    """What a run needs: its fires and outcomes (by id, or by (id, run))."""
    fired, outc = r["kc"] == KIND["fired"], r["kc"] == KIND["outcome"]
    last_out = g.arg_max(r["t_us"], outc)
    n_f, n_o = g.count(fired), g.count(outc)
    return {
        "n_fired": (n_f, np.ones_like(n_f, bool)),
        "n_outcome": (n_o, np.ones_like(n_o, bool)),
        "fire_epoch_min": g.min(r["epoch"], fired),
        "fire_epoch_max": g.max(r["epoch"], fired),
        "last_fire_us": g.max(r["t_us"], fired),
        "late_us": g.min(r["t_us"] - r["deadline_ms"] * 1000, fired),
        "out_epoch_min": g.min(r["epoch"], outc),
        "out_epoch_max": g.max(r["epoch"], outc),
        "out_run": g.max(r["run"], outc),
        "result": _at(r["oc"], last_out),
        "duration_us": _at(r["duration_us"], last_out),
        "next_deadline_ms": _at(r["next_deadline_ms"], last_out),
    }


def _run_flags(a: dict[str, Col], b: Bounds) -> dict[str, np.ndarray]:
    """The per-run checks, on the columns of _run_aggregates (0 or 1 each, but repeats)."""
    fires, outs = a["n_fired"][0], a["n_outcome"][0]
    fem, has_fire = a["fire_epoch_max"]
    unanswered = (fires > 0) & (outs == 0)
    in_flight = has_fire & (fem == b.final_epoch) & (a["last_fire_us"][0] > b.end_us - b.grace_us)
    # an earlier epoch recorded the run's outcome and a later one fired it again, or more
    # fire records than epochs they span (two fires in one epoch)
    oem, has_out = a["out_epoch_min"]
    twice = (has_out & has_fire & (oem < fem)) | (
        has_fire & (fires > fem - a["fire_epoch_min"][0] + 1)
    )
    late, has_late = a["late_us"]
    out_run, has_run = a["out_run"]
    result, has_result = a["result"]
    oemax = a["out_epoch_max"][0]

    def is_(v: np.ndarray) -> np.ndarray:
        return v.astype(np.int64)

    return {
        "runs_fired": is_(fires > 0),
        "outcomes": is_(outs > 0),
        "early_runs": is_(has_late & (late < 0)),
        "twice_runs": is_(twice),
        "repeats": np.where(~twice & (fires > 1), fires - 1, 0),
        "lost_runs": is_(unanswered & ~in_flight),
        "in_flight_runs": is_(unanswered & in_flight),
        "outcomes_without_fire": is_(has_run & (out_run > 0) & (fires == 0) & (outs > 0)),
        "outcome_epochs": np.where(has_out, oemax - oem + 1, 0),
        "ok": is_(has_result & (result == OUTCOME["ok"])),
        "error": is_(has_result & (result == OUTCOME["error"])),
        "crashed": is_(has_result & (result == OUTCOME["crashed"])),
    }


def _ones(n: int) -> np.ndarray:
    return np.ones(n, bool)


def _multi_runs(r: dict[str, np.ndarray], b: Bounds) -> tuple[np.ndarray, dict[str, Col]]:
    """The ids of `r` (rows of several-run ids' fires and outcomes) and their figures
    summed over their runs."""
    order = np.lexsort((r["run"], r["id"]))
    r = {k: v[order] for k, v in r.items()}
    runs, first = _Groups.of_sorted(r["id"], r["run"])
    agg = _run_aggregates(runs, r)
    flags = _run_flags(agg, b)
    run_id = r["id"][first]
    run_no = r["run"][first]
    ids, id_first = _Groups.of_sorted(run_id)
    every = _ones(len(run_id))
    out: dict[str, Col] = {c: ids.sum(flags[c], every) for c in RUN_TALLIES}
    out["outcome_epochs"] = ids.max(flags["outcome_epochs"], every)
    late, has_late = agg["late_us"]
    out["late_sum_us"] = ids.sum(late, has_late)
    out["late_max_us"] = ids.max(late, has_late)
    out["late_min_us"] = ids.min(late, has_late)
    out["late_n"] = (ids.count(has_late), _ones(ids.groups))
    dur, has_dur = agg["duration_us"]
    out["duration_sum_us"] = ids.sum(dur, has_dur)
    out["duration_max_us"] = ids.max(dur, has_dur)
    answered = agg["n_outcome"][0] > 0
    last = ids.arg_max(run_no, answered)
    ndl, has_ndl = agg["next_deadline_ms"]
    out["last_next_deadline_ms"] = (ndl[last[0]], last[1] & has_ndl[last[0]])
    return run_id[id_first], out


def per_timer_table(records: pa.Table, bounds: Bounds) -> pa.Table:
    """The per-timer table (``OUTPUT``) of `records` (``INPUT`` columns; every record of
    an id must be among them)."""
    # int64 throughout (numpy keeps an int32 array's type against a Python int)
    r = {c: asnumpy.ints(records.column(c), -1 if c in ("kc", "oc") else 0) for c in INPUT}
    if len(r["id"]) == 0:
        return empty()
    # the rows stay in their order: each figure gathers by group (_Groups)
    g, ids = _Groups.of_keys(r["id"])
    kc = r["kc"]
    is_ = {k: kc == code for k, code in KIND.items()}
    made = is_["scheduled"] | is_["watched"]
    every = _ones(g.groups)
    t: dict[str, Col] = {"id": (ids, every)}
    for k in ("scheduled", "watched", "cancelled", "completed", "expired"):
        t[f"n_{k}"] = (g.count(is_[k]), every)
    t["deadline_ms"] = g.max(r["deadline_ms"], made)
    t["period_ms"] = g.max(r["period_ms"], is_["scheduled"])
    t["producer"] = g.max(r["producer"], is_["scheduled"] & (r["producer"] > 0))
    t["created_us"] = g.min(r["t_us"], made)
    for k, c in (("cancelled", "cancel_us"), ("completed", "completed_us"),
                 ("expired", "expired_us")):  # fmt: skip
        t[c] = g.min(r["t_us"], is_[k])
    agg = _run_aggregates(g, r)
    t["last_fire_us"] = agg["last_fire_us"]
    flags = _run_flags(agg, bounds)
    for c in (*RUN_TALLIES, "outcome_epochs"):
        t[c] = (flags[c], every)
    t["late_sum_us"] = t["late_max_us"] = t["late_min_us"] = agg["late_us"]
    t["late_n"] = (agg["late_us"][1].astype(np.int64), every)
    t["duration_sum_us"] = t["duration_max_us"] = agg["duration_us"]
    ndl, has = agg["next_deadline_ms"]
    t["last_next_deadline_ms"] = (ndl, has & (agg["n_outcome"][0] > 0))

    multi = (agg["n_fired"][0] > 1) | (agg["n_outcome"][0] > 1)
    if multi.any():
        rows = multi[g.of_row] & (is_["fired"] | is_["outcome"])
        several, m = _multi_runs({k: v[rows] for k, v in r.items()}, bounds)
        at = np.searchsorted(t["id"][0], several)
        for c, (v, valid) in m.items():
            tv, tvalid = t[c][0].copy(), t[c][1].copy()
            tv[at], tvalid[at] = v, valid
            t[c] = (tv, tvalid)

    names = {
        "task_i": g.max(r["task_i"], is_["scheduled"]),
        "on_complete_i": g.max(r["on_complete_i"], is_["watched"]),
        "on_expire_i": g.max(r["on_expire_i"], is_["watched"]),
    }
    return _classify(t, names, bounds)


#: the name index a timer's runs ran, by how it ended: completed, expired, neither (a timer)
_TASK_OF = ("on_complete_i", "on_expire_i", "task_i")


def _classify(t: dict[str, Col], names: dict[str, Col], b: Bounds) -> pa.Table:
    """Type, decisions, how it ended and the task its runs ran."""
    op = t["n_watched"][0] > 0
    period, has_period = t["period_ms"]
    sched = t["n_scheduled"][0] > 0
    typ = np.select([op, has_period & (period > 0), sched], [0, 1, 2], 3)
    ran, cancelled = t["runs_fired"][0] > 0, t["n_cancelled"][0] > 0
    completed, expired = t["n_completed"][0] > 0, t["n_expired"][0] > 0
    decisions = np.where(
        op, completed.astype(np.int64) + expired + cancelled, ran.astype(np.int64) + cancelled
    )
    end = np.select([op & completed, op & expired, cancelled, ran], [0, 1, 2, 3], -1)
    task, has_task = (
        np.select([op & completed, op & expired, ~op], [names[c][0] for c in _TASK_OF], 0),
        np.select([op & completed, op & expired, ~op], [names[c][1] for c in _TASK_OF], False),
    )
    has_task &= (task > 0) & (task <= len(b.tasks))
    cols: dict[str, pa.Array] = {}
    for c, typ_ddl in OUTPUT:
        if typ_ddl == "bigint":
            v, valid = (decisions, _ones(len(op))) if c == "decisions" else t[c]
            cols[c] = pa.array(v.astype(np.int64), mask=None if valid.all() else ~valid)
    cols["type"] = _strings(typ, TYPES)
    cols["end"] = _strings(end, _ENDS)
    cols["run_task"] = _strings(np.where(has_task, task - 1, -1), b.tasks)
    return pa.table(cols)


def _strings(index: np.ndarray, names: Sequence[str]) -> pa.Array:
    """names[index] as strings; null where index < 0."""
    valid = index >= 0
    idx = pa.array(np.where(valid, index, 0).astype(np.int32), mask=~valid)
    return pa.DictionaryArray.from_arrays(idx, pa.array(list(names) or [""], pa.string())).cast(
        pa.string()
    )


def per_timer_of(events: pa.Table, bounds: Bounds) -> pa.Table:
    """The per-timer table of a table of events (``EVENT_COLUMNS`` of events/; all of
    each id's records)."""
    if events.num_rows == 0:
        return empty()
    return per_timer_table(coded(events, bounds.tasks), bounds)


def coded(events: pa.Table, tasks: Sequence[str]) -> pa.Table:
    """The ``INPUT`` columns of a table of events (``EVENT_COLUMNS``): kinds and outcomes
    as the journal's codes (an unknown outcome is -1, no outcome), task names as 1-based
    indexes into `tasks` (0: none, or a name not among them), the fields of some kinds
    0 where a record has none. Rows of no known kind (rejects) are left out."""
    kind_names = list(KIND)
    kind_at = asnumpy.index_in(events.column("kind"), kind_names)
    known = kind_at >= 0
    if not known.all():
        events, kind_at = events.filter(pa.array(known)), kind_at[known]
    codes = np.array([KIND[k] for k in kind_names], np.int64)
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        c: events.column(c) for c in ("id", "epoch", "t_us", "run", "deadline_ms")
    }
    cols["kc"] = pa.array(codes[kind_at])
    oc_names = list(OUTCOME)
    oc_codes = np.array([*[OUTCOME[o] for o in oc_names], -1], np.int64)  # [-1]: none
    cols["oc"] = pa.array(oc_codes[asnumpy.index_in(events.column("outcome"), oc_names)])
    for name, col in _NAMED.items():
        cols[col] = pa.array(asnumpy.index_in(events.column(name), tasks) + 1)
    for c in _FIELDS_OF_SOME:
        cols[c] = pc.fill_null(events.column(c).cast(pa.int64()), 0)
    return pa.table({c: cols[c] for c in INPUT})


def empty() -> pa.Table:
    """A per-timer table with no row."""
    return pa.table({c: pa.array([], pa.int64() if t == "bigint" else pa.string())
                     for c, t in OUTPUT})  # fmt: skip
