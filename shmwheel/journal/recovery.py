"""Whole-service recovery from a journal (docs/journal.md, "Recovery").

``TimerService(journal=DIR).start()`` runs, in order:

1. ``salvage`` (``salvage.py``): if the dead service's segment is still in /dev/shm
   (its processes were killed, the machine did not reboot), record what its memory
   knows and its journal does not yet: schedules still in its clients' rings, cancels
   that won but whose records were not drained, outcomes in its result rings. Then
   unlink it.
2. ``scan``: read every segment and work out each timer's state: the timers with no
   final outcome (not cancelled, not a one-shot's outcome, not a repeating timer's last)
   are pending, each at its next run's deadline.
3. ``install``: write the pending timers into the new segment, each in the slot and
   generation its id names (so ids survive the restart), and start every other slot's
   generation above any id the journal holds.
4. ``compact``: record the re-armed timers in a new segment of the new epoch, so that
   the segments of earlier epochs are no longer needed; delete those (or keep them for
   ``keep_hours``).

A timer that was dispatched but has no recorded outcome runs again: the window is the
time between a task's end and the reaper recording its outcome.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ShmwheelError
from ..segment import contract as C
from ..segment import layout as L
from . import format as F
from .operations import PendingOps, install_ops
from .reader import Reject, read_header, read_segment
from .retention import anchor_installed
from .salvage import salvage
from .writer import JournalOptions, SegmentWriter, claim

log = logging.getLogger("shmwheel.journal")

NO_RING = 0x7FFF  # a re-armed timer belongs to no client's ring (max_clients <= 4096)


class RecoveryError(ShmwheelError):
    """The journal cannot be recovered into this service (its configuration differs)."""


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


@dataclass
class JournalState:
    epoch: int = 0  # the latest epoch found (0: an empty journal)
    next_gen: int = 0  # every slot's generation starts here in the next epoch
    pending: Pending = field(default_factory=Pending)
    ops: PendingOps = field(default_factory=PendingOps)  # the purgatory's (operations.py)
    rejects: list[Reject] = field(default_factory=list)
    records: int = 0
    timers: int = 0  # distinct ids scheduled
    segments: int = 0


def _clock_offset_ms(header: dict[str, Any], boot: str) -> int:
    """What to add to a deadline recorded under `header` to make it a deadline of this
    boot's monotonic clock (0 on the same boot: the clock is the same)."""
    if header["boot_id"] == boot and boot:
        return 0
    mono_us, wall_us = F.clock_pair_us()
    return int(header["wall_us"] - header["mono_us"]) // 1000 - (wall_us - mono_us) // 1000


# columns of a reader row (reader.Segment.rows): field k of a record is column 3 + k
_ID, _RUN_S, _DL_S, _TASK, _FLAGS, _PERIOD = 3, 10, 5, 6, 8, 9  # scheduled
_RUN_O, _NEXT_O = 5, 8  # outcome
_RUN_F, _DL_F = 5, 6  # fired
_BLOB_OFF, _BLOB_LEN, _WORD = 11, 12, 13


