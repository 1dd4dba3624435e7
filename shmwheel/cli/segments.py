"""``shmwheel ls`` and ``shmwheel clean``: this user's services on this host, found from
their segments in /dev/shm (``shmwheel.NAME``, docs/operating.md), and removing those
whose owner process is gone — what ``TimerService.start()`` sweeps."""

from __future__ import annotations

import argparse
import json
import logging
import pwd
import sys
from dataclasses import asdict, dataclass
from typing import Any

from .command import add_command
from .observe import fmt_bytes

log = logging.getLogger("shmwheel.cli")

LS_EPILOG = """\
examples:
  shmwheel ls                  NAME, OWNER (the supervisor's pid), STATE, SIZE, ...
  shmwheel ls --json
  shmwheel ls --all            also what is not a service of this user, and why

STATE is running (its owner is alive), stopping, or stale (its owner is gone: `shmwheel clean`
removes it). With --all, also: foreign (another user holds the name: never opened,
swept or salvaged, and that name is unavailable to this user) and damaged (this user's,
but not a service segment of this shmwheel: a garbage header, another layout version,
a wrong size or mode, an odd name, an owner pid no process can have); a USER column
names each entry's owner and a note under the table says what is wrong. Neither kind is
ever removed (by hand: rm /dev/shm/shmwheel.NAME, as its owner or root).
"""

CLEAN_EPILOG = """\
examples:
  shmwheel clean --dry-run     list what would be removed, remove nothing
  shmwheel clean               remove it

removes the segment and semaphores of every service of this user whose owner process is
gone, and semaphores whose segment is gone; a dead service with a journal is first
salvaged into its journal (docs/journal.md). Running services are never touched, nor
anything of another user or that is not a service segment (`shmwheel ls --all`).
"""


@dataclass
class ServiceInfo:
    """One /dev/shm/shmwheel.NAME entry, as ``ls`` shows it (census.Entry for a command)."""

    name: str
    owner_pid: int
    state: str  # running | stopping | stale; with --all also foreign | damaged
    size_bytes: int
    capacity: int | None = None
    executors: int | None = None
    journal: str | None = None
    problem: str | None = None  # why it is foreign or damaged
    uid: int | None = None
    user: str | None = None


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``ls`` and ``clean`` subcommands to `sub`."""
    p = add_command(
        sub,
        "ls",
        common,
        help="list this user's services on this host",
        description=(
            "List the services of this user on this host, from their "
            "shared-memory segments, with their owner pid and liveness; with --all, "
            "also every other /dev/shm/shmwheel.* entry (another user's, or damaged)."
        ),
        epilog=LS_EPILOG,
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.add_argument(
        "--all",
        "-a",
        action="store_true",
        help="also list entries that are not a service of this user (foreign, damaged)",
    )
    p.set_defaults(execute=execute_ls, default_log_level="WARNING")
    p = add_command(
        sub,
        "clean",
        common,
        help="remove what dead services left",
        description=("Unlink the segments and semaphores of services whose owner process is gone."),
        epilog=CLEAN_EPILOG,
    )
    p.add_argument("--dry-run", "-n", action="store_true", help="only list what would be removed")
    p.set_defaults(execute=execute_clean, default_log_level="INFO")


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def scan(include_all: bool = False) -> list[ServiceInfo]:
    """This user's services in /dev/shm, sorted by name; with `include_all`, every other
    ``shmwheel.*`` entry too (foreign or damaged: segment/census.py)."""
    from ..segment import census

    found = []
    for e in census.entries():
        if not (e.service or include_all):
            continue
        cfg = e.config
        found.append(
            ServiceInfo(
                e.name,
                e.owner_pid,
                e.state,
                e.size,
                cfg.capacity if cfg else None,
                cfg.executors if cfg else None,
                (cfg.journal_dir or None) if cfg else None,
                e.problem,
                e.uid,
                _user(e.uid),
            )
        )
    return found


def orphan_semaphores() -> list[str]:
    """This user's service semaphores (file names) whose segment is gone."""
    from ..segment import census

    return [p.name for p in census.orphan_semaphores()]


def _shown(name: str) -> str:
    """A name as a table shows it: an odd one (a newline, a space) escaped and quoted."""
    from ..segment import shm

    return name if shm.valid_name(name) else repr(name)


def execute_ls(args: argparse.Namespace) -> int:
    """Print this user's services (with --all every entry); 0 even when there are none."""
    from ..segment.census import SERVICE_STATES

    everything = scan(include_all=True)
    services = everything if args.all else [s for s in everything if s.state in SERVICE_STATES]
    if args.json:
        json.dump([asdict(s) for s in services], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    skipped = len(everything) - len(services)
    if not services:
        print("no shmwheel services of this user on this host")
    else:
        user = f"{'USER':<10} " if args.all else ""
        print(
            f"{'NAME':<32} {user}{'OWNER':>8} {'STATE':<10} {'SIZE':>10} {'CAPACITY':>10} "
            f"{'EXEC':>4}  JOURNAL"
        )
        for s in services:
            user = f"{s.user or '-':<10} " if args.all else ""
            print(
                f"{_shown(s.name):<32} {user}{s.owner_pid or '-':>8} {s.state:<10} "
                f"{fmt_bytes(s.size_bytes):>10} "
                f"{s.capacity if s.capacity is not None else '-':>10} "
                f"{s.executors if s.executors is not None else '-':>4}  {s.journal or '-'}"
            )
        for s in services:
            if s.problem:
                print(f"  {_shown(s.name)}: {s.problem}")
    if skipped:
        log.warning(
            "%d other /dev/shm/%s* entries are not services of this user (another user's, "
            "or damaged): `shmwheel ls --all` lists them",
            skipped,
            "shmwheel.",
        )
    return 0


def execute_clean(args: argparse.Namespace) -> int:
    """Remove (or with --dry-run list) what services with a dead owner left; 0."""
    from ..journal.recover.salvage import salvage_stale
    from ..segment import census, shm

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
    removed = census.sweep_stale(salvage_stale)
    for name in removed:
        print(f"removed {name}")
    for sem in orphans:
        if not (shm.SHM_DIR / sem).exists():
            print(f"removed semaphore {sem}")
    for s in stale:
        if s.name not in removed and (shm.SHM_DIR / (shm.PREFIX + s.name)).exists():
            log.warning(
                "kept %s: its journal %s is in use or another user's (the service "
                "starting on it salvages it)",
                s.name,
                s.journal,
            )
    if not removed and not orphans:
        print("nothing to clean")
    return 0
