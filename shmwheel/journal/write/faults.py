"""The journal's faults as the service header shows them (writer.py, "Faults"): each
writer's three words, what ``stats()["journal"]["faults"]`` and ``shmwheel status`` show,
and the JournalError a client raises while the gate (layout.W_JREFUSE) is closed.
"""

from __future__ import annotations

import errno
import os
import time
from datetime import UTC, datetime
from typing import Any

from ...errors import JournalError, ShmwheelError
from ...segment import layout as L
from ...segment.health import FAILED, read_health
from ...segment.layout import ServiceMemory

# a writer's fault words, from L.W_JFAULT_COORDINATOR / L.W_JFAULT_REAPER (L.JFAULT_WORDS)
FW_ERRNO, FW_SINCE_MS, FW_HELD = 0, 1, 2


def read_faults(mem: ServiceMemory) -> dict[str, dict[str, Any]]:
    """The journal faults in force, by writer role, from the service header: errno and
    its name and text, since when (wall clock, ISO 8601, and seconds ago), bytes held."""
    out = {}
    for role, first in (
        ("coordinator", L.W_JFAULT_COORDINATOR),
        ("reaper", L.W_JFAULT_REAPER),
    ):
        code, since_ms, held = (int(w) for w in mem.header[first : first + L.JFAULT_WORDS])
        if not code:
            continue
        out[role] = {
            "errno": code,
            "error": errno.errorcode.get(code, str(code)),
            "message": os.strerror(code),
            "since": datetime.fromtimestamp(since_ms / 1000, UTC).isoformat(
                timespec="milliseconds"
            ),
            "seconds": max(0.0, time.time() - since_ms / 1000),
            "held_bytes": held,
        }
    return out


def refusal(mem: ServiceMemory) -> ShmwheelError:
    """The JournalError a client raises while the journal has a fault (what, where, since
    when, and what still holds); a ShmwheelError while the supervisor's watchdog says
    the service failed (segment/health.py), which closes the same gate."""
    if int(mem.header[L.W_HEALTH]) >= FAILED:
        reasons = ", ".join(read_health(mem.header)["reasons"])
        return ShmwheelError(
            f"service {mem.service!r} has failed ({reasons}): new timers are refused until "
            f"the supervisor's watchdog sees it recover (see its log); timers already "
            f"accepted still run, exactly once"
        )
    faults = read_faults(mem)
    what = "; ".join(
        f"the {role} cannot write: {f['message']} ({f['error']}) since {f['since']}"
        for role, f in faults.items()
    )
    return JournalError(
        f"journal {mem.config.journal_dir}: {what or 'a write failed'}. New timers are "
        f"refused until the disk takes writes again (free space, or make it writable); "
        f"timers already accepted still run, and are written once it does"
    )
