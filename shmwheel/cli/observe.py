"""What ``status`` and ``top`` show: a running service's figures read from its segment
(the same words ``TimerService.stats()`` reads), plus the health of its processes from
psutil. Attaching maps the segment read-only in spirit: it claims no client ring and
writes nothing, so watching a service never changes it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import psutil

    from ..segment.layout import ServiceMemory
    from ..service.jobs.link import StatsReader

log = logging.getLogger("shmwheel.cli")


class CommandError(Exception):
    """A failure a command reports on stderr (through logging) and turns into its exit
    status: 1 for a service that is not there or cannot be read, 2 for bad arguments."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Refused(CommandError):
    """A refusal: the command will not use what it was given (a path that is not safe, one
    this user may not write). One line on stderr, exit status 2, no usage."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 2)


def service_name(text: str) -> str:
    """argparse type for a service name (1-64 letters, digits, '_' or '-')."""
    import argparse

    from ..segment import shm

    try:
        return shm.check_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seconds(text: str, zero: bool) -> float:
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
        least = "0 or more" if zero else "above 0"
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds {least}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type for an interval in seconds: a finite number above 0."""
    return _seconds(text, zero=False)


def sample_seconds(text: str) -> float:
    """argparse type for a sampling time: a finite number of seconds, 0 or more (0: do not
    wait, CPU% reads 0)."""
    return _seconds(text, zero=True)


def compact_json(value: Any, indent: int = 2, level: int = 0) -> str:
    """`value` as JSON, indented like ``json.dumps(indent=...)`` except that a list of
    scalars stays on one line (a 256-bucket histogram is one line, not 256)."""
    nested = isinstance(value, dict) or (
        isinstance(value, list) and any(isinstance(v, dict | list) for v in value)
    )
    if not nested or not value:
        return json.dumps(value)
    pad, end = " " * (indent * (level + 1)), " " * (indent * level)
    if isinstance(value, dict):
        items = [
            f"{pad}{json.dumps(str(k))}: {compact_json(v, indent, level + 1)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    items = [pad + compact_json(v, indent, level + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + end + "]"


def attach(name: str) -> ServiceMemory:
    """Map the running service `name`, or raise CommandError saying why it is not there
    (exit 1): no segment, a dead owner (stale), or stopping; Refused (exit 2) for a
    segment this code will not read (damaged, another user's, not permitted)."""
    import posix_ipc

    from ..errors import LayoutError
    from ..segment import layout as L
    from ..segment import shm

    path = shm.SHM_DIR / (shm.PREFIX + name)
    try:
        mem = L.ServiceMemory.attach(name)
    except LayoutError as e:
        if not path.exists():
            raise CommandError(
                f"no service {name!r} on this host (no {path}); "
                f"`shmwheel ls` lists the services there are"
            ) from None
        raise Refused(f"cannot read service {name!r}: {e}") from None
    except (posix_ipc.Error, OSError) as e:
        raise Refused(f"cannot open service {name!r} ({path}): {e}") from None
    owner = int(mem.header[L.W_OWNER])
    if not shm.pid_alive(owner):
        mem.close()
        raise CommandError(
            f"service {name!r} is not running: its owner process (pid {owner}) "
            f"is gone; `shmwheel clean` removes what it left in {shm.SHM_DIR}"
        )
    if mem.header[L.W_STOPPING]:
        mem.close()
        raise CommandError(f"service {name!r} is stopping")
    return mem


def gone_reason(mem: ServiceMemory) -> str | None:
    """Why an attached service is no longer running (None while it runs)."""
    from ..segment import layout as L
    from ..segment import shm

    owner = int(mem.header[L.W_OWNER])
    if mem.header[L.W_STOPPING]:
        return f"service {mem.service!r} stopped"
    if not shm.pid_alive(owner):
        return f"service {mem.service!r}: its owner process (pid {owner}) is gone"
    return None


class ProcessHealth:
    """CPU% and resident memory of processes by pid, from successive psutil samples (the
    first sample of a process primes its CPU counter and reads 0)."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def prime(self, pids: list[int]) -> None:
        """Start the CPU counters of `pids`, so that the next sample covers the interval."""
        for pid in pids:
            self._process(pid)

    def _process(self, pid: int) -> psutil.Process | None:
        import psutil

        if pid <= 0:
            return None
        p = self._procs.get(pid)
        if p is None:
            try:
                p = psutil.Process(pid)
                p.cpu_percent(None)
            except psutil.Error:
                return None
            self._procs[pid] = p
        return p

    def sample(self, pid: int) -> dict[str, Any]:
        """``{"cpu_percent", "rss_bytes"}`` of `pid` (None for a process that is gone)."""
        import psutil

        p = self._process(pid)
        if p is None:
            return {"cpu_percent": None, "rss_bytes": None}
        try:
            with p.oneshot():
                return {
                    "cpu_percent": round(p.cpu_percent(None), 1),
                    "rss_bytes": int(p.memory_info().rss),
                }
        except psutil.Error:
            self._procs.pop(pid, None)
            return {"cpu_percent": None, "rss_bytes": None}


def process_pids(mem: ServiceMemory) -> list[int]:
    """The supervisor's pid and every service process's recorded pid."""
    from ..segment import layout as L

    return [
        int(mem.header[L.W_OWNER]),
        int(mem.header[L.W_PID_COORDINATOR]),
        int(mem.header[L.W_PID_REAPER]),
        *(int(p) for p in mem.exec_table[:, L.X_PID]),
    ]


def job_reader(mem: ServiceMemory) -> StatsReader:
    """The reader of the job pool's figures of the attached service (over its job link)."""
    from ..segment import layout as L
    from ..service.jobs.link import StatsReader

    return StatsReader(mem.service, int(mem.header[L.W_OWNER]))


