"""What a judged journal is made of (``check`` judges, ``chains`` applies the journal-wide
rules): the severities and scopes of a problem (``check``'s module doc says what each
means), ``Problem``, a ``SegmentReport`` per file and the ``Inspection`` of a directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from . import format as F
from .reader import Reject
from .scan import JournalState, Part

DAMAGE, TORN, WARNING = "damage", "torn", "warning"
FILE, CHAIN = "file", "chain"
DAMAGED_DIR = "damaged"  # where a salvage moves damaged segments, untouched
# A start's coordinator and reaper begin their first segments within well under a second
# of each other: an epoch with one's segments and none of the other's, whose present ones
# span less than this, is a service killed while starting (a warning), not damage
START_GRACE_S = 10.0
WRITERS = ("coordinator", "reaper")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a journal: where (a segment file, "" for the journal; a byte
    offset, -1 for none), what, which records it costs, how bad (module doc)."""

    file: str
    offset: int
    what: str
    affected: str
    severity: str
    scope: str = FILE

    def __str__(self) -> str:
        where = os.path.basename(self.file) if self.file else "journal"
        at = f" at byte {self.offset}" if self.offset >= 0 else ""
        return f"{where}{at}: {self.what}" + (f": {self.affected}" if self.affected else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": os.path.basename(self.file),
            "offset": self.offset,
            "what": self.what,
            "affected": self.affected,
            "severity": self.severity,
            "scope": self.scope,
        }


@dataclass
class SegmentReport:
    """One segment file as read: what its header and chain records say, the problems its
    bytes have, and its records' part of the pending set."""

    path: str
    name: F.SegmentName
    size: int = 0
    version: int = 0
    header: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    retired: list[str] = field(default_factory=list)
    records: int = 0
    rejects: list[Reject] = field(default_factory=list)
    torn_at: int = -1  # where a tail that is not a whole record begins
    frame: list[Problem] = field(default_factory=list)  # its bytes' own problems
    problems: list[Problem] = field(default_factory=list)  # all of its, after analyse
    part: Part | None = None
    foreign: bool = False
    last_us: int = 0  # the wall clock (µs) of its last record: its writer was alive then

    @property
    def basename(self) -> str:
        return os.path.basename(self.path)

    @property
    def prev(self) -> str | None:
        """The predecessor its header names ("" for a first segment; None: unknown, a
        version 1 segment or no header)."""
        return None if self.header is None else self.header.get("prev")

    @property
    def damaged(self) -> bool:
        """Its file is damaged (a salvage moves it to DIR/damaged/)."""
        return any(p.severity == DAMAGE and p.scope == FILE for p in self.problems)


@dataclass
class Inspection:
    """A journal judged (module doc): its segments, their problems and the journal's,
    and the state its records prove (``state``: what a start would re-arm)."""

    directory: str
    reports: list[SegmentReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    state: JournalState = field(default_factory=JournalState)
    base: int = 0  # the newest epoch a start began: older ones are superseded

    @property
    def damage(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == DAMAGE]

    @property
    def damaged(self) -> list[str]:
        """The damaged segment files (paths), which a salvage moves to DIR/damaged/."""
        return [r.path for r in self.reports if r.damaged]

    def intact(self) -> list[str]:
        """The segment files read whole and intact (or ending in a dead writer's torn
        tail): the only ones retention may delete."""
        return [r.path for r in self.reports if not r.damaged and not r.foreign]

    def newest_header(self) -> dict[str, Any] | None:
        """The header of the newest segment of this journal's own that has one."""
        own = [r for r in self.reports if r.header is not None and not r.foreign]
        return own[-1].header if own else None

    def refusal(self) -> str:
        """A RecoveryError's message: what is damaged, what it costs, what to do."""
        d, dmg = self.directory, self.damage
        lines = [f"journal {d} is damaged or incomplete; nothing in it was changed:"]
        lines += [f"  {p}" for p in dmg[:20]]
        if len(dmg) > 20:
            lines.append(f"  ... and {len(dmg) - 20} more (`shmwheel journal check {d}`)")
        lines.append(
            f"Its intact records prove {len(self.state.pending.ids)} timers and "
            f"{len(self.state.ops.pending())} operations pending. Start with "
            f"journal_on_damage='salvage' (re-arms those, moves the damaged segments to "
            f"{os.path.join(d, DAMAGED_DIR)}/) or run `shmwheel journal repair {d}`."
        )
        return "\n".join(lines)
