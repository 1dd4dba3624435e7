"""The watchdog's verdict as the service header holds it: the two words the supervisor's
watchdog (shmwheel/service/supervisor/watchdog.py) alone writes, ``W_HEALTH`` (the state) and
``W_HEALTH_REASONS`` (a bit per reason), and their decoding, which any attached process
reads (``stats()["health"]``, ``shmwheel status``, a client refusing new timers while the
service has failed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import layout as L

ENV = "SHMWHEEL_WATCHDOG"  # "0" in the embedding process's environment turns it off
LATE_S = 2.0  # timers due this long ago and not yet run: degraded

OK, DEGRADED, FAILED = 0, 1, 2
STATES = ("ok", "degraded", "failed")

# bit i of W_HEALTH_REASONS: (name, the state it puts the service in, what it means)
REASONS: tuple[tuple[str, int, str], ...] = (
    ("stopped", DEGRADED, "a process stayed stopped (SIGSTOP): killed, restarted"),
    ("stalled", DEGRADED, "coordinator or reaper had work, made no progress: killed"),
    ("ring_index", DEGRADED, "a ring index out of range: re-derived or skipped"),
    ("header", DEGRADED, "a header word broke its invariant: restored"),
    ("late", DEGRADED, f"timers due more than {LATE_S:g} s ago not yet run"),
    ("restart_rate", FAILED, "a role restarts too fast: backing off, new timers refused"),
    ("ring_unrepairable", FAILED, "a result ring index could not be re-derived"),
    ("watchdog_off", OK, f"the watchdog is disabled ({ENV}=0)"),
    ("restarts", DEGRADED, "a role restarted several times in a short window"),
    ("stuck", DEGRADED, "an executor is stuck in one task: the others take its timers"),
)
BIT = {name: 1 << i for i, (name, _, _) in enumerate(REASONS)}


def read_health(header: np.ndarray) -> dict[str, Any]:
    """``{"state": "ok" | "degraded" | "failed", "reasons": [names]}`` from the header."""
    state, bits = int(header[L.W_HEALTH]), int(header[L.W_HEALTH_REASONS])
    return {
        "state": STATES[state] if 0 <= state < len(STATES) else "failed",
        "reasons": [name for name, _, _ in REASONS if bits & BIT[name]],
    }