def read_jobs(jobs: StatsReader) -> dict[str, Any] | None:
    """The job pool's figures, None for a service without job workers or (logged as a
    warning) when its job link cannot be read."""
    from ..errors import ShmwheelError

    try:
        return jobs.read()
    except ShmwheelError as e:
        log.warning("the job pool's figures are not shown: %s", e)
        return None


def jobs_lines(j: dict[str, Any]) -> list[str]:
    """The job pool's figures as three lines of text: workers, what waits and runs, and
    the counts since the service started."""
    workers = j["workers"]
    alive = sum(1 for w in workers.values() if w["alive"])
    return [
        f"{alive}/{len(workers)} workers alive ("
        + ", ".join(
            f"{k} pid {fmt_opt(w['pid'])}{'' if w['alive'] else ' DEAD'}"
            for k, w in workers.items()
        )
        + f"), {j['worker_restarts']:,} worker restarts",
        f"queued {j['queued']:,}, running {j['running']:,}, backing off {j['backing_off']:,}",
        ", ".join(f"{k.replace('_', ' ')} {j[k]:,}" for k in JOB_COUNTS),
    ]


JOB_COUNTS = ("submitted", "succeeded", "failed", "timed_out", "retried", "stopped", "cancelled")


def snapshot(
    mem: ServiceMemory, health: ProcessHealth, jobs: StatsReader | None = None
) -> dict[str, Any]:
    """The service's ``stats()`` as any attached process sees them, with: ``service``,
    ``owner_pid``, ``time`` (epoch seconds), ``config``; a ``supervisor`` row first in
    ``processes``, each row with ``cpu_percent``, ``rss_bytes`` and ``restarts`` (as the
    supervisor counted them in the segment; None for the supervisor itself); ``rings``
    (claimed producer rings and the executors' dispatch rings, pending / capacity); and
    ``jobs``, read by `jobs`, when the service has job workers."""
    import numpy as np

    from ..segment import layout as L
    from ..segment import shm
    from ..service.stats import read_stats

    st = read_stats(mem)
    owner = int(mem.header[L.W_OWNER])
    processes: dict[str, dict[str, Any]] = {
        "supervisor": {"pid": owner, "alive": shm.pid_alive(owner)}
    }
    processes.update(st["processes"])
    restarts = st.get("restarts") or {}
    for role, row in processes.items():
        row.update(
            health.sample(row["pid"]) if row["alive"] else {"cpu_percent": None, "rss_bytes": None}
        )
        row["restarts"] = restarts.get(role, 0) if role != "supervisor" else None
    claimed = np.flatnonzero(mem.ring_table[:, L.RT_STATE] != L.RING_FREE)
    producer = [
        {
            "ring": int(i),
            "pid": int(mem.ring_table[i, L.RT_PID]),
            "pending": mem.producer[i].pending(),
            "capacity": mem.producer[i].capacity,
        }
        for i in claimed
    ]
    dispatch = [
        {"executor": i, "pending": r.pending(), "capacity": r.capacity}
        for i, r in enumerate(mem.dispatch)
    ]
    cfg = mem.config
    st.update(
        {
            "service": mem.service,
            "owner_pid": owner,
            "time": time.time(),
            "config": {
                "capacity": cfg.capacity,
                "executors": cfg.executors,
                "tick_ms": cfg.tick_ms,
                "wheel_size": cfg.wheel_size,
                "max_clients": cfg.max_clients,
                "ring_capacity": cfg.ring_capacity,
                "dispatch_capacity": cfg.dispatch_capacity,
                "tasks": {n: spec for n, spec in cfg.tasks},
                "journal": cfg.journal_dir or None,
            },
            "processes": processes,
            "rings": {"producer": producer, "dispatch": dispatch},
        }
    )
    pool = read_jobs(jobs) if jobs is not None else None
    if pool is not None:
        st["jobs"] = pool
    return st


def fmt_bytes(n: int | None) -> str:
    """1536 -> '1.5 KiB'; None -> '-'."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover


def fmt_ms(v: float) -> str:
    """Lateness in ms, with the precision the histogram has (about 9 %)."""
    return f"{v:.3g} ms" if v < 1000 else f"{v / 1000:.3g} s"


def fmt_opt(v: object, spec: str = "") -> str:
    """A value, or '-' for None."""
    return "-" if v is None else format(v, spec)
