"""The one place that judges a journal (docs/journal.md, "Damage"): what is wrong with each
segment file, whether each writer's chain is complete, and — from the same pass — which
timers the intact records prove pending. ``TimerService.start()`` (``recovery.prepare``),
``shmwheel journal check`` and ``shmwheel journal repair`` all read a journal through
``inspect``.

Every problem has a severity:

* ``torn``: the tail of the newest segment of a writer that died mid-write (the normal
  crash case): the records before it are read, the journal is not damaged.
* ``warning``: a gap in an epoch a later start has superseded (its pending timers were
  carried into that start's compaction segment, so nothing depends on it).
* ``damage``: anything else — a record that fails its checksum or does not decode, a bad
  magic, header or frame length, a segment cut short that its writer had gone on from, a
  segment missing from a chain, an epoch without one of its writers' chains, a segment of
  another service. A start refuses it unless told to salvage.

A problem's scope is ``file`` (the file itself is damaged: a salvage moves it to
``DIR/damaged/``) or ``chain`` (something is missing around it: nothing to move).
"""

from __future__ import annotations

import os

from . import format as F
from .chains import analyse
from .reader import Segment, frame_after, read_segment
from .scan import collect
from .verdict import DAMAGE, Inspection, Problem, SegmentReport


def add(insp: Inspection, paths: list[str]) -> None:
    """Read more segments into `insp` (a salvage's, written after ``inspect``) and judge
    the journal again."""
    for path in paths:
        insp.reports.append(_read(path, len(insp.reports)))
    insp.reports.sort(key=lambda r: r.basename)
    analyse(insp)


def inspect(directory: str, paths: list[str] | None = None) -> Inspection:
    """Read every segment of `directory` once and judge it (module doc); with `paths`,
    only those of its segment files, as if they were all it held (the fleet audit,
    ``shmwheel.pipeline.fleet``, judges the segments of each service apart when several
    services' segments were copied into one directory)."""
    insp = Inspection(directory)
    files = F.segment_files(directory) if paths is None else sorted(paths, key=os.path.basename)
    insp.reports = [_read(p, i) for i, p in enumerate(files)]
    analyse(insp)
    return insp


# -- one file ---------------------------------------------------------------------------
def _read(path: str, order: int) -> SegmentReport:
    name = F.SegmentName.parse(os.path.basename(path))
    assert name is not None  # segment_files lists only segment names
    rep = SegmentReport(path, name)
    try:
        seg = read_segment(path)
    except OSError as e:
        rep.frame.append(
            Problem(path, -1, f"cannot read it: {e.strerror or e}", "all of its records", DAMAGE)
        )
        return rep
    rep.size, rep.header, rep.end, rep.retired = seg.size, seg.header, seg.end, seg.retired
    rep.version = seg.data[7] if seg.size >= len(F.MAGIC) else 0
    rep.records, rep.rejects = len(seg.rows), seg.rejects
    rep.last_us = name.wall_us
    h = rep.header
    if h is not None:  # t_us (every kind's second field) is the writer's monotonic clock
        t_us = F.scan_column(F.SCHEDULED, "t_us")
        t = [int(seg.rows[:, t_us].max())] if len(seg.rows) else []
        t += [rep.end["t_us"]] if rep.end is not None else []
        if t:
            rep.last_us = max(rep.last_us, h["wall_us"] + max(t) - h["mono_us"])
    _frame_problems(rep, seg)
    if h is not None and (h["epoch"], F.ROLES.get(h["role"]), h["pid"]) != (
        name.epoch,
        name.role,
        name.pid,
    ):
        rep.frame.append(
            Problem(
                path,
                len(F.MAGIC),
                f"its header (epoch {h['epoch']}, {F.ROLES.get(h['role'], h['role'])}, pid "
                f"{h['pid']}) does not match its name: a renamed or copied file",
                f"its {rep.records} records are not where they belong",
                DAMAGE,
            )
        )
    rep.part = collect(seg, order, F.boot_id())
    return rep


def file_damage(path: str) -> list[Problem]:
    """What is wrong with one segment file by itself (a tail that may be a dead writer's
    torn one is not counted): what the running retention asks before it deletes a file
    it did not write (retention.retire)."""
    return _read(path, 0).frame


def _frame_problems(rep: SegmentReport, seg: Segment) -> None:
    """The reader's rejects as problems; a tail that may be torn is kept as ``torn_at``
    (whether it may be is decided with the other segments, in ``chains.analyse``)."""
    data, path, size = seg.data, rep.path, seg.size
    for r in seg.rejects:
        reason, off = r.reason, r.offset
        if reason.startswith("torn"):
            later = frame_after(data, off)
            if later is None:
                rep.torn_at = off
                continue
            what = "a frame whose length runs past the end of the file (a bad length word)"
            lost = f"the records from byte {off} are unread (a whole record begins at {later})"
        elif reason.startswith("bad frame length"):
            if not data[off:].strip(b"\0"):  # zeros the writer never wrote: a crash's tail
                rep.torn_at = off
                continue
            what, lost = (
                "a bad frame length",
                f"the rest of the file ({size - off} bytes) is unread",
            )
        elif "bad magic" in reason or reason.startswith("unknown format version"):
            what, lost = reason, f"the whole file ({size} bytes) is unread"
        elif "before the segment's header" in reason:
            what, lost = "no readable header", f"its {reason.split()[0]} records are unread"
        else:
            what = reason + (" (its header)" if off == len(F.MAGIC) else "")
            lost = "1 record unreadable"
        rep.frame.append(Problem(path, off, what, lost, DAMAGE))
    if rep.end is not None and rep.torn_at >= 0:
        rep.frame.append(
            Problem(path, rep.torn_at, "bytes after its END record", "not records", DAMAGE)
        )
        rep.torn_at = -1