def scan(directory: str) -> JournalState:
    """Every segment of the journal read; the pending timers worked out (module doc).
    Columnar: each segment's records are numpy rows, and the per-timer decisions are
    array operations (1 M pending timers in about a second)."""
    st = JournalState()
    boot = F.boot_id()
    names: dict[str, int] = {}
    sched: list[np.ndarray] = []
    prog: list[np.ndarray] = []
    done: list[np.ndarray] = []
    blobs: list[bytes] = []
    max_gen = -1
    for si, path in enumerate(F.segment_files(directory)):
        seg = read_segment(path)
        st.segments += 1
        st.rejects.extend(seg.rejects)
        h, rows = seg.header, seg.rows
        if h is None:
            continue
        if h["epoch"] >= st.epoch:
            st.epoch = h["epoch"]
        max_gen = max(max_gen, h["next_gen"] - 1)
        st.records += len(rows)
        off = _clock_offset_ms(h, boot)
        st.ops.collect(rows, seg.data, list(h["tasks"]), off)
        kind = rows[:, 2]
        s = rows[kind == F.SCHEDULED]
        if len(s):
            tmap = np.array([names.setdefault(t, len(names)) for t in h["tasks"]] + [-1], np.int64)
            task = tmap[np.clip(s[:, _TASK], -1, len(tmap) - 1)]
            inline = (s[:, _BLOB_LEN] <= C.INLINE_MAX) & (s[:, _PERIOD] <= 0)
            words = np.where(inline, s[:, _WORD], 0)  # the scanner read them
            ref = np.where(inline, -1, len(blobs) + np.cumsum(~inline) - 1)
            blobs.extend(
                seg.data[o : o + n] for o, n in s[~inline][:, _BLOB_OFF : _BLOB_OFF + 2].tolist()
            )
            sched.append(
                np.column_stack(
                    [
                        s[:, _ID],
                        s[:, _RUN_S],
                        s[:, _DL_S] + off,
                        task,
                        s[:, _FLAGS],
                        s[:, _PERIOD],
                        s[:, _BLOB_LEN],
                        words,
                        ref,
                        np.full(len(s), si),
                    ]
                )
            )
        o = rows[kind == F.OUTCOME]
        final = o[:, _NEXT_O] < 0
        done.extend(
            [
                rows[(kind == F.CANCELLED) | (kind == F.COMPLETED) | (kind == F.EXPIRED), _ID],
                o[final, _ID],
            ]
        )
        f = rows[kind == F.FIRED]
        prog.extend(
            [
                np.column_stack([o[~final, _ID], o[~final, _RUN_O] + 1, o[~final, _NEXT_O] + off]),
                np.column_stack([f[:, _ID], f[:, _RUN_F], f[:, _DL_F] + off]),
            ]
        )
    st.pending.names = list(names)
    max_gen = max(max_gen, st.ops.max_gen())
    if not sched:
        st.next_gen = max_gen + 1
        return st
    S = np.concatenate(sched)
    # the latest schedule of each id (highest run, then latest segment)
    S = S[np.lexsort((S[:, 9], S[:, 1], S[:, 0]))]
    S = S[np.r_[S[1:, 0] != S[:-1, 0], True]]
    st.timers = len(S)
    st.next_gen = max(max_gen, int(C.handle_gen(S[:, 0]).max())) + 1
    S = S[~np.isin(S[:, 0], np.concatenate(done))]
    unknown = S[:, 3] < 0
    for tid in S[unknown, 0].tolist():
        st.rejects.append(
            Reject(
                directory, 0, f"timer {tid:#x} names a task id its segment's header does not list"
            )
        )
    S = S[~unknown]
    # two pending ids in one slot: the newer generation proves the older was freed (its
    # final record is missing: a journal that lost a record). Keep the newer.
    slot_of = C.handle_slot(S[:, 0])
    order = np.lexsort((C.handle_gen(S[:, 0]), slot_of))
    S, slot_of = S[order], slot_of[order]
    newest = np.r_[slot_of[1:] != slot_of[:-1], True][: len(S)]
    for tid in S[~newest, 0].tolist():
        st.rejects.append(
            Reject(
                directory,
                0,
                f"timer {tid:#x} has no final record but its slot was used again: not re-armed",
            )
        )
    S = S[newest]
    P = np.concatenate(prog)
    if len(P) and len(S):  # the furthest run of each id, if it is past its schedule's
        P = P[np.lexsort((P[:, 1], P[:, 0]))]
        P = P[np.r_[P[1:, 0] != P[:-1, 0], True]]
        at = np.clip(np.searchsorted(P[:, 0], S[:, 0]), 0, len(P) - 1)
        later = (P[at, 0] == S[:, 0]) & (P[at, 1] >= S[:, 1])
        S[later, 1] = P[at[later], 1]
        S[later, 2] = P[at[later], 2]
    p = st.pending
    p.ids, p.runs, p.deadlines, p.tasks = S[:, 0], S[:, 1], S[:, 2], S[:, 3]
    p.flags = S[:, 4] & (F.FLAG_KEY | F.FLAG_REPEAT)
    p.periods, p.lengths, p.words = S[:, 5], S[:, 6], S[:, 7]
    refs = np.flatnonzero(S[:, 8] >= 0)
    p.blobs = {i: blobs[r] for i, r in zip(refs.tolist(), S[refs, 8].tolist(), strict=True)}
    return st


