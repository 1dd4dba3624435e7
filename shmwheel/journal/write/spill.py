"""What a journal writer could not write when it closed: kept in /dev/shm until the next
start on its journal writes it where it belongs.

A service's writer that closes through a disk fault (a volume gone read-only that returns
only through an unmount, ext4's ``errors=remount-ro``) still holds bytes its segment file
did not take: its *tail* (writer.py, "Faults"). ``keep`` puts them, with the name of that
segment and the length of it that was on disk (synced) when the fault began, in one file
``/dev/shm/shmwheel-held.KEY.ROLE.PID`` (KEY: a hash of the journal directory's path;
mode 0600). The next claim of that journal (a start's recovery, ``shmwheel journal
repair``) calls ``restore`` first: each such file cuts its segment back to that length,
appends the held bytes (ending with the END record the close meant to write), syncs it,
and is then deleted. The journal is then what it would have been had the disk taken the
writes, so the recovery re-arms exactly the timers that had not run.

Kept in memory (tmpfs), a held file does not survive a reboot, like the service's memory
itself. Only files owned by this user and writable by no one else are read; any other is
named in a warning and left alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from typing import Any

from ...errors import JournalError, RecoveryError
from ...segment import shm, trust
from .. import format as F

log = logging.getLogger("shmwheel.journal")

MAGIC = b"SHWHELD\x01"
PREFIX = "shmwheel-held."


def _key(directory: str) -> str:
    return hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:16]


def keep(directory: str, segment: str, size: int, tail: bytes, role: str) -> str:
    """Write what a writer holds for `segment` (its first `size` bytes are on disk) to a
    held file; returns its path. Raises OSError when /dev/shm cannot take it."""
    name = f"{PREFIX}{_key(directory)}.{role}.{os.getpid()}"
    path = os.path.join(shm.SHM_DIR, name)
    tmp = path + ".tmp"
    head = json.dumps(
        {
            "directory": os.path.abspath(directory),
            "segment": os.path.basename(segment),
            "size": size,
        }
    ).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, MAGIC + struct.pack("<I", len(head)) + head)
        view = memoryview(tail)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, path)
    return path


def hand_over(writer: Any, segment: str, size: int, tail: bytes) -> None:
    """`keep` for a service's writer closing through a fault (its ``opts.directory``,
    ``role`` and ``fault``), logged: a WARNING naming the held file, or an ERROR saying
    what is lost when /dev/shm does not take it either."""
    directory = writer.opts.directory
    try:
        where = keep(directory, segment, size, tail, writer.role)
    except OSError as e:
        log.error(
            "journal %s: the %s closes with %d bytes it could not write (%s), and cannot "
            "keep them in %s either (%s): the events they record are lost",
            directory,
            writer.role,
            len(tail),
            writer.fault,
            shm.SHM_DIR,
            e,
        )
        return
    log.warning(
        "journal %s: the %s closes with %d bytes it could not write (%s); kept in %s: the "
        "next start on this journal (or `shmwheel journal repair`) writes them first",
        directory,
        writer.role,
        len(tail),
        writer.fault,
        where,
    )


def pending(directory: str) -> list[str]:
    """The held files of `directory`'s journal, oldest writer first (by name)."""
    lead = f"{PREFIX}{_key(directory)}."
    try:
        names = os.listdir(shm.SHM_DIR)
    except OSError:
        return []
    return sorted(
        os.path.join(shm.SHM_DIR, n) for n in names if n.startswith(lead) and not n.endswith(".tmp")
    )


def _trusted(path: str) -> bool:
    st = os.lstat(path)
    why = trust.judge(path, st, trust.REGULAR_FILE, private=True)
    if why is None:
        return True
    log.warning("journal: held file %s (%s): not read", why, trust.described(st))
    return False


def _read(path: str, directory: str) -> tuple[str, int, bytes]:
    with open(path, "rb") as f:
        data = f.read()
    bad = RecoveryError(f"journal {directory}: held file {path} is not one shmwheel wrote")
    if data[: len(MAGIC)] != MAGIC or len(data) < len(MAGIC) + 4:
        raise bad
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    try:
        head = json.loads(data[start : start + n])
        segment, size = head["segment"], int(head["size"])
    except (ValueError, KeyError, TypeError):
        raise bad from None
    if (
        head.get("directory") != os.path.abspath(directory)
        or F.SegmentName.parse(segment) is None
        or segment != os.path.basename(segment)
        or size < 0
    ):
        raise bad
    return segment, size, data[start + n :]


def _write_back(target: str, size: int, tail: bytes, held: str) -> None:
    """Cut `target` to `size` bytes, append `tail`, sync it and its directory."""
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        have = os.fstat(fd).st_size
        if have < size:
            raise RecoveryError(
                f"journal {os.path.dirname(target)}: {os.path.basename(target)} has {have} "
                f"bytes, fewer than the {size} that were on disk when its writer began to "
                f"hold the records in {held}: the disk lost some; {held} is left for "
                "inspection"
            )
        os.ftruncate(fd, size)
        done = 0
        while done < len(tail):
            done += os.pwrite(fd, tail[done:], size + done)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    dfd = os.open(os.path.dirname(target), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def restore(directory: str) -> int:
    """Write every held file of `directory`'s journal into its segment, synced, and
    delete it; returns the bytes written. Call with the journal's lock held. Raises
    RecoveryError when a segment is shorter than what was on disk when its writer held
    (the disk lost synced bytes), JournalError when the directory still takes no writes
    (the held file stays either way)."""
    total = 0
    for path in pending(directory):
        if not _trusted(path):
            continue
        segment, size, tail = _read(path, directory)
        try:
            _write_back(os.path.join(directory, segment), size, tail, path)
        except OSError as e:
            raise JournalError(
                f"journal {directory}: cannot write the records held in {path} into "
                f"{segment}: {e.strerror or e}; they stay there for the next start"
            ) from e
        os.unlink(path)
        total += len(tail)
        log.warning(
            "journal %s: wrote the %d bytes a stopped service could not write to %s (from %s)",
            directory,
            len(tail),
            segment,
            path,
        )
    return total
