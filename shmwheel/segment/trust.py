"""Whether a path belongs to this process's user and is safe to use: the one module of the
package that reads a file's owner or mode (``st_uid``, ``st_mode``) or this process's user.
Shared memory (``shm``, ``census``), journal directories (``journal.directory``, salvage,
repair, ``shmwheel journal``, the held files of ``journal/write/spill.py``), the working
directory ``shmwheel run`` imports tasks from, the job link's peers (``service/jobs``) and
the JVM class archive all ask it.

The rules (docs/operating.md, "Trust"):

1. **Owner.** A path shmwheel reads, writes or deletes belongs to this process's effective
   user (``geteuid``). Only the working directory ``shmwheel run`` imports task modules
   from may also be root's (``root_ok``): root's files are as trusted as the system.
2. **Mode.** Group and others cannot write it (no ``0o022`` bit). A shared-memory segment,
   which holds every timer's payload, gives them no access at all (``private``: no
   ``0o077`` bit; shmwheel makes them 0600).
3. **Kind.** It is the kind expected: a directory, or a regular file judged by ``lstat``
   (a link is never followed to a file). A directory named by the caller is judged where
   its path leads (``stat``), so a journal may sit behind a link of its owner's.
4. **Parents are not judged.** A shared parent with the sticky bit (``/tmp``, ``/dev/shm``)
   is fine: the sticky bit keeps others from renaming or deleting what is in it. The
   directory shmwheel uses itself must pass rules 1 to 3.
5. **A refusal changes nothing.** ``UntrustedPath`` (or, for a shared-memory name,
   ``shm.ForeignSegment``) names the path, its owner (user name and uid) and its mode
   (octal), and is raised before anything in the path is read, re-armed or deleted.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from ..errors import UntrustedPath

DIRECTORY, REGULAR_FILE = "a directory", "a regular file"
_KINDS = {DIRECTORY: stat.S_ISDIR, REGULAR_FILE: stat.S_ISREG}
GROUP_OTHER_WRITE = 0o022
GROUP_OTHER_ANY = 0o077


def user_name(uid: int) -> str:
    """'user NAME (uid N)', or 'uid N' for an id with no user name."""
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, OverflowError):
        return f"uid {uid}"


def this_user() -> str:
    """This process's effective user, as ``user_name`` writes it."""
    return user_name(os.geteuid())


def owner(st: os.stat_result) -> int:
    """The uid owning what `st` describes."""
    return st.st_uid


def same_user(uid: int) -> bool:
    """Whether `uid` (a file's owner, or a socket peer's from ``SO_PEERCRED``) is this
    process's effective user (rule 1)."""
    return uid == os.geteuid()


def owned(st: os.stat_result) -> bool:
    """Whether what `st` describes belongs to this process's effective user (rule 1)."""
    return st.st_uid == os.geteuid()


def holder(path: str | os.PathLike[str]) -> int | None:
    """The uid owning `path` (not following a link), None if there is no such file."""
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None


def foreign_holder(path: str | os.PathLike[str]) -> int | None:
    """The uid of another user who holds `path` (not following a link); None when there is
    no such file or it is this user's."""
    uid = holder(path)
    return None if uid is None or uid == os.geteuid() else uid


def ours(path: str | os.PathLike[str]) -> bool:
    """Whether `path` exists and belongs to this process's user (not following a link)."""
    return holder(path) == os.geteuid()


def mode_of(st: os.stat_result) -> int:
    """The permission bits of what `st` describes (with setuid, setgid and sticky)."""
    return stat.S_IMODE(st.st_mode)


def described(st: os.stat_result) -> str:
    """'owner user NAME (uid N), mode 0777': what a refusal says of a path."""
    return f"owner {user_name(st.st_uid)}, mode {mode_of(st):04o}"


def judge(
    path: str | os.PathLike[str],
    st: os.stat_result,
    kind: str,
    *,
    private: bool = False,
    root_ok: bool = False,
) -> str | None:
    """Why `path` (described by `st`) is not safe to use as `kind` (DIRECTORY or
    REGULAR_FILE) by the rules of the module doc; None when it is. `private`: group and
    others may have no access at all (rule 2); `root_ok`: root's is trusted too (rule 1)."""
    if not _KINDS[kind](st.st_mode):
        return f"{path} is not {kind} (a link or another kind of file)"
    if not (owned(st) or (root_ok and st.st_uid == 0)):
        return f"{path} belongs to {user_name(st.st_uid)}, not to this process's {this_user()}"
    if private and st.st_mode & GROUP_OTHER_ANY:
        return f"{path} has mode {mode_of(st):04o}, not 0600: other users could have written it"
    if st.st_mode & GROUP_OTHER_WRITE:
        return f"{path} has mode {mode_of(st):04o}: group or others can write it"
    return None


def check(
    path: str | os.PathLike[str],
    kind: str,
    what: str,
    st: os.stat_result | None = None,
) -> os.stat_result:
    """`path`'s stat if it is safe to use as `kind` (``judge``), else ``UntrustedPath``
    naming `what` it is, its owner and its mode. Without `st`, a directory is judged
    where its path leads and a file by ``lstat``. OSError when it cannot be looked at."""
    if st is None:
        st = os.stat(path) if kind == DIRECTORY else os.lstat(path)
    why = judge(path, st, kind)
    if why is not None:
        raise UntrustedPath(
            f"{what} {why} ({described(st)}): shmwheel reads, re-arms and deletes nothing "
            f"there; make it this user's and writable by it alone (chown, chmod go-w), or "
            f"use another path",
            path=os.fspath(path),
            uid=st.st_uid,
            mode=mode_of(st),
        )
    return st


def check_files(paths: list[str] | list[Path], what: str) -> None:
    """``check`` each of `paths` as a regular file (a file gone meanwhile is skipped)."""
    for p in paths:
        try:
            check(p, REGULAR_FILE, what)
        except FileNotFoundError:
            continue
