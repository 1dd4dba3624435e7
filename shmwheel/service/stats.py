"""The service's figures, read from its shared counters by any attached process."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..segment import contract as C
from ..segment import layout as L
from ..segment.health import read_health

if TYPE_CHECKING:  # pragma: no cover
    from .forkserver import RoleProcess


def percentile_ms(hist: np.ndarray, q: float) -> float:
    """Upper edge (ms) of the histogram bucket holding the q-quantile; 0 when empty."""
    total = int(hist.sum())
    if total == 0:
        return 0.0
    i = int(np.searchsorted(np.cumsum(hist), q * total, side="left"))
    return 0.0 if i == 0 else 2 ** (i / C.HIST_PER_OCTAVE) / 1000.0


def lateness_summary(hist: np.ndarray) -> dict[str, float]:
    """p50 / p99 / p999 / max (ms, bucket upper edges) of a lateness histogram."""
    late = {f"p{k}": percentile_ms(hist, q) for k, q in (("50", 0.5), ("99", 0.99), ("999", 0.999))}
    nz = np.flatnonzero(hist)
    late["max"] = 0.0 if len(nz) == 0 else 2 ** (int(nz[-1]) / C.HIST_PER_OCTAVE) / 1000.0
    return late


def read_stats(
    mem: L.ServiceMemory,
    procs: Mapping[str, RoleProcess] | None = None,
    restarts: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The service's figures from its shared counters; any attached process can call this
    (the supervisor adds its restart counts and its view of its children)."""
    c = mem.counters.sum(axis=0)
    hist = mem.hist.sum(axis=0)
    late = lateness_summary(hist)
    state = C.gs_state(mem.nodes()[:, C.F_GS])
    # scheduled, not cancelled, not yet fired: submitted (its record not yet linked),
    # linked, or an operation completed and waiting for its task. Counted from the slots'
    # states, each read once: the sum of the wheel's linked count and the rings' backlog
    # counted a batch twice while the coordinator moved it off a ring
    pending = int(
        np.count_nonzero(
            (state == C.ST_PENDING)
            | (state == C.ST_SUBMITTED)
            | (state == C.ST_COMPLETED)
            | (state == C.ST_RESETTING)
        )
    )
    # fired and handed to an executor, outcome not settled yet (a cancel of a firing
    # timer leaves it STOPPING until then): "pending" no longer counts these
    in_flight = int(np.count_nonzero((state == C.ST_FIRING) | (state == C.ST_STOPPING)))
    processes = {}
    pids = {
        "coordinator": int(mem.header[L.W_PID_COORDINATOR]),
        "reaper": int(mem.header[L.W_PID_REAPER]),
    }
    pids.update({f"exec{i}": int(pid) for i, pid in enumerate(mem.exec_table[:, L.X_PID])})
    for role, pid in pids.items():
        p = (procs or {}).get(role)
        if p is not None:  # the supervisor knows its children best (a fresh restart)
            pid, alive = p.pid, p.poll() is None
        else:
            import psutil  # here, not at import: `import shmwheel` stays fast

            alive = pid > 0 and psutil.pid_exists(pid)
        processes[role] = {"pid": pid, "alive": alive}
    return {
        "pending": pending,
        "in_flight": in_flight,
        "scheduled": int(c[C.C_SCHEDULED]),
        "fired": int(c[C.C_FIRED]),
        "cancelled": int(c[C.C_CANCELLED]),
        "resets": int(c[C.C_RESETS]),
        "completed": int(c[C.C_COMPLETED]),
        "task_errors": int(c[C.C_ERRORS]),
        "crashed": int(c[C.C_CRASHED]),
        "rearmed": int(c[C.C_REARMED]),
        "early": int(c[C.C_EARLY]),
        "ring_garbage": int(c[C.C_GARBAGE]),
        "ring_stale": int(c[C.C_STALE]),
        "retired": int(c[C.C_RETIRED]),
        # timers the reaper took from a stuck executor's ring to the others (reaper.py)
        "taken_over": int(c[C.C_TAKEN_OVER]),
        "stuck_executors": [int(i) for i in np.flatnonzero(mem.exec_table[:, L.X_STUCK])],
        "repairs": int(mem.header[L.W_REPAIRS]),
        "lateness_ms": late,
        "lateness_samples": int(hist.sum()),
        # bucket 0: < 1 us; bucket i: [2**((i-1)/8), 2**(i/8)) us (for windows of a soak)
        "lateness_histogram": hist.tolist(),
        "processes": processes,
        "restarts": dict(restarts) if restarts is not None else restarts_of(mem),
        "clients": int((mem.ring_table[:, L.RT_STATE] != L.RING_FREE).sum()),
        # the supervisor's watchdog's verdict (service/supervisor/watchdog.py): state and reasons
        "health": read_health(mem.header),
        "operations": {
            "watched": int(c[C.C_OPS_WATCHED]),
            "completed": int(c[C.C_OPS_COMPLETED]),
            "expired": int(c[C.C_OPS_EXPIRED]),
            # entries in the watch lists (one per key of a live operation, until purged)
            "watch_entries": int(mem.watch[C.WT_USED]),
            "watch_capacity": int(mem.watch[C.WT_CAPACITY]),
            "purged": int(mem.watch[C.WT_PURGED]),
        },
        **({"journal": journal_stats(mem, c)} if mem.config.journal_dir else {}),
    }


def journal_stats(mem: L.ServiceMemory, c: np.ndarray) -> dict[str, Any]:
    """What the journal has written, what its directory holds on disk, and its faults."""
    from ..journal.write.faults import read_faults

    directory = mem.config.journal_dir
    disk = segments = 0
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name.endswith(".shwj"):
                    segments += 1
                    disk += e.stat().st_size
    except OSError:
        pass
    return {
        "directory": directory,
        "epoch": mem.config.journal_epoch,
        "fsync": mem.config.journal_fsync,
        "bytes_written": int(c[C.C_JOURNAL_BYTES]),
        "syncs": int(c[C.C_JOURNAL_SYNCS]),
        "disk_bytes": disk,
        "segments": segments,
        "recovered": int(mem.header[L.W_RECOVERED]),
        # the writers that cannot write now, by role (journal/write/writer.py, "Faults");
        # {} when none
        "faults": read_faults(mem),
    }


def restarts_of(mem: L.ServiceMemory) -> dict[str, int]:
    """The restart counts the supervisor keeps in the segment (roles restarted at least
    once)."""
    counts = {
        "coordinator": int(mem.header[L.W_RESTARTS_COORDINATOR]),
        "reaper": int(mem.header[L.W_RESTARTS_REAPER]),
    }
    counts.update({f"exec{i}": int(n) for i, n in enumerate(mem.exec_table[:, L.X_RESTARTS])})
    return {role: n for role, n in counts.items() if n}