def store_block(mem: L.ServiceMemory, slot: int, data: bytes, what: str) -> tuple[int, int]:
    """An arena block of the smallest class that holds `data`, owned by `slot` and filled
    with it: (class, block). RecoveryError naming `what` when the arena is full."""
    tables = mem.bind_tables()
    for c in range(C.ARENA_CLASSES):
        if len(data) <= C.ARENA_CLASS_BYTES[c] and (b := tables.arena_alloc(c, slot)) >= 0:
            mem.arena_block(c, b)[: len(data)] = np.frombuffer(data, np.uint8)
            return c, b
    raise RecoveryError(
        f"the payload arena cannot hold the journal's pending {what}: start the service "
        f"with a larger arena_bytes"
    )


def install(mem: L.ServiceMemory, st: JournalState) -> np.ndarray:
    """Write the pending timers of `st` into a freshly formatted segment (no process runs
    on it yet) and start every other slot at generation ``st.next_gen``; returns the
    handles installed. Raises RecoveryError when this service cannot hold them."""
    cap = mem.config.capacity
    nodes = mem.nodes()
    nodes[:, C.F_GS] = C.gs_make(st.next_gen, C.ST_FREE)
    p = st.pending
    ids = p.ids.astype(np.int64)
    n = len(ids)
    tables = mem.bind_tables()
    if n == 0:
        tables.rebuild()
        anchor_installed(mem, ids)
        return ids
    slots = C.handle_slot(ids)
    if int(slots.max()) >= cap:
        raise RecoveryError(
            f"the journal has pending timers in slots up to "
            f"{int(slots.max())}, but this service's capacity is {cap}: "
            f"start it with capacity >= {int(slots.max()) + 1}"
        )
    used = {p.names[i] for i in np.flatnonzero(np.bincount(p.tasks)).tolist()}
    unknown = sorted(used - set(mem.task_ids))
    if unknown:
        raise RecoveryError(
            f"the journal has pending timers of tasks this service does not "
            f"register: {', '.join(map(repr, unknown))}; register them (or "
            f"start with another journal directory)"
        )
    if np.any(np.diff(np.sort(slots)) == 0):
        raise RecoveryError(
            "the journal names two pending timers in one slot: it is "
            "corrupt (see the rejects logged above)"
        )
    tmap = np.array([mem.task_ids.get(name, 0) for name in p.names], np.int64)
    metas: np.ndarray = C.meta_make(tmap[p.tasks], p.flags & C.FLAG_KEY, 0, p.lengths, NO_RING)
    words = p.words.copy()
    for i, blob in p.blobs.items():  # payloads that need an arena block
        slot, period = int(slots[i]), int(p.periods[i])
        data = (np.array([period, p.runs[i]], np.int64).tobytes() + blob) if period > 0 else blob
        c, b = store_block(mem, slot, data, "payloads")
        metas[i] = C.meta_make(
            int(tmap[p.tasks[i]]),
            (int(p.flags[i]) & C.FLAG_KEY) | C.FLAG_ARENA | (C.FLAG_REPEAT if period > 0 else 0),
            c,
            len(blob),
            NO_RING,
        )
        words[i] = b
    side = mem.side.reshape(-1, C.SIDE_WORDS)
    side[slots, C.S_META] = metas
    side[slots, C.S_PAYLOAD] = words
    nodes[slots, C.F_DEADLINE] = p.deadlines
    nodes[slots, C.F_GS] = C.gs_make(C.handle_gen(ids), C.ST_PENDING)
    tables.rebuild()  # links them, threads the free stacks around them
    anchor_installed(mem, slots)
    return ids


