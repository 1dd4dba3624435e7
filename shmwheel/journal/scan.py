"""Step 2 of whole-service recovery (``recover/recovery.py``): what a journal's records say is
pending. One pass reads every segment (``check.inspect``, which also judges each file's
damage and the chains); each segment's records give a ``Part`` here, and ``combine``
works out, from the parts of the segments that count, which timers and operations have
no final outcome, each at its next run's deadline.

A timer is done once it has a CANCELLED, a COMPLETED/EXPIRED, or an OUTCOME with
``next_deadline_ms == -1``. Every other scheduled timer is pending, at its next run: the
one after its latest OUTCOME, or — if a run was FIRED and has no outcome — that run
again. Columnar: each segment's records are numpy rows, and the per-timer decisions are
array operations (1 M pending timers in about a second).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..segment import contract as C
from . import format as F
from .reader import Reject, Segment

# columns of a WATCHED reader row: field k is column 3 + k (format.FIELDS)
# the scanner's columns (reader.Segment.rows) of a WATCHED record's fields
_ID, _DL, _REQ, _NKEYS, _ONC, _ONE = (
    F.scan_column(F.WATCHED, f)
    for f in ("id", "deadline_ms", "required", "keys", "on_complete", "on_expire")
)
_BLOB_OFF, _BLOB_LEN = C.SCAN_BLOB_AT, C.SCAN_BLOB_LEN


@dataclass
class PendingOps:
    """The operations a journal holds undecided: id -> (deadline, required, on_complete
    name or None, on_expire name or None, blob)."""

    ops: dict[int, tuple[int, int, str | None, str | None, bytes]] = field(default_factory=dict)
    decided: set[int] = field(default_factory=set)

    def collect(self, rows: np.ndarray, data: bytes, tasks: list[str], off_ms: int) -> None:
        """Take one segment's WATCHED rows and its decisions (rows from reader.Segment)."""
        kind = rows[:, C.SCAN_KIND]
        w = rows[kind == F.WATCHED]

        def name(t: int) -> str | None:
            return tasks[t] if 0 <= t < len(tasks) else None

        for r in w.tolist():  # operations are few next to timers: one at a time is fine
            blob = data[r[_BLOB_OFF] : r[_BLOB_OFF] + r[_BLOB_LEN]]
            self.ops[r[_ID]] = (r[_DL] + off_ms, r[_REQ], name(r[_ONC]), name(r[_ONE]), blob)
        ends = (kind == F.COMPLETED) | (kind == F.EXPIRED) | (kind == F.CANCELLED)
        self.decided.update(rows[ends, _ID].tolist())

    def max_gen(self) -> int:
        return max((int(C.handle_gen(i)) for i in self.ops), default=-1)

    def pending(self) -> dict[int, tuple[int, int, str | None, str | None, bytes]]:
        return {i: v for i, v in self.ops.items() if i not in self.decided}


@dataclass
class Pending:
    """The timers a journal holds without a final outcome, as parallel arrays; `words` is
    the payload word of a blob of at most INLINE_MAX bytes (one-shots), `blobs` holds the
    others' bytes by index."""

    ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    deadlines: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    tasks: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # into names
    flags: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    periods: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    runs: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    words: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    blobs: dict[int, bytes] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # task names

    def blob(self, i: int) -> bytes:
        """The payload bytes of pending timer `i` as its SCHEDULED record holds them."""
        if i in self.blobs:
            return self.blobs[i]
        n = int(self.lengths[i])
        return int(self.words[i]).to_bytes(8, "little", signed=True)[:n]


@dataclass
class JournalState:
    epoch: int = 0  # the latest epoch found (0: an empty journal)
    next_gen: int = 0  # every slot's generation starts here in the next epoch
    pending: Pending = field(default_factory=Pending)
    ops: PendingOps = field(default_factory=PendingOps)  # the purgatory's operations
    rejects: list[Reject] = field(default_factory=list)
    records: int = 0
    timers: int = 0  # distinct ids scheduled
    segments: int = 0


def clock_offset_ms(header: dict[str, Any], boot: str) -> int:
    """What to add to a deadline recorded under `header` to make it a deadline of this
    boot's monotonic clock (0 on the same boot: the clock is the same)."""
    if header["boot_id"] == boot and boot:
        return 0
    mono_us, wall_us = F.clock_pair_us()
    return int(header["wall_us"] - header["mono_us"]) // 1000 - (wall_us - mono_us) // 1000


