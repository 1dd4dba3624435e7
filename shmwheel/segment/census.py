"""What is in /dev/shm under shmwheel's names, judged for this user: the services ``shmwheel
ls`` lists and ``TimerService.start()`` / ``shmwheel clean`` sweep, and everything else.

Every ``/dev/shm/shmwheel.*`` entry is one of:

* ``running``, ``stopping`` or ``stale`` (its owner process is gone): a segment of this
  user that reads as a service of this layout version;
* ``foreign``: held by another user. Never opened past fstat, never mapped, swept or
  salvaged; its name is unavailable to this user;
* ``damaged``: this user's, but not a valid service segment: a name that is not a service
  name, a size that cannot be a segment, group or other permission bits, a garbage header
  or another layout version, an owner pid no process can have.

Only stale services are ever removed; foreign and damaged entries are skipped, each logged
at warning once per process, and ``shmwheel ls --all`` shows them. ``create`` makes a
service's segment, and a name already taken then says what holds it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import posix_ipc

from ..errors import LayoutError
from . import layout as L
from . import shm, trust

log = logging.getLogger("shmwheel.segment")

SERVICE_STATES = ("running", "stopping", "stale")  # a service of this user
_warned: set[tuple[str, int]] = set()  # (file name, inode) of entries already logged


@dataclass(frozen=True)
class Entry:
    """One ``/dev/shm/shmwheel.NAME`` entry and what it is (module doc)."""

    name: str  # the part after "shmwheel." (any characters for a damaged or foreign one)
    state: str  # running | stopping | stale | foreign | damaged
    uid: int
    size: int
    inode: int
    owner_pid: int = 0  # the supervisor's, for a service
    config: L.ServiceConfig | None = None
    problem: str | None = None  # why it is foreign or damaged

    @property
    def service(self) -> bool:
        """Whether this is a service of this user (running, stopping or stale)."""
        return self.state in SERVICE_STATES


def _is_role(pid: int, service: str) -> bool:
    """Whether `pid` is a live process of `service`: running (not a zombie), named
    shmwheel-ROLE (service/processes/zygote.py) and started for that service (its command line, the
    zygote's, names it); a reused pid of another program, or of another service, is not."""
    if not 0 < pid <= shm.PID_MAX:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    name, _, rest = stat.partition(b") ")
    alive = rest[:1] not in (b"Z", b"X")
    return alive and b"(shmwheel-" in name and service.encode() in args


def _has_processes(service: str, hints: list[int]) -> bool:
    """Whether any process of `service` lives: the pids it recorded first (`hints`), then
    every process of this host (a role being restarted has not recorded its pid yet, but
    its zygote lives)."""
    if any(_is_role(p, service) for p in hints):
        return True
    return any(_is_role(int(d), service) for d in os.listdir("/proc") if d.isdigit())


def owner_pid(seg: shm.Segment) -> int:
    """The owner (supervisor) pid recorded in a service segment; LayoutError for a header
    this code cannot read or a pid no process can have."""
    L.read_config(seg)
    pid = int(seg.words[L.W_OWNER])
    if not 0 < pid <= shm.PID_MAX:
        raise LayoutError(f"segment {seg.name} has a corrupt header (owner pid {pid})")
    return pid


def classify(path: Path) -> Entry | None:
    """What the entry at `path` is (None if it is gone meanwhile). Another user's entry is
    judged from lstat alone; this user's is opened (fstat checked again on the descriptor,
    shm.Segment) and its header read."""
    name = path.name[len(shm.PREFIX) :]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    uid = trust.owner(st)

    def damaged(problem: str) -> Entry:
        return Entry(name, "damaged", uid, st.st_size, st.st_ino, problem=problem)

    if not trust.owned(st):
        return Entry(
            name, "foreign", uid, st.st_size, st.st_ino, problem=f"held by {trust.user_name(uid)}"
        )
    if not shm.valid_name(name):
        return damaged("the name is not a service name (1-64 letters, digits, '_' or '-')")
    try:
        seg = shm.Segment(shm.segment_name(name))
    except shm.ForeignSegment as e:  # changed hands since the lstat
        return Entry(name, "foreign", e.uid, st.st_size, st.st_ino, problem=str(e))
    except (LayoutError, posix_ipc.Error, OSError) as e:
        return damaged(str(e)) if os.path.lexists(path) else None
    try:
        cfg = L.read_config(seg)
        owner = owner_pid(seg)
        stopping = bool(seg.words[L.W_STOPPING])
        roles = [int(seg.words[w]) for w in (L.W_PID_COORDINATOR, L.W_PID_REAPER)]
    except LayoutError as e:
        return damaged(str(e))
    finally:
        seg.close()
    # stale: its owner is gone and so are its own processes (they follow their owner within
    # 50 ms; a live service whose owner word was corrupted still has them, and is kept)
    gone = not shm.pid_alive(owner) and not _has_processes(name, roles)
    state = "stale" if gone else "stopping" if stopping else "running"
    return Entry(name, state, uid, st.st_size, st.st_ino, owner, cfg)


def describe(service: str) -> str:
    """What holds the name `service`, for an error message: a running, stopping or stale
    service with its owner pid, another user's entry, or a damaged one."""
    e = classify(shm.shm_path(shm.segment_name(service)))
    if e is None:
        return "it is gone now: try again"
    if e.state in ("running", "stopping"):
        return (
            f"service {service!r} is {e.state}, owner pid {e.owner_pid} "
            f"(`shmwheel status {service}` shows it)"
        )
    if e.state == "stale":
        return (
            f"service {service!r} is not running: its owner pid {e.owner_pid} is gone "
            "(`shmwheel clean` removes it)"
        )
    return f"{e.state}: {e.problem} (`shmwheel ls --all` shows it)"


def create(service: str, cfg: L.ServiceConfig, owner_pid: int, start_ms: int) -> L.ServiceMemory:
    """``layout.ServiceMemory.create``, where a name already taken says what holds it:
    running, stopping or stale, another user's or damaged (``describe``)."""
    try:
        return L.ServiceMemory.create(service, cfg, owner_pid, start_ms)
    except shm.NameTaken as e:
        raise shm.NameTaken(f"{e}: {describe(service)}") from e


def entries() -> list[Entry]:
    """Every ``/dev/shm/shmwheel.*`` entry, classified, sorted by name."""
    found = []
    for path in sorted(shm.SHM_DIR.glob(shm.PREFIX + "*")):
        entry = classify(path)
        if entry is not None:
            found.append(entry)
    return found


def warn_once(entry: Entry) -> None:
    """Log a skipped (foreign or damaged) entry at warning, once per process per file."""
    key = (entry.name, entry.inode)
    if key in _warned:
        return
    _warned.add(key)
    log.warning(
        "skipping %s%s (%s): %s; `shmwheel ls --all` lists it",
        shm.SHM_DIR / shm.PREFIX,
        entry.name.encode("unicode_escape").decode(),
        entry.state,
        entry.problem,
    )


def orphan_semaphores() -> list[Path]:
    """This user's service semaphores whose segment is gone entirely."""
    out = []
    for path in sorted(shm.SHM_DIR.glob("sem." + shm.PREFIX + "*")):
        service = path.name[len("sem." + shm.PREFIX) :].rsplit(".", 1)[0]
        if not shm.valid_name(service) or not trust.ours(path):
            continue
        if not os.path.lexists(shm.SHM_DIR / (shm.PREFIX + service)):
            out.append(path)
    return out


def sweep_stale(before_unlink: Callable[[str], bool] | None = None) -> list[str]:
    """Unlink this user's stale services (their owner process is gone: the embedding
    process was killed) and this user's semaphores whose segment is gone. Foreign and
    damaged entries are left alone (logged once). `before_unlink(service)` runs first and
    may keep a stale segment by returning False (a journal salvages it). Returns the
    services removed."""
    removed = []
    for entry in entries():
        if not entry.service:
            warn_once(entry)
            continue
        if entry.state != "stale":
            continue
        if before_unlink is not None and not before_unlink(entry.name):
            continue
        shm.unlink_service(entry.name)
        removed.append(entry.name)
    for path in orphan_semaphores():
        try:
            shm.unlink_semaphore("/" + path.name[len("sem.") :])
        except posix_ipc.Error:
            pass
    return removed
