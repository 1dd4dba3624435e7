"""Retention while a service runs: the coordinator deletes the segments no timer needs.

Ground rules. Every slot with a live SCHEDULED record is *anchored* in the coordinator
segment that holds it (an int32 per slot in the service segment), and each coordinator
segment counts its anchored slots (``live``, JOURNAL_WINDOW counters). The native state
machine keeps both under the segment lock: the coordinator's write-ahead pass anchors a
slot in its current segment, and every free of a slot (an outcome that ends it, a retired
cancel, a reclaim) drops its anchor, in whichever process frees it. So:

* A coordinator segment whose count is 0 holds no record a recovery needs: every timer
  it scheduled has ended (or been carried, below). Segments are retired oldest first:
  ``low`` (header word W_JLOW) is the oldest one still counting a live timer.
* A reaper segment holds fired/outcome/cancelled records of timers anchored, when each
  record was written, in a coordinator segment that existed then: one numbered below
  ``W_JSEQ`` as the reaper read it after that write (its *mark*). Once ``low`` reaches a
  closed reaper segment's mark, each timer it mentions has ended or was carried, after
  that write, into a newer segment whose record holds its state: the reaper deletes it.
  (A restarted reaper marks its predecessors' segments with ``W_JSEQ`` at its start.)
* A long-lived timer (far deadline, repeating) would pin its segment forever, so when the
  oldest live segment is mostly dead (its live timers would fill under a tenth of a
  segment) the coordinator *carries* them: it re-records them (SCHEDULED, flag
  ``recovered``, current deadline and run) in its current segment, moving their anchors,
  and syncs that before deleting anything.

Deletion honours ``journal_keep_hours``: a segment that may go is deleted once its file
is that old. A coordinator restart rebuilds its map of segment numbers from the headers.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

from ...segment import contract as C
from ...segment import layout as L
from ...segment import shm
from .. import format as F
from ..check import file_damage
from ..directory import JournalOptions
from ..reader import read_header
from .writer import SegmentWriter

log = logging.getLogger("shmwheel.journal")

PASS_S = 1.0  # how often the coordinator looks
CARRY_RECORD_BYTES = 48  # about what a carried SCHEDULED record takes


class Retention:
    """The coordinator's side of the retention (module doc)."""

    def __init__(self, mem: L.ServiceMemory, opts: JournalOptions) -> None:
        self.mem = mem
        self.opts = opts
        self.paths: dict[int, str] = {}  # this epoch's coordinator segments by number
        self.unread: set[str] = set()  # a dead predecessor's: read whole before deleting
        self.next_pass = 0.0
        self.deleted = 0
        for path in F.segment_files(opts.directory):  # a restarted coordinator's map
            name = F.SegmentName.parse(os.path.basename(path))
            if (
                name is None
                or name.epoch != opts.epoch
                or name.role not in ("coordinator", "recovery")
            ):
                continue
            h = read_header(path)
            if h is not None:
                self.paths[h["seq"]] = path
                self.unread.add(path)

    def next_seq(self) -> int:
        """The next coordinator segment's number (the writer's seq_source)."""
        header = self.mem.header
        seq = int(header[L.W_JSEQ])
        header[L.W_JSEQ] = seq + 1
        return seq

    def opened(self, seq: int, path: str) -> None:
        """A new coordinator segment (the writer's on_open): SCHEDULED records go there."""
        self.paths[seq] = path
        self.mem.bind_tables().set_segment(seq)

    def tick(self, writer: SegmentWriter) -> None:
        now = time.monotonic()
        if now >= self.next_pass:
            self.next_pass = now + PASS_S
            self.run(writer)

    def run(self, writer: SegmentWriter) -> int:
        """One pass: advance ``low``, carry the oldest live segment if it is mostly dead,
        delete what may go. Returns the files deleted."""
        mem, w = self.mem, C.JOURNAL_WINDOW
        live, cur = mem.live, writer.seq
        low = max(0, int(mem.header[L.W_JLOW]))
        carried = 0
        while low < cur:
            if live[low % w] <= 0:
                low += 1
            elif (
                live[low % w] * CARRY_RECORD_BYTES <= self.opts.segment_bytes // 10
                or cur - low >= w // 2
            ):  # mostly dead, or the counters' window filling
                with mem.locked():
                    carried += mem.bind_tables().journal_carry(low)
            else:
                break
        if carried:
            writer.flush()
            if self.opts.fsync != "none":
                writer.sync()  # the carried records are on disk before anything goes
            log.debug("journal: carried %d live timers up to segment %d", carried, cur)
        mem.header[L.W_JLOW] = low
        due = [(s, self.paths[s]) for s in sorted(self.paths) if s < low]
        gone = retire(writer, due, self.unread)
        for seq in gone:
            del self.paths[seq]
        self.deleted += len(gone)
        return len(gone)


