"""The jobs' ledger's retention: every file before the one being written is compacted into
one file that keeps the whole record (every record, in order, with the HEADER of the run
that wrote it) of each job not yet settled, and drops the whole record of each settled one.
A job is settled when its DONE is on file and no attempt of it runs (an attempt stopped
after its job's DONE still has its ENDED to come). Runs on the pool's manager thread, under
its lock, when ``Ledger.rotate`` has opened the next file.

Crash safety, step by step (``STEPS``; a crash or an error between any two loses nothing
and ``ledger.pending`` stays exact):

1. ``write``: the kept records go to ``ledger-compact.tmp`` (no ledger file's name:
   readers never see it), then it is synced;
2. ``rename``: it becomes ``ledger-EPOCH-PART.shwj``, sorting after every file it replaces
   and before the one being written; its HEADER says ``compacted``: from then on readers
   (``ledger.retained``) skip every file before it, whether or not it is still there;
3. ``unlink``: the files it replaces are removed, then the directory is synced.

A ``ledger-compact.tmp`` left by a crash is removed by the next compaction.

For the audit, retention means: the rules judge every job whose records are retained, each
whole (its SUBMITTED and every attempt); a settled job's records are gone and it is judged
no more. ``journal_jobs_bytes=0`` keeps every file (nothing is dropped).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from ....journal import format as F
from .. import ledger as L

if TYPE_CHECKING:  # pragma: no cover
    from . import Ledger

TMP = "ledger-compact.tmp"
STEPS = ("write", "rename", "unlink")


def _step(name: str) -> None:
    """Between two steps (tests replace it to fail there, as a crash would)."""


def settled(records: list[list[Any]], running: set[int]) -> set[int]:
    """The jobs of `records` with a DONE and no attempt in `running`."""
    return {r[1] for r in records if r[0] == L.DONE} - running


def kept_records(files: list[list[list[Any]]], drop: set[int]) -> list[list[Any]]:
    """The records of `files` (in order) that are not of a job in `drop`, each run's HEADER
    before its first kept record."""
    out: list[list[Any]] = []
    for records in files:
        header: list[Any] | None = None
        for rec in records:
            if rec[0] == L.HEADER:
                header = [*rec[:7], False]
            elif rec[1] not in drop:
                if header is not None:
                    out.append(header)
                    header = None
                out.append(rec)
    return out


def compact(lg: Ledger, part: int, step: Callable[[str], None] | None = None) -> int:
    """Compact every ledger file before `lg`'s current one into part `part` of its epoch
    (module doc); returns the bytes it wrote."""
    step = step or _step
    d = lg.directory
    tmp = os.path.join(d, TMP)
    if os.path.lexists(tmp):
        os.unlink(tmp)
    files = [(p, recs) for p, recs in L.retained(d) if p != lg.path]
    if not files:
        return 0
    everything = [r for _, recs in files for r in recs]
    kept = kept_records([recs for _, recs in files], settled(everything, lg.running))
    data = bytearray(F.frame(msgpack.packb(lg.header(part, True)), L.FRAMING))
    for rec in kept:
        data += F.frame(msgpack.packb(rec), L.FRAMING)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    step("write")
    os.rename(tmp, os.path.join(d, L.file_name(lg.epoch, part)))
    _sync_dir(d)
    step("rename")
    for p in L.ledger_files(d):  # what it replaces, lingering after a crash too
        if L.order(p) < (lg.epoch, part):
            os.unlink(p)
    _sync_dir(d)
    step("unlink")
    return len(data)


def _sync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
