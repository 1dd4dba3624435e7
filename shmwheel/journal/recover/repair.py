"""``shmwheel journal repair DIR``: offline, what a start with
``journal_on_damage="salvage"`` does — take the damaged segments out of a journal
(``quarantine.py``) after recording what its intact records prove pending.

Nothing is deleted and nothing is rewritten. A damaged segment is moved, untouched, to
``DIR/damaged/`` (a rename: the same filesystem), its name first recorded in a RETIRED
record of a segment that already holds, synced, every timer and operation the intact
records prove pending. That segment is a new epoch's first (a recovery's, number 0), so
every older epoch is superseded: what they lack (a missing segment, a missing chain) no
longer matters, and the journal checks clean.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import msgpack

from ...segment import contract as C
from .. import format as F
from ..check import inspect
from ..directory import JournalOptions, trusted
from ..scan import JournalState
from ..verdict import Inspection
from ..write.writer import SegmentWriter
from .quarantine import quarantine
from .recovery import prepare

REPAIR_HOLDER = "shmwheel journal repair"  # how a repair names itself in the lock file


@dataclass
class Repaired:
    """What ``repair`` found and did: the journal as it was, the segment it wrote ("" if
    none), where the damaged segments went, and the journal as it is now."""

    before: Inspection
    written: str = ""
    moved: tuple[str, ...] = ()
    salvaged: int = 0
    after: Inspection | None = None


def repair(directory: str, dry_run: bool = False) -> Repaired:
    """Do offline what a start with journal_on_damage="salvage" does (module doc): take
    the journal's lock, salvage a dead service's memory into it, write every timer and
    operation the intact records prove pending into a new epoch's segment, synced, then
    move the damaged segments to DIR/damaged/. Nothing to do when it is not damaged. With
    `dry_run`, only judge it (no lock taken, nothing written). A directory that is not
    safe to use (``directory.trusted``) raises UntrustedPath, with nothing read."""
    if dry_run:
        trusted(directory)
        return Repaired(inspect(directory))
    plan = prepare(JournalOptions(directory, "always"), REPAIR_HOLDER, "salvage")
    try:
        insp, st = plan.inspection, plan.state
        if not insp.damage:
            return Repaired(insp, salvaged=plan.salvaged, after=insp)
        last = insp.newest_header() or {}
        names = list(st.pending.names)
        names += sorted({t for v in st.ops.pending().values() for t in v[2:4] if t} - set(names))
        writer = SegmentWriter(
            JournalOptions(directory, "always", epoch=st.epoch + 1),
            "recovery",
            last.get("service", REPAIR_HOLDER),
            names,
            last.get("tick_ms", 1),
            st.next_gen,
            seq_source=lambda: 0,
        )
        try:
            record_pending(writer, st, names)
            moved = quarantine(writer, insp.damaged)
        finally:
            writer.close()
        return Repaired(insp, writer.path, tuple(moved), plan.salvaged, inspect(directory))
    finally:
        os.close(plan.fd)


def record_pending(writer: SegmentWriter, st: JournalState, names: list[str]) -> int:
    """Append what `st` holds pending as a recovery records it (SCHEDULED flag recovered,
    WATCHED), task ids indexing `names` (the writer's header's tasks); returns the
    records written (flushed)."""
    p, now = st.pending, time.monotonic_ns() // 1000
    index = {t: i for i, t in enumerate(names)}
    for i in range(len(p.ids)):
        writer.append(
            F.body(
                F.SCHEDULED,
                int(p.ids[i]),
                now,
                int(p.deadlines[i]),
                index[p.names[int(p.tasks[i])]],
                0,
                int(p.flags[i]) | F.FLAG_RECOVERED,
                int(p.periods[i]),
                int(p.runs[i]),
                p.blob(i),
            )
        )
        if i % 65536 == 65535:
            writer.flush()
    ops = st.ops.pending()
    for h, (deadline, required, on_complete, on_expire, blob) in sorted(ops.items()):
        writer.append(
            F.body(
                F.WATCHED,
                h,
                now,
                deadline,
                required,
                len(msgpack.unpackb(blob)[0]),
                index.get(on_complete or "", C.TASK_NONE),
                index.get(on_expire or "", C.TASK_NONE),
                blob,
            )
        )
    writer.flush()
    return len(p.ids) + len(ops)
