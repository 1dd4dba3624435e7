"""The per-second figures of the journal (throughput, lateness) and its extent, computed by
the tasks that decode it and added up in the driver.

Theory of operation. Every figure here is a sum, a maximum or a minimum per second of wall
time, or a histogram of lateness (``histogram.py``): all of them add up across disjoint
sets of records. So the task that decodes a segment, which holds its records in memory
anyway, reduces them to a ``Seconds`` (``of_events``: a few hundred bytes per second of
the segment), ships it back in its one output row (``to_bytes``), and the driver adds the
segments' ``Seconds`` (``merge``). Spark never sees a record for these figures: its
aggregation of every event by second (with ``percentile_approx``) was the audit's scope
stage, 7.9 s of a 35.2 s audit of 10.1 M records (docs/performance.md).

A record whose segment has no wall-clock anchor (no header) is counted in the totals and
the overall lateness, under the second ``NO_WALL``, which no per-second table shows.
Rejects have no time: they are counted apart (``rejects``).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa

from . import asnumpy, histogram

#: the kinds of record counted per second, in this order
KINDS = ("scheduled", "fired", "outcome", "cancelled", "watched", "completed", "expired")
#: the event columns ``of_events`` reads
COLUMNS = ("epoch", "kind", "t_us", "wall_us", "deadline_ms", "outcome", "task",
           "on_complete", "on_expire")  # fmt: skip
QUANTILES = (0.5, 0.9, 0.99, 0.999)
#: the name of each quantile's figure: p50, p90, p99, p999
QNAMES = ("p50", "p90", "p99", "p999")
#: the second of records with no wall time
NO_WALL = int(np.iinfo(np.int64).min)
_FAILED = len(KINDS)  # the column of ``counts`` counting outcomes other than ok
_LO = NO_WALL
_US = 1_000_000


@dataclass
class Seconds:
    """Figures per second of wall time (``second`` sorted, no repeats; row i of every
    per-second array is ``second[i]``), the histogram of lateness per second as sparse
    cells (``hist_*``, sorted by second then code), and the extent of the records."""

    second: np.ndarray  # int64 [S]: seconds since 1970 (NO_WALL: no wall time)
    counts: np.ndarray  # int64 [S, len(KINDS) + 1]: records of each kind, failed outcomes
    late_max: np.ndarray  # int64 [S]: the greatest lateness (us) of a fire; _LO if none
    hist_second: np.ndarray  # int64 [H]
    hist_code: np.ndarray  # int64 [H]: histogram.code of the lateness in us
    hist_n: np.ndarray  # int64 [H]: fires in the cell, > 0
    late_min: int  # the least lateness (us) of any fire; 0 if none
    start_us: int  # the earliest and latest record's t_us, and the greatest epoch; 0 if
    end_us: int  # there is no record
    final_epoch: int
    rejects: int
    tasks: tuple[str, ...]  # task names the records name, sorted

    @classmethod
    def of_events(cls, events: pa.Table | pa.RecordBatch) -> Seconds:
        """The figures of a table of events (``COLUMNS`` at least; kinds and names plain
        or dictionary-encoded strings; rows of kind "reject" counted as rejects)."""
        kind = asnumpy.index_in(events.column("kind"), (*KINDS, "reject"))
        rec = (kind >= 0) & (kind < len(KINDS))
        rejects = int((kind == len(KINDS)).sum())
        t_us = asnumpy.ints(events.column("t_us"))
        wall = events.column("wall_us")
        has_wall = asnumpy.valid(wall)
        sec = np.where(has_wall, np.floor_divide(asnumpy.ints(wall), _US), NO_WALL)
        failed = rec & (kind == KINDS.index("outcome"))
        failed &= ~asnumpy.among(events.column("outcome"), "ok")
        fired = rec & (kind == KINDS.index("fired")) & asnumpy.valid(events.column("deadline_ms"))
        late = t_us[fired] - asnumpy.ints(events.column("deadline_ms"))[fired] * 1000
        second, idx = _index(sec[rec])
        width = len(KINDS) + 1
        cells = np.concatenate([idx * width + kind[rec], idx[failed[rec]] * width + _FAILED])
        counts = np.bincount(cells, minlength=len(second) * width).reshape(-1, width)
        f_idx = idx[fired[rec]]
        late_max = np.full(len(second), _LO, np.int64)
        np.maximum.at(late_max, f_idx, late)
        hs, hc, hn = _cells(f_idx, histogram.code(late))
        epochs = asnumpy.ints(events.column("epoch"))[rec]
        return cls(
            second=second, counts=counts.astype(np.int64), late_max=late_max,
            hist_second=second[hs], hist_code=hc, hist_n=hn,
            late_min=int(late.min()) if len(late) else 0,
            start_us=int(t_us[rec].min()) if rec.any() else 0,
            end_us=int(t_us[rec].max()) if rec.any() else 0,
            final_epoch=int(epochs.max()) if len(epochs) else 0, rejects=rejects,
            tasks=tuple(sorted(set().union(*(asnumpy.strings(events.column(c)) for c in
                                              ("task", "on_complete", "on_expire"))))),
        )  # fmt: skip

    @classmethod
    def merge(cls, parts: Iterable[Seconds]) -> Seconds:
        """The figures of the union of disjoint sets of records."""
        ps = list(parts)
        if not ps:
            return cls.empty()
        second, idx = _index(np.concatenate([p.second for p in ps]))
        counts = np.zeros((len(second), len(KINDS) + 1), np.int64)
        np.add.at(counts, idx, np.concatenate([p.counts for p in ps]))
        late_max = np.full(len(second), _LO, np.int64)
        np.maximum.at(late_max, idx, np.concatenate([p.late_max for p in ps]))
        _, h_idx = _index(np.concatenate([p.hist_second for p in ps]), second)
        hs, hc, hn = _cells(h_idx, np.concatenate([p.hist_code for p in ps]),
                            np.concatenate([p.hist_n for p in ps]))  # fmt: skip
        real = [p for p in ps if p.counts[:, : len(KINDS)].any()]
        fires = [p for p in ps if len(p.hist_n)]
        return cls(
            second=second, counts=counts, late_max=late_max, hist_second=second[hs],
            hist_code=hc, hist_n=hn,
            late_min=min((p.late_min for p in fires), default=0),
            start_us=min((p.start_us for p in real), default=0),
            end_us=max((p.end_us for p in real), default=0),
            final_epoch=max((p.final_epoch for p in real), default=0),
            rejects=sum(p.rejects for p in ps),
            tasks=tuple(sorted(set().union(*(p.tasks for p in ps)))),
        )  # fmt: skip

    @classmethod
    def empty(cls) -> Seconds:
        """The figures of no record."""
        z = np.zeros(0, np.int64)
        return cls(second=z, counts=np.zeros((0, len(KINDS) + 1), np.int64), late_max=z,
                   hist_second=z, hist_code=z, hist_n=z, late_min=0, start_us=0, end_us=0,
                   final_epoch=0, rejects=0, tasks=())  # fmt: skip

    def to_bytes(self) -> bytes:
        """A compressed .npz of the fields (no pickles: ``from_bytes`` reads it back
        safely). Compressed because a segment of sparse records spans many seconds of
        mostly zero counts: 500,000 seconds of two fires each made 64 MB plain, 5.0 MB
        compressed (1.1 s); a segment of the 10 M journal, 11 kB in 2.6 ms."""
        buf = io.BytesIO()
        arrays: dict[str, Any] = {f.name: np.asarray(getattr(self, f.name)) for f in fields(self)}
        arrays["tasks"] = np.array(self.tasks, dtype=str)
        np.savez_compressed(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Seconds:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            got: dict[str, Any] = {f.name: z[f.name] for f in fields(cls)}
        for name in ("late_min", "start_us", "end_us", "final_epoch", "rejects"):
            got[name] = int(got[name])
        got["tasks"] = tuple(str(t) for t in got["tasks"])
        return cls(**got)

    def kinds(self) -> dict[str, int]:
        """Records of each kind, and rejects (``"reject"``)."""
        totals = self.counts.sum(axis=0)
        return {**{k: int(totals[i]) for i, k in enumerate(KINDS)}, "reject": self.rejects}

    def throughput(self) -> pa.Table:
        """throughput/: per second (``window``, a UTC timestamp), the records of each kind
        and the failed outcomes (``task_failures``)."""
        m = self.second != NO_WALL
        cols = {"window": _windows(self.second[m])}
        cols.update({k: pa.array(self.counts[m, i]) for i, k in enumerate(KINDS)})
        cols["task_failures"] = pa.array(self.counts[m, _FAILED])
        return pa.table(cols)

    def lateness(self) -> pa.Table:
        """lateness/: per second with fires, their number, the quantiles and the max (ms)."""
        fired = self.counts[:, KINDS.index("fired")]
        keep = np.flatnonzero((self.second != NO_WALL) & (self.late_max != _LO))
        starts = np.searchsorted(self.hist_second, self.second[keep], side="left")
        least = histogram.bounds(self.hist_code[starts])[0]  # each second's least fire's bin
        qs = histogram.grouped_quantiles(self.hist_code, self.hist_n, starts, list(QUANTILES),
                                 least, self.late_max[keep])  # fmt: skip
        cols: dict[str, Any] = {"window": _windows(self.second[keep]),
                                "fired": pa.array(fired[keep])}  # fmt: skip
        for j, name in enumerate(QNAMES):
            cols[f"{name}_ms"] = pa.array(qs[:, j] / 1000, pa.float64())
        cols["max_ms"] = pa.array(self.late_max[keep] / 1000, pa.float64())
        return pa.table(cols)

    def overall(self, points: int = 200) -> dict[str, Any]:
        """The lateness of every fire: their number, the quantiles, max and min (ms), and
        a CDF of about `points` points ([q, ms] pairs)."""
        fires = int(self.hist_n.sum())
        hi = int(self.late_max.max()) if fires else 0
        grid = sorted({*(i / points for i in range(1, points)), 0.999, 0.9999, *QUANTILES})
        order = np.argsort(self.hist_code, kind="stable")
        code, start = np.unique(self.hist_code[order], return_index=True)
        n = np.add.reduceat(self.hist_n[order], start) if len(order) else self.hist_n
        values = histogram.quantiles(code, n, grid, self.late_min, hi) if fires else []
        at = dict(zip(grid, values, strict=False))
        return {
            "fires": fires,
            **{f"{nm}_ms": asnumpy.ms(at.get(q)) for q, nm in zip(QUANTILES, QNAMES, strict=True)},
            "max_ms": hi / 1000 if fires else None,
            "min_ms": self.late_min / 1000 if fires else None,
            "cdf": [[q, v / 1000] for q, v in zip(grid, values, strict=False)],
        }


def _windows(second: np.ndarray) -> pa.Array:
    return pa.array(second * _US, pa.timestamp("us", tz="UTC"))


def _index(values: np.ndarray, keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the sorted distinct values, or `keys` when given, holding them all; each value's
    position in them). Seconds span little: a count over their range when it is small,
    a sort otherwise."""
    if keys is not None:
        return keys, np.searchsorted(keys, values)
    if len(values) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    real = values[values != NO_WALL]
    lo = int(real.min()) if len(real) else 0
    span = int(real.max()) - lo + 2 if len(real) else 1
    if span > 4 * len(values) + 4096:
        u, inv = np.unique(values, return_inverse=True)
        return u.astype(np.int64), inv.astype(np.int64)
    slot = np.where(values == NO_WALL, 0, values - lo + 1)  # slot 0: no wall time
    present = np.bincount(slot, minlength=span) > 0
    keys = np.flatnonzero(present).astype(np.int64)
    pos = np.cumsum(present) - 1
    return np.where(keys == 0, NO_WALL, keys + lo - 1), pos[slot]


def _cells(
    group: np.ndarray, code: np.ndarray, n: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The histogram cells (group, code, count) of the values coded `code` in groups
    `group` (each with weight `n`, or 1), sorted by group then code, no empty cell."""
    if len(code) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    c0 = int(code.min())
    width = int(code.max()) - c0 + 1
    key = group * width + (code - c0)
    groups = int(group.max()) + 1
    if groups * width <= 4 * len(code) + (1 << 20):
        counts = np.bincount(key, weights=n, minlength=groups * width).astype(np.int64)
        cell = np.flatnonzero(counts)
        counts = counts[cell]
    else:
        cell, inv = np.unique(key, return_inverse=True)
        counts = np.bincount(inv, weights=n).astype(np.int64)
    return cell // width, cell % width + c0, counts