# columns of a reader row (reader.Segment.rows): field k of a record is column 3 + k
# the scanner's columns (reader.Segment.rows) of the fields read here
_ID = F.scan_column(F.SCHEDULED, "id")  # (every kind's first field)
_RUN_S, _DL_S = F.scan_column(F.SCHEDULED, "run"), F.scan_column(F.SCHEDULED, "deadline_ms")
_TASK, _FLAGS = F.scan_column(F.SCHEDULED, "task"), F.scan_column(F.SCHEDULED, "flags")
_PERIOD = F.scan_column(F.SCHEDULED, "period_ms")
_RUN_O, _NEXT_O = F.scan_column(F.OUTCOME, "run"), F.scan_column(F.OUTCOME, "next_deadline_ms")
_RUN_F, _DL_F = F.scan_column(F.FIRED, "run"), F.scan_column(F.FIRED, "deadline_ms")
_BLOB_OFF, _BLOB_LEN, _WORD = C.SCAN_BLOB_AT, C.SCAN_BLOB_LEN, C.SCAN_WORD
# A part's tables (collect builds them, combine reads them): its schedules, one row each
(SCHED_ID, SCHED_RUN, SCHED_DEADLINE, SCHED_TASK, SCHED_FLAGS, SCHED_PERIOD, SCHED_LEN,
 SCHED_WORD, SCHED_BLOB, SCHED_ORDER, SCHED_COLUMNS) = range(11)  # fmt: skip
# ... and the progress of runs: an OUTCOME's next deadline, a FIRED record's deadline
PROG_ID, PROG_RUN, PROG_DEADLINE, PROG_FIRED, PROG_COLUMNS = range(5)
_EMPTY_PROG = np.empty((0, PROG_COLUMNS), np.int64)


@dataclass
class Part:
    """What one segment's records contribute: its schedules (id, run, deadline, task
    index into `tasks`, flags, period, blob length, payload word, blob index into `blobs`
    or -1), its progress (id, run, deadline, 1 for a FIRED run / 0 for the next run an
    OUTCOME names), the ids it ends, its operations."""

    order: int  # the segment's place in the journal (names sort by creation)
    records: int
    max_gen: int
    tasks: list[str]
    sched: np.ndarray
    blobs: list[bytes]
    prog: list[np.ndarray]
    done: list[np.ndarray]
    ops: PendingOps


def collect(seg: Segment, order: int, boot: str) -> Part | None:
    """One segment's part (None for a segment without a header: its records cannot be
    read as timers, their task names and clock being unknown)."""
    h, rows = seg.header, seg.rows
    if h is None:
        return None
    off = clock_offset_ms(h, boot)
    ops = PendingOps()
    ops.collect(rows, seg.data, list(h["tasks"]), off)
    kind = rows[:, C.SCAN_KIND]
    s = rows[kind == F.SCHEDULED]
    blobs: list[bytes] = []
    if len(s):
        inline = (s[:, _BLOB_LEN] <= C.INLINE_MAX) & (s[:, _PERIOD] <= 0)
        words = np.where(inline, s[:, _WORD], 0)  # the scanner read them
        ref = np.where(inline, -1, np.cumsum(~inline) - 1)
        at, n = s[~inline, _BLOB_OFF].tolist(), s[~inline, _BLOB_LEN].tolist()
        blobs = [seg.data[o : o + k] for o, k in zip(at, n, strict=True)]
        ntasks = len(h["tasks"])
        sched = np.column_stack(
            [  # in SCHED_* order
                s[:, _ID],
                s[:, _RUN_S],
                s[:, _DL_S] + off,
                np.where((s[:, _TASK] >= 0) & (s[:, _TASK] < ntasks), s[:, _TASK], -1),
                s[:, _FLAGS],
                s[:, _PERIOD],
                s[:, _BLOB_LEN],
                words,
                ref,
                np.full(len(s), order),
            ]
        )
    else:
        sched = np.empty((0, SCHED_COLUMNS), np.int64)
    o = rows[kind == F.OUTCOME]
    final = o[:, _NEXT_O] < 0
    f = rows[kind == F.FIRED]
    return Part(
        order=order,
        records=len(rows),
        max_gen=int(h["next_gen"]) - 1,
        tasks=list(h["tasks"]),
        sched=sched,
        blobs=blobs,
        prog=[
            np.column_stack(
                [  # in PROG_* order
                    o[~final, _ID],
                    o[~final, _RUN_O] + 1,
                    o[~final, _NEXT_O] + off,
                    0 * o[~final, _ID],
                ]
            ),
            np.column_stack([f[:, _ID], f[:, _RUN_F], f[:, _DL_F] + off, 1 + 0 * f[:, _ID]]),
        ],
        done=[
            rows[(kind == F.CANCELLED) | (kind == F.COMPLETED) | (kind == F.EXPIRED), _ID],
            o[final, _ID],
        ],
        ops=ops,
    )