def compact(
    mem: L.ServiceMemory, handles: np.ndarray, opts: JournalOptions, st: JournalState
) -> int:
    """Record the re-armed timers in the new epoch's first segment, synced; then apply
    the retention to earlier epochs' segments. Returns the segments deleted."""
    writer = SegmentWriter(
        JournalOptions(
            opts.directory,
            "always" if opts.fsync != "none" else "none",
            opts.fsync_ms,
            opts.segment_bytes,
            opts.keep_hours,
            opts.epoch,
        ),
        "recovery",
        mem.service,
        list(mem.task_names),
        mem.config.tick_ms,
        st.next_gen,
        seq_source=lambda: 0,
    )
    tables = mem.bind_tables()
    tables.set_journal(writer.buffer)
    try:
        for chunk in np.array_split(handles, max(1, len(handles) // 65536)):
            tables.journal_pending(np.ascontiguousarray(chunk), F.FLAG_RECOVERED)
            writer.flush()
    finally:
        tables.set_journal(None)
        writer.close()
    return retire_epochs(opts.directory, opts.epoch, opts.keep_hours)


def retire_epochs(directory: str, epoch: int, keep_hours: float) -> int:
    """Delete the segments of epochs before `epoch` (their pending timers were carried
    into it) that are older than `keep_hours`."""
    cutoff = time.time() - keep_hours * 3600
    deleted = 0
    for path in F.segment_files(directory):
        name = F.SegmentName.parse(os.path.basename(path))
        if name is None or name.epoch >= epoch:
            continue
        if os.stat(path).st_mtime <= cutoff:
            os.unlink(path)
            deleted += 1
    return deleted


@dataclass
class Plan:
    """What ``prepare`` found, for ``finish`` once the new segment exists."""

    fd: int  # the journal's lock (keep open while the service lives)
    state: JournalState
    salvaged: int
    started: float  # perf_counter() at the start of recovery


def prepare(opts: JournalOptions, service: str) -> Plan:
    """Claim the journal for `service`, salvage a dead predecessor's memory, read the
    journal (module doc, steps 1 and 2). Raises JournalInUse when a live service has it."""
    t0 = time.perf_counter()
    fd = claim(opts.directory, service)
    try:
        salvaged = 0
        files = F.segment_files(opts.directory)
        last = read_header(files[-1]) if files else None
        if last is not None:
            salvaged = salvage(last["service"], opts.directory, last["epoch"])
        st = scan(opts.directory)
        for r in st.rejects:
            log.warning("journal: rejected %s", r)
        return Plan(fd, st, salvaged, t0)
    except BaseException:
        os.close(fd)
        raise


def finish(mem: L.ServiceMemory, plan: Plan, opts: JournalOptions) -> dict[str, Any]:
    """Re-arm the pending timers in the new segment, compact, apply the retention
    (module doc, steps 3 and 4); returns a summary (TimerService.recovery)."""
    st = plan.state
    timers = install(mem, st)
    ops = install_ops(mem, st.ops, timers)
    if len(ops):
        anchor_installed(mem, C.handle_slot(np.concatenate([timers, ops])))
    handles = np.concatenate([timers, ops])
    deleted = compact(mem, handles, opts, st) if st.epoch else 0
    summary = {
        "epoch": opts.epoch,
        "recovered": len(handles),
        "salvaged": plan.salvaged,
        "records_read": st.records,
        "timers_seen": st.timers,
        "segments_read": st.segments,
        "segments_deleted": deleted,
        "rejects": len(st.rejects),
        "seconds": time.perf_counter() - plan.started,
    }
    if st.epoch:
        log.info(
            "journal %s: epoch %d re-armed %d timers of %d seen (%d records in %d "
            "segments, %d rejected, %d salvaged) in %.2f s",
            opts.directory,
            opts.epoch,
            len(handles),
            st.timers,
            st.records,
            st.segments,
            len(st.rejects),
            plan.salvaged,
            summary["seconds"],
        )
    return summary
