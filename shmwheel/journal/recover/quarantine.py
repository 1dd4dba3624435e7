"""Taking damaged segments out of a journal, untouched: what a start with
``journal_on_damage="salvage"`` does after its compaction (``recovery.py``) and what
``shmwheel journal repair`` does offline (``repair.py``).

Nothing is deleted and nothing is rewritten. A damaged segment is moved, untouched, to
``DIR/damaged/`` (a rename: the same filesystem), its name first recorded in a RETIRED
record of a segment that already holds, synced, every timer and operation the intact
records prove pending.
"""

from __future__ import annotations

import logging
import os
import time

from ...errors import JournalError
from .. import format as F
from ..verdict import DAMAGED_DIR
from ..write.writer import SegmentWriter

log = logging.getLogger("shmwheel.journal")


def quarantine(writer: SegmentWriter, paths: list[str]) -> list[str]:
    """Move each segment of `paths` to DIR/damaged/ untouched, after recording their names
    (RETIRED) in `writer`'s segment, synced with everything it holds; returns where they
    went. A name taken there already gets a suffix (.1, .2, ...): nothing is replaced."""
    if not paths:
        return []
    names = [os.path.basename(p) for p in paths]
    writer.append(F.body(F.RETIRED, time.monotonic_ns() // 1000, names))
    if not writer.commit():
        raise JournalError(f"journal {writer.opts.directory}: cannot record what it moves")
    directory = os.path.dirname(paths[0])
    dest = os.path.join(directory, DAMAGED_DIR)
    os.makedirs(dest, mode=0o700, exist_ok=True)
    moved = []
    for path, name in zip(paths, names, strict=True):
        target, k = os.path.join(dest, name), 0
        while os.path.lexists(target):
            k += 1
            target = os.path.join(dest, f"{name}.{k}")
        os.rename(path, target)
        moved.append(target)
        log.warning("journal %s: moved the damaged segment %s to %s/", directory, name, dest)
    for d in (dest, directory):
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return moved
