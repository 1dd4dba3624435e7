"""Whole-service recovery from a journal (docs/journal.md, "Recovery").

``TimerService(journal=DIR).start()`` runs, in order:

1. ``salvage``: if the dead service's segment is still in /dev/shm (its processes were
   killed, the machine did not reboot), record what its memory knows and its journal
   does not yet: schedules still in its clients' rings, cancels that won but whose
   records were not drained, outcomes in its result rings. Then unlink it.
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

from .. import _native as N
from ..errors import ShmwheelError
from ..segment import contract as C
from ..segment import layout as L
from ..segment import shm
from . import format as F
from .reader import Reject, read_header, read_segment
from .writer import JournalOptions, SegmentWriter, claim

log = logging.getLogger("shmwheel.journal")

NO_RING = 0x7FFF  # a re-armed timer belongs to no client's ring (max_clients <= 4096)


class RecoveryError(ShmwheelError):
    """The journal cannot be recovered into this service (its configuration differs)."""


@dataclass
class Pending:
    """The timers a journal holds without a final outcome, as parallel lists."""

    ids: list[int] = field(default_factory=list)
    deadlines: list[int] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    flags: list[int] = field(default_factory=list)
    periods: list[int] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    blobs: list[bytes] = field(default_factory=list)


@dataclass
class JournalState:
    epoch: int = 0            # the latest epoch found (0: an empty journal)
    next_gen: int = 0         # every slot's generation starts here in the next epoch
    service: str = ""         # the latest epoch's service name
    pending: Pending = field(default_factory=Pending)
    rejects: list[Reject] = field(default_factory=list)
    records: int = 0
    timers: int = 0           # distinct ids scheduled
    segments: int = 0


def _clock_offset_ms(header: dict[str, Any], boot: str) -> int:
    """What to add to a deadline recorded under `header` to make it a deadline of this
    boot's monotonic clock (0 on the same boot: the clock is the same)."""
    if header["boot_id"] == boot and boot:
        return 0
    wall_minus_mono = (header["wall_us"] - header["mono_us"]) // 1000
    return wall_minus_mono - (time.time_ns() - time.monotonic_ns()) // 1_000_000


def scan(directory: str) -> JournalState:
    """Every segment of the journal read; the pending timers worked out (module doc)."""
    st = JournalState()
    boot = F.boot_id()
    sched: dict[int, list[Any]] = {}     # id -> (run, deadline, task name, flags, period, blob)
    progress: dict[int, tuple[int, int]] = {}  # id -> (next run, its deadline)
    done: set[int] = set()
    max_gen = -1
    for path in F.segment_files(directory):
        seg = read_segment(path)
        st.segments += 1
        st.rejects.extend(seg.rejects)
        h = seg.header
        if h is None:
            continue
        if h["epoch"] >= st.epoch:
            st.epoch, st.service = h["epoch"], h["service"]
        max_gen = max(max_gen, h["next_gen"] - 1)
        tasks, off = h["tasks"], _clock_offset_ms(h, boot)
        st.records += len(seg.records)
        for r in seg.records:
            kind, tid = r[0], r[1]
            if kind == F.SCHEDULED:
                run = r[8]
                old = sched.get(tid)
                if old is None or run >= old[0]:
                    task = tasks[r[4]] if 0 <= r[4] < len(tasks) else None
                    sched[tid] = [run, r[3] + off, task, r[6], r[7], r[9]]
            elif kind == F.CANCELLED or kind == F.COMPLETED or kind == F.EXPIRED:
                done.add(tid)
            elif kind == F.OUTCOME:
                if r[6] < 0:
                    done.add(tid)
                else:
                    nxt = (r[3] + 1, r[6] + off)
                    if nxt[0] > progress.get(tid, (0, 0))[0]:
                        progress[tid] = nxt
            elif kind == F.FIRED:
                cur = (r[3], r[4] + off)  # a run fired, not yet finished: run it again
                if cur[0] > progress.get(tid, (0, 0))[0]:
                    progress[tid] = cur
    for tid in sched:
        max_gen = max(max_gen, C.handle_gen(tid))
    st.next_gen = max_gen + 1
    st.timers = len(sched)
    p = st.pending
    for tid, (run, deadline, task, flags, period, blob) in sched.items():
        if tid in done:
            continue
        if task is None:
            st.rejects.append(Reject(directory, 0, f"timer {tid:#x} names a task id its "
                                                   f"segment's header does not list"))
            continue
        prog = progress.get(tid)
        if prog is not None and prog[0] >= run:
            run, deadline = prog
        p.ids.append(tid)
        p.deadlines.append(deadline)
        p.tasks.append(task)
        p.flags.append(flags & (F.FLAG_KEY | F.FLAG_REPEAT))
        p.periods.append(period)
        p.runs.append(run)
        p.blobs.append(blob)
    return st


