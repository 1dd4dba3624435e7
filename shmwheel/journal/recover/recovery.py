"""Whole-service recovery from a journal (docs/journal.md, "Recovery").

``TimerService(journal=DIR).start()`` runs, in order (after claiming DIR's lock and
writing what a stop through a disk fault left in /dev/shm: ``journal/write/spill.py``):

1. ``check``: read every segment and judge it (``journal/check.py``): damage — a bad record,
   magic or header, a segment cut short or missing from its writer's chain, a segment of
   another service — raises RecoveryError and changes nothing, unless the service was
   told to salvage (``journal_on_damage="salvage"``). A dead writer's torn tail is the
   normal crash case: read up to it, with a warning. The same pass works out each
   timer's state (``journal/scan.py``): the timers with no final outcome are pending, each at
   its next run's deadline.
2. ``salvage`` (``salvage.py``): if the dead service's segment is still in /dev/shm
   (its processes were killed, the machine did not reboot), record what its memory
   knows and its journal does not yet: schedules still in its clients' rings, cancels
   that won but whose records were not drained, outcomes in its result rings. Then
   unlink it (and read what it recorded).
3. ``install``: write the pending timers into the new segment, each in the slot and
   generation its id names (so ids survive the restart), and start every other slot's
   generation above any id the journal holds.
4. ``compact``: record the re-armed timers in a new segment of the new epoch, synced, so
   that the segments of earlier epochs are no longer needed; move the damaged ones (a
   salvage) to DIR/damaged/, untouched; delete the intact ones (or keep them for
   ``keep_hours``). Only a segment read whole and intact is ever deleted.

A timer that was dispatched but has no recorded outcome runs again: the window is the
time between a task's end and the reaper recording its outcome.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import RecoveryError
from ...segment import contract as C
from ...segment import layout as L
from .. import format as F
from ..check import add, inspect
from ..directory import JournalOptions, claim
from ..scan import JournalState, clock_offset_ms
from ..verdict import DAMAGED_DIR, TORN, Inspection
from ..write import spill
from ..write.retention import anchor_installed, retire
from ..write.writer import SegmentWriter
from .quarantine import quarantine
from .recovery_ops import NO_RING, install_ops, store_block
from .salvage import salvage

log = logging.getLogger("shmwheel.journal")

ON_DAMAGE = ("refuse", "salvage")  # TimerService(journal_on_damage=...)


def scan(directory: str) -> JournalState:
    """Every segment of the journal read; the pending timers worked out (check.inspect
    judges the segments, journal/scan.py works out the timers)."""
    return inspect(directory).state


_clock_offset_ms = clock_offset_ms  # (its name before journal/scan.py)


def install(mem: L.ServiceMemory, st: JournalState) -> np.ndarray:
    """Write the pending timers of `st` into a freshly formatted segment (no process runs
    on it yet) and start every other slot at generation ``st.next_gen``; returns the
    handles installed. Raises RecoveryError when this service cannot hold them."""
    cap = mem.config.capacity
    tables = mem.bind_tables()
    tables.format(st.next_gen)
    p = st.pending
    ids = p.ids.astype(np.int64)
    n = len(ids)
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
        data = C.repeat_header(period, int(p.runs[i])) + blob if period > 0 else blob
        c, b = store_block(mem, slot, data, "payloads")
        metas[i] = C.meta_make(
            int(tmap[p.tasks[i]]),
            (int(p.flags[i]) & C.FLAG_KEY) | C.FLAG_ARENA | (C.FLAG_REPEAT if period > 0 else 0),
            c,
            len(blob),
            NO_RING,
        )
        words[i] = b
    tables.install(ids, np.ascontiguousarray(p.deadlines, np.int64), metas, words)
    tables.rebuild()  # links them, threads the free stacks around them
    anchor_installed(mem, slots)
    return ids


def compact(
    mem: L.ServiceMemory,
    handles: np.ndarray,
    opts: JournalOptions,
    st: JournalState,
    move: list[str],
    intact: list[str],
) -> tuple[int, list[str]]:
    """Record the re-armed timers in the new epoch's first segment, synced; then move the
    damaged segments of `move` to DIR/damaged/ and apply the retention to the earlier
    epochs' segments of `intact` (both recorded in a RETIRED record first). Returns the
    segments deleted and the paths the damaged ones were moved to."""
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
    try:
        moved = quarantine(writer, move)
        deleted = retire_epochs(writer, intact)
    finally:
        writer.close()
    return deleted, moved


def retire_epochs(writer: SegmentWriter, intact: list[str]) -> int:
    """Delete the segments of `intact` (files read whole and intact: check.Inspection)
    of epochs before the writer's (their pending timers were carried into it) that are
    older than ``keep_hours``, their names first recorded in the writer's segment."""
    epoch = writer.opts.epoch
    old = []
    for path in intact:
        name = F.SegmentName.parse(os.path.basename(path))
        if name is not None and name.epoch < epoch:
            old.append((path, path))
    return len(retire(writer, old, set()))  # `old` was read whole and intact by the scan


