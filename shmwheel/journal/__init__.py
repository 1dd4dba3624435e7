"""The journal: every timer's lifecycle on disk, for whole-service recovery and for audit
(docs/journal.md).

    from shmwheel import journal
    for segment in journal.read("/var/lib/myapp/timers"):
        segment.path, segment.header, segment.records, segment.rejects
    for rec in journal.records("/var/lib/myapp/timers"):
        ...  # {"kind": "scheduled", "id": ..., "t_us": ..., ...}

``TimerService(journal=DIR)`` writes it and recovers from it; this package is also the
one decoder (``reader``) that recovery, the tests and the audit pipeline read through.

By stage: ``write/`` is the write path of a running service, ``recover/`` reads a journal
back into one (recovery, salvage, repair). The modules here are what every stage shares:
the format (format), the one decoder (reader), a directory's options and lock
(directory), and judging a journal (check, with chains, verdict and scan: what is damaged
and what is pending). They import neither room.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _lazy
from ..errors import JournalInUse
from .format import FIELDS, KIND_NAMES, OUTCOMES, as_dict, segment_files

# The reader and a directory's options import numpy: loaded on first use, so that what
# needs only the format (a job pool's ledger) does not pay for it. Type checkers see the
# real imports below.
_WHERE = {
    "JournalOptions": ".directory",
    **dict.fromkeys(("Reject", "Segment", "parse_segment", "read", "read_segment", "records"),
                    ".reader"),
}  # fmt: skip

if TYPE_CHECKING:  # pragma: no cover
    from .directory import JournalOptions
    from .reader import Reject, Segment, parse_segment, read, read_segment, records


def __getattr__(name: str) -> Any:
    return _lazy.load(name, __name__, _WHERE, globals())


__all__ = [
    "FIELDS",
    "KIND_NAMES",
    "OUTCOMES",
    "JournalInUse",
    "JournalOptions",
    "Reject",
    "Segment",
    "as_dict",
    "parse_segment",
    "read",
    "read_segment",
    "records",
    "segment_files",
]