def install(mem: L.ServiceMemory, st: JournalState) -> np.ndarray:
    """Write the pending timers of `st` into a freshly formatted segment (no process runs
    on it yet) and start every other slot at generation ``st.next_gen``; returns the
    handles installed. Raises RecoveryError when this service cannot hold them."""
    cap = mem.config.capacity
    nodes = mem.nodes()
    nodes[:, C.F_GS] = C.gs_make(st.next_gen, C.ST_FREE)
    p = st.pending
    n = len(p.ids)
    ids = np.array(p.ids, np.int64)
    if n == 0:
        mem.bind_tables().rebuild()
        return ids
    slots = C.handle_slot(ids)
    if int(slots.max()) >= cap:
        raise RecoveryError(f"the journal has pending timers in slots up to "
                            f"{int(slots.max())}, but this service's capacity is {cap}: "
                            f"start it with capacity >= {int(slots.max()) + 1}")
    unknown = sorted(set(p.tasks) - set(mem.task_ids))
    if unknown:
        raise RecoveryError(f"the journal has pending timers of tasks this service does not "
                            f"register: {', '.join(map(repr, unknown))}; register them (or "
                            f"start with another journal directory)")
    if len(np.unique(slots)) != n:
        raise RecoveryError("the journal names two pending timers in one slot: it is "
                            "corrupt (see the rejects logged above)")
    tables = mem.bind_tables()
    task_ids = mem.task_ids
    metas = np.empty(n, np.int64)
    words = np.empty(n, np.int64)
    for i in range(n):
        blob, flags, period = p.blobs[i], p.flags[i], p.periods[i]
        task = task_ids[p.tasks[i]]
        slot = int(slots[i])
        if period <= 0 and len(blob) <= C.INLINE_MAX:
            metas[i] = C.meta_make(task, flags & C.FLAG_KEY, 0, len(blob), NO_RING)
            words[i] = C.inline_word(blob)
            continue
        data = (np.array([period, p.runs[i]], np.int64).tobytes() + blob) if period > 0 \
            else blob
        for c in range(C.ARENA_CLASSES):
            if len(data) <= C.ARENA_CLASS_BYTES[c]:
                b = tables.arena_alloc(c, slot)
                if b >= 0:
                    break
        else:
            raise RecoveryError(f"the payload arena cannot hold the journal's pending "
                                f"payloads: start the service with a larger arena_bytes")
        mem.arena_block(c, b)[: len(data)] = np.frombuffer(data, np.uint8)
        metas[i] = C.meta_make(task, (flags & C.FLAG_KEY) | C.FLAG_ARENA |
                               (C.FLAG_REPEAT if period > 0 else 0), c, len(blob), NO_RING)
        words[i] = b
    side = mem.side.reshape(-1, C.SIDE_WORDS)
    side[slots, C.S_META] = metas
    side[slots, C.S_PAYLOAD] = words
    nodes[slots, C.F_DEADLINE] = np.array(p.deadlines, np.int64)
    nodes[slots, C.F_GS] = C.gs_make(C.handle_gen(ids), C.ST_PENDING)  # type: ignore[arg-type]
    tables.rebuild()  # links them, threads the free stacks around them
    return ids