def combine(parts: Sequence[Part], st: JournalState, directory: str, max_gen: int = -1) -> None:
    """Work out the pending timers and operations of the records of `parts` into `st`
    (its pending, ops, timers, next_gen; rejects for what cannot be re-armed). `max_gen`:
    the highest generation seen elsewhere (segments whose records do not count)."""
    names: dict[str, int] = {}
    sched: list[np.ndarray] = []
    blobs: list[bytes] = []
    ops = PendingOps()
    for part in parts:
        max_gen = max(max_gen, part.max_gen)
        ops.ops.update(part.ops.ops)
        ops.decided.update(part.ops.decided)
        if not len(part.sched):
            continue
        tmap = np.array([names.setdefault(t, len(names)) for t in part.tasks] + [-1], np.int64)
        s = part.sched.copy()
        s[:, SCHED_TASK] = tmap[s[:, SCHED_TASK]]  # -1 (unknown) indexes the map's last, -1
        s[:, SCHED_BLOB] = np.where(s[:, SCHED_BLOB] >= 0, s[:, SCHED_BLOB] + len(blobs), -1)
        blobs.extend(part.blobs)
        sched.append(s)
    st.ops = ops
    st.pending = Pending(names=list(names))
    max_gen = max(max_gen, ops.max_gen())
    if not sched:
        st.next_gen = max(st.next_gen, max_gen + 1)
        return
    S = np.concatenate(sched)
    # the latest schedule of each id (highest run, then latest segment)
    S = S[np.lexsort((S[:, SCHED_ORDER], S[:, SCHED_RUN], S[:, SCHED_ID]))]
    S = S[np.r_[S[1:, SCHED_ID] != S[:-1, SCHED_ID], True]]
    st.timers = len(S)
    st.next_gen = max(st.next_gen, max_gen + 1, int(C.handle_gen(S[:, SCHED_ID]).max()) + 1)
    done = np.concatenate([d for part in parts for d in part.done] or [np.empty(0, np.int64)])
    S = S[~np.isin(S[:, SCHED_ID], done)]
    unknown = S[:, SCHED_TASK] < 0
    for tid in S[unknown, SCHED_ID].tolist():
        st.rejects.append(
            Reject(
                directory, 0, f"timer {tid:#x} names a task id its segment's header does not list"
            )
        )
    S = S[~unknown]
    # two pending ids in one slot: the newer generation proves the older was freed (its
    # final record is missing: a journal that lost a record). Keep the newer.
    slot_of = C.handle_slot(S[:, SCHED_ID])
    order = np.lexsort((C.handle_gen(S[:, SCHED_ID]), slot_of))
    S, slot_of = S[order], slot_of[order]
    newest = np.r_[slot_of[1:] != slot_of[:-1], True][: len(S)]
    for tid in S[~newest, SCHED_ID].tolist():
        st.rejects.append(
            Reject(
                directory,
                0,
                f"timer {tid:#x} has no final record but its slot was used again: not re-armed",
            )
        )
    S = S[newest]
    P = np.concatenate([x for part in parts for x in part.prog] or [_EMPTY_PROG])
    if len(P) and len(S):  # the furthest run of each id, if it is past its schedule's
        # At one run, a FIRED record says the deadline that run fired at; a SCHEDULED
        # record of that run (a reset's, a carried one's: written once the run was armed)
        # is newer than the OUTCOME that armed it, so it wins over that OUTCOME's next.
        P = P[np.lexsort((P[:, PROG_FIRED], P[:, PROG_RUN], P[:, PROG_ID]))]
        P = P[np.r_[P[1:, PROG_ID] != P[:-1, PROG_ID], True]]
        at = np.clip(np.searchsorted(P[:, PROG_ID], S[:, SCHED_ID]), 0, len(P) - 1)
        run, fired = P[at, PROG_RUN], P[at, PROG_FIRED] == 1
        now = S[:, SCHED_RUN]
        later = (P[at, PROG_ID] == S[:, SCHED_ID]) & ((run > now) | ((run == now) & fired))
        S[later, SCHED_RUN] = P[at[later], PROG_RUN]
        S[later, SCHED_DEADLINE] = P[at[later], PROG_DEADLINE]
    p = st.pending
    p.ids, p.runs = S[:, SCHED_ID], S[:, SCHED_RUN]
    p.deadlines, p.tasks = S[:, SCHED_DEADLINE], S[:, SCHED_TASK]
    p.flags = S[:, SCHED_FLAGS] & (F.FLAG_KEY | F.FLAG_REPEAT)
    p.periods, p.lengths, p.words = S[:, SCHED_PERIOD], S[:, SCHED_LEN], S[:, SCHED_WORD]
    refs = np.flatnonzero(S[:, SCHED_BLOB] >= 0)
    at_blob = S[refs, SCHED_BLOB].tolist()
    p.blobs = {i: blobs[r] for i, r in zip(refs.tolist(), at_blob, strict=True)}