@dataclass
class Plan:
    """What ``prepare`` found, for ``finish`` once the new segment exists."""

    fd: int  # the journal's lock (keep open while the service lives)
    state: JournalState
    salvaged: int
    started: float  # perf_counter() at the start of recovery
    inspection: Inspection
    on_damage: str = "refuse"


def prepare(opts: JournalOptions, service: str, on_damage: str = "refuse") -> Plan:
    """Claim the journal for `service`, judge it and read it, salvage a dead
    predecessor's memory (module doc, steps 1 and 2). Raises JournalInUse when a live
    service has it, RecoveryError when it is damaged and `on_damage` is "refuse" (then
    nothing in the directory has changed but its LOCK)."""
    if on_damage not in ON_DAMAGE:
        raise ValueError(
            f"journal_on_damage must be one of {', '.join(ON_DAMAGE)}, got {on_damage!r}"
        )
    t0 = time.perf_counter()
    fd = claim(opts.directory, service)
    try:
        spill.restore(opts.directory)  # what a stop through a disk fault could not write
        insp = inspect(opts.directory)
        if insp.damage and on_damage == "refuse":
            raise RecoveryError(insp.refusal())
        salvaged = 0
        last = insp.newest_header()
        if last is not None:
            before = set(F.segment_files(opts.directory))
            salvaged = salvage(last["service"], opts.directory, last["epoch"])
            new = sorted(set(F.segment_files(opts.directory)) - before)
            if new:
                add(insp, new)
        for p in insp.problems:
            log.warning("journal %s: %s: %s", opts.directory, p.severity, p)
        for r in insp.state.rejects:
            if r.file == opts.directory:  # a timer the records cannot re-arm
                log.warning("journal: rejected %s", r)
        return Plan(fd, insp.state, salvaged, t0, insp, on_damage)
    except BaseException:
        os.close(fd)
        raise


def finish(mem: L.ServiceMemory, plan: Plan, opts: JournalOptions) -> dict[str, Any]:
    """Re-arm the pending timers in the new segment, compact, move the damaged segments
    away (salvage), apply the retention (module doc, steps 3 and 4); returns a summary
    (TimerService.recovery)."""
    st, insp = plan.state, plan.inspection
    timers = install(mem, st)
    ops = install_ops(mem, st.ops, timers)
    if len(ops):
        anchor_installed(mem, C.handle_slot(np.concatenate([timers, ops])))
    handles = np.concatenate([timers, ops])
    damaged = insp.damaged
    deleted, moved = (
        compact(mem, handles, opts, st, damaged, insp.intact()) if st.epoch else (0, [])
    )
    summary = {
        "epoch": opts.epoch,
        "recovered": len(handles),
        "salvaged": plan.salvaged,
        "records_read": st.records,
        "timers_seen": st.timers,
        "segments_read": st.segments,
        "segments_deleted": deleted,
        "rejects": len(st.rejects),
        "damage": len(insp.damage),
        "damaged_segments": len(damaged),
        "quarantined": moved,
        "torn": sum(p.severity == TORN for p in insp.problems),
        "seconds": time.perf_counter() - plan.started,
    }
    if st.epoch:
        log.log(
            logging.WARNING if insp.damage else logging.INFO,
            "journal %s: epoch %d re-armed %d timers of %d seen (%d records in %d "
            "segments, %d rejected, %d salvaged%s) in %.2f s",
            opts.directory,
            opts.epoch,
            len(handles),
            st.timers,
            st.records,
            st.segments,
            len(st.rejects),
            plan.salvaged,
            f"; {len(insp.damage)} problems salvaged around, {len(moved)} damaged segments "
            f"moved to {os.path.join(opts.directory, DAMAGED_DIR)}"
            if insp.damage
            else "",
            summary["seconds"],
        )
    return summary
