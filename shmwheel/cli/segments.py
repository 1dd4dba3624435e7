"""``shmwheel ls`` and ``shmwheel clean``: this user's services on this host, found from
their segments in /dev/shm (``shmwheel.NAME``, docs/operations.md), and removing those
whose owner process is gone — what ``TimerService.start()`` sweeps."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from textwrap import fill
from typing import Any

from .observe import fmt_bytes

log = logging.getLogger("shmwheel.cli")

LS_EPILOG = """\
examples:
  shmwheel ls                  NAME, OWNER (the supervisor's pid), STATE, SIZE, ...
  shmwheel ls --json

STATE is running (its owner is alive), stopping, stale (its owner is gone: `shmwheel clean`
removes it) or unreadable (not a segment of this shmwheel version; left alone).
"""

CLEAN_EPILOG = """\
examples:
  shmwheel clean --dry-run     list what would be removed, remove nothing
  shmwheel clean               remove it

removes the segment and semaphores of every service of this user whose owner process is
gone, and semaphores whose segment is gone; a dead service with a journal is first
salvaged into its journal (docs/journal.md). Running services are never touched.
"""


@dataclass
class ServiceInfo:
    """One service segment of this user, as ``ls`` shows it."""

    name: str
    owner_pid: int
    state: str  # running | stopping | stale | unreadable
    size_bytes: int
    capacity: int | None = None
    executors: int | None = None
    journal: str | None = None
    problem: str | None = None  # why it is unreadable


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``ls`` and ``clean`` subcommands to `sub`."""
    p = sub.add_parser(
        "ls",
        parents=[common],
        help="list this user's services on this host",
        description=fill(
            "List the services of this user on this host, from their "
            "shared-memory segments, with their owner pid and liveness."
        ),
        epilog=LS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(execute=execute_ls, default_log_level="WARNING")
    p = sub.add_parser(
        "clean",
        parents=[common],
        help="remove what dead services left",
        description=fill(
            "Unlink the segments and semaphores of services whose owner process is gone."
        ),
        epilog=CLEAN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dry-run", "-n", action="store_true", help="only list what would be removed")
    p.set_defaults(execute=execute_clean, default_log_level="INFO")


def scan() -> list[ServiceInfo]:
    """Every service segment of this user in /dev/shm, sorted by name."""
    import posix_ipc

    from ..errors import LayoutError
    from ..segment import layout as L
    from ..segment import shm

    found = []
    for path in sorted(shm.SHM_DIR.glob(shm.PREFIX + "*")):
        name = path.name[len(shm.PREFIX) :]
        try:
            shm.check_name(name)
            st = path.stat()
        except (ValueError, OSError):
            continue
        if st.st_uid != os.getuid():
            continue
        try:
            seg = shm.Segment(shm.segment_name(name))
        except (LayoutError, posix_ipc.Error, OSError):
            continue  # gone meanwhile
        try:
            try:
                cfg = L.read_config(seg)
            except LayoutError as e:
                found.append(ServiceInfo(name, 0, "unreadable", st.st_size, problem=str(e)))
                continue
            owner = int(seg.words[L.W_OWNER])
            stopping = bool(seg.words[L.W_STOPPING])
        finally:
            seg.close()
        state = (
            "stale"
            if owner > 0 and not shm.pid_alive(owner)
            else "stopping"
            if stopping
            else "running"
        )
        found.append(
            ServiceInfo(
                name, owner, state, st.st_size, cfg.capacity, cfg.executors, cfg.journal_dir or None
            )
        )
    return found


def orphan_semaphores() -> list[str]:
    """This user's service semaphores (file names) whose segment is gone."""
    from ..segment import shm

    out = []
    for path in sorted(shm.SHM_DIR.glob("sem." + shm.PREFIX + "*")):
        service = path.name[len("sem." + shm.PREFIX) :].rsplit(".", 1)[0]
        try:
            mine = path.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and not (shm.SHM_DIR / (shm.PREFIX + service)).exists():
            out.append(path.name)
    return out


def execute_ls(args: argparse.Namespace) -> int:
    """Print this user's services; 0 even when there are none."""
    services = scan()
    if args.json:
        json.dump([asdict(s) for s in services], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not services:
        print("no shmwheel services of this user on this host")
        return 0
    print(
        f"{'NAME':<32} {'OWNER':>8} {'STATE':<10} {'SIZE':>10} {'CAPACITY':>10} "
        f"{'EXEC':>4}  JOURNAL"
    )
    for s in services:
        print(
            f"{s.name:<32} {s.owner_pid or '-':>8} {s.state:<10} {fmt_bytes(s.size_bytes):>10} "
            f"{s.capacity if s.capacity is not None else '-':>10} "
            f"{s.executors if s.executors is not None else '-':>4}  {s.journal or '-'}"
        )
    for s in services:
        if s.problem:
            log.warning("%s: %s", s.name, s.problem)
    return 0


def execute_clean(args: argparse.Namespace) -> int:
    """Remove (or with --dry-run list) what services with a dead owner left; 0."""
    from ..journal.salvage import salvage_stale
    from ..segment import layout as L
    from ..segment import shm

    stale = [s for s in scan() if s.state == "stale"]
    orphans = orphan_semaphores()
    if args.dry_run:
        for s in stale:
            print(
                f"would remove {s.name} (owner pid {s.owner_pid} is gone"
                f"{'; its journal ' + s.journal + ' gets what it held' if s.journal else ''})"
            )
        for sem in orphans:
            print(f"would remove semaphore {sem} (its segment is gone)")
        if not stale and not orphans:
            print("nothing to clean")
        return 0
    removed = shm.sweep_stale(L.owner_of, salvage_stale)
    for name in removed:
        print(f"removed {name}")
    for sem in orphans:
        if not (shm.SHM_DIR / sem).exists():
            print(f"removed semaphore {sem}")
    for s in stale:
        if s.name not in removed and (shm.SHM_DIR / (shm.PREFIX + s.name)).exists():
            log.warning(
                "kept %s: its journal %s is in use (the service starting on it salvages it)",
                s.name,
                s.journal,
            )
    if not removed and not orphans:
        print("nothing to clean")
    return 0