def compact(mem: L.ServiceMemory, handles: np.ndarray, opts: JournalOptions,
            st: JournalState) -> int:
    """Record the re-armed timers in the new epoch's first segment, synced; then apply
    the retention to earlier epochs' segments. Returns the segments deleted."""
    writer = SegmentWriter(JournalOptions(opts.directory, "always" if opts.fsync != "none"
                                          else "none", opts.fsync_ms, opts.segment_bytes,
                                          opts.keep_hours, opts.epoch),
                           "recovery", mem.service, list(mem.task_names),
                           mem.config.tick_ms, st.next_gen)
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


def salvage(service: str, directory: str, epoch: int) -> int:
    """Record into the journal what the dead service's segment knows and its journal may
    not (module doc, step 1), then unlink the segment. Returns the records written (0 when
    there is no segment). The caller holds the journal's lock, so no process of that
    service is alive."""
    try:
        mem = L.ServiceMemory.attach(service)
    except Exception:  # gone (the usual case after a reboot), or not a service segment
        return 0
    cfg = mem.config
    if os.path.abspath(cfg.journal_dir or "/nonexistent") != os.path.abspath(directory) or \
            shm.pid_alive(int(mem.header[L.W_OWNER])):
        mem.close()  # another journal's service, or a live one: not ours to touch
        return 0
    written = 0
    try:
        opts = JournalOptions(directory, "always", epoch=max(1, epoch))
        writer = SegmentWriter(opts, "recovery", service, list(mem.task_names), cfg.tick_ms)
        tables = mem.tables
        assert tables is not None
        tables.set_journal(writer.buffer)
        try:
            with mem.locked():  # repairs first if a lock holder died mid-update
                written += _salvage_rings(mem)
                gs = mem.nodes()[:, C.F_GS]
                st = C.gs_state(gs)
                slots = np.flatnonzero((st == C.ST_CANCELLED) | (st == C.ST_STOPPING))
                for slot in slots.tolist():
                    writer.append(F.body(F.CANCELLED, int(C.gs_handle(int(gs[slot]), slot)),
                                         time.monotonic_ns() // 1000))
                written += len(slots)
            writer.flush()
        finally:
            tables.set_journal(None)
            writer.close()
    finally:
        mem.close()
        shm.unlink_service(service)
    log.warning("journal %s: salvaged %d records from the dead service %s's shared memory",
                directory, written, service)
    return written


def _salvage_rings(mem: L.ServiceMemory) -> int:
    tables = mem.tables
    assert tables is not None
    written = 0
    for r, ring in enumerate(mem.producer):
        pid = int(mem.ring_table[r, L.RT_PID])
        buf = np.empty((max(1, ring.pending()), C.PRODUCER_RECORD), np.int64)
        _, n = ring.peek(buf)
        if n > 0:
            written += tables.journal_records(buf, n, pid)
    for ring in mem.results:
        buf = np.empty((max(1, ring.pending()), C.RESULT_RECORD), np.int64)
        _, n = ring.peek(buf)
        if n > 0:
            written += tables.journal_settled(buf, n)
            res = np.zeros(2, np.int64)
            tables.settle(buf, n, res)  # the unsettled ones: OUTCOME records as it settles
            written += int(res.sum())
    return written


@dataclass
class Plan:
    """What ``prepare`` found, for ``finish`` once the new segment exists."""

    fd: int                   # the journal's lock (keep open while the service lives)
    state: JournalState
    salvaged: int
    started: float            # perf_counter() at the start of recovery


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
    handles = install(mem, st)
    deleted = compact(mem, handles, opts, st) if st.epoch else 0
    summary = {"epoch": opts.epoch, "recovered": len(handles), "salvaged": plan.salvaged,
               "records_read": st.records, "timers_seen": st.timers,
               "segments_read": st.segments, "segments_deleted": deleted,
               "rejects": len(st.rejects), "seconds": time.perf_counter() - plan.started}
    if st.epoch:
        log.info("journal %s: epoch %d re-armed %d timers of %d seen (%d records in %d "
                 "segments, %d rejected, %d salvaged) in %.2f s", opts.directory, opts.epoch,
                 len(handles), st.timers, st.records, st.segments, len(st.rejects),
                 plan.salvaged, summary["seconds"])
    return summary