class ReaperFiles:
    """The reaper's side: its closed segments, each with its mark, deleted once ``low``
    reaches the mark (module doc)."""

    def __init__(self, mem: L.ServiceMemory, opts: JournalOptions) -> None:
        self.mem = mem
        self.opts = opts
        self.closed: list[tuple[str, int]] = []  # (path, mark), oldest first
        self.unread: set[str] = set()  # a dead predecessor's: read whole before deleting
        self.current = ""
        self.next_pass = 0.0
        mark = int(mem.header[L.W_JSEQ])
        for path in F.segment_files(opts.directory):  # a dead predecessor's segments
            name = F.SegmentName.parse(os.path.basename(path))
            if (
                name is not None
                and name.epoch == opts.epoch
                and name.role == "reaper"
                and not shm.pid_alive(name.pid)
            ):
                self.closed.append((path, mark))
                self.unread.add(path)

    def opened(self, seq: int, path: str) -> None:
        """The writer's on_open, right after the last write to the previous segment: that
        one is closed, marked with W_JSEQ as it is now."""
        if self.current:
            self.closed.append((self.current, int(self.mem.header[L.W_JSEQ])))
        self.current = path

    def tick(self, writer: SegmentWriter) -> int:
        now = time.monotonic()
        if now < self.next_pass or not self.closed:
            return 0
        self.next_pass = now + PASS_S
        low = int(self.mem.header[L.W_JLOW])
        due = [(p, p) for p, mark in self.closed if mark <= low]
        gone = set(retire(writer, due, self.unread))
        self.closed = [(p, mark) for p, mark in self.closed if p not in gone]
        return len(gone)


_DAMAGED: set[str] = set()  # segments this process found damaged: never deleted


def retire(writer: SegmentWriter, files: list[tuple[Any, str]], unread: set[str]) -> list[Any]:
    """Delete the segments of `files` ((key, path) pairs) whose last write is older than
    ``keep_hours``, their names first recorded in a RETIRED record of the writer's
    current segment, synced: the chain then shows them retired, not missing. Nothing is
    deleted while the writer cannot make that record durable (a disk fault). A file in
    `unread` (a dead predecessor wrote it) is first read whole: a damaged one is never
    deleted (a torn tail, its writer's death, is no damage). Returns the keys gone."""
    cutoff = time.time() - writer.opts.keep_hours * 3600
    due = []
    for key, path in files:
        try:
            if os.stat(path).st_mtime > cutoff:
                continue
        except FileNotFoundError:
            due.append((key, path))  # gone already (its record was written before)
            continue
        if path in _DAMAGED:
            continue
        if path in unread:
            damage = file_damage(path)
            if damage:
                log.warning("journal: not deleting %s, it is damaged: %s", path, damage[0])
                _DAMAGED.add(path)  # kept for good: `shmwheel journal check` shows it
                continue
            unread.discard(path)
        due.append((key, path))
    if not due:
        return []
    writer.append(
        F.body(F.RETIRED, time.monotonic_ns() // 1000, [os.path.basename(p) for _, p in due])
    )
    if not writer.commit():
        return []
    for _, path in due:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return [key for key, _ in due]


def anchor_installed(mem: L.ServiceMemory, slots: np.ndarray) -> None:
    """A recovery's re-armed timers are anchored in segment 0 (its compaction segment);
    the coordinator's segments are numbered from 1."""
    if not len(mem.live):
        return
    mem.anchors.view(np.int32)[slots] = 0  # the rest were set to -1 when formatted
    mem.live[0] = len(slots)
    mem.header[L.W_JSEQ] = 1
