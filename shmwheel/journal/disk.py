"""The journal's one seam to the disk: every system call a journal writer makes on its
files goes through a ``Disk``, so that a test (or ``bench/journal_faults.py``) can make
chosen calls fail with a chosen errno, in this process or in a running service's
coordinator and reaper.

Injection. In this process, ``Disk.plan = (errno, ops)``. In a service, the injection word
of its segment header (``layout.W_JINJECT``, see ``inject``): ``errno | ops << 16 | roles
<< 24``, 0 for none, read before every call. A fault stays in force until it is cleared,
as a full or read-only disk does. Nothing but tests and benchmarks writes that word.
"""

from __future__ import annotations

import os

import numpy as np

from .. import _native as N

Buffer = bytes | bytearray | memoryview | N.JournalBuffer  # what write_all takes
# what a planned fault fails (ops)
OP_OPEN, OP_WRITE, OP_SYNC, OP_TRUNCATE = 1, 2, 4, 8
OPS_ALL = OP_OPEN | OP_WRITE | OP_SYNC | OP_TRUNCATE
# whose calls (roles)
ROLE_BITS = {"coordinator": 1, "reaper": 2, "recovery": 4}
_ERRNO_MASK, _OPS_SHIFT, _ROLES_SHIFT = 0xFFFF, 16, 24


def inject(errno_: int, ops: int = OPS_ALL, roles: int = 3) -> int:
    """The injection word that fails `ops` of the writers in `roles` with `errno_` (0: a
    word that injects nothing)."""
    if not errno_:
        return 0
    return (errno_ & _ERRNO_MASK) | (ops & 0xFF) << _OPS_SHIFT | (roles & 0xFF) << _ROLES_SHIFT


class Disk:
    """The system calls of one journal writer (module doc). `word`: the service header's
    injection word as a one-element view, or None."""

    def __init__(self, role: str, word: np.ndarray | None = None) -> None:
        self.plan: tuple[int, int] | None = None  # (errno, ops): an in-process fault
        self._role_bit = ROLE_BITS.get(role, 0)
        self._word = word

    def _check(self, op: int, path: str) -> None:
        plan = self.plan
        if plan is not None and plan[1] & op:
            raise OSError(plan[0], os.strerror(plan[0]), path)
        if self._word is not None:
            w = int(self._word[0])
            if w and (w >> _OPS_SHIFT) & 0xFF & op and (w >> _ROLES_SHIFT) & 0xFF & self._role_bit:
                code = w & _ERRNO_MASK
                raise OSError(code, os.strerror(code), path)

    def create(self, path: str) -> int:
        """A new file, opened for appending, and reading back (it must not exist)."""
        self._check(OP_OPEN, path)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)

    def write_all(self, fd: int, data: Buffer, path: str) -> None:
        """Every byte of `data`, however many write(2) calls it takes."""
        with memoryview(data) as whole, whole.cast("B") as view:
            at = 0
            while at < len(view):  # no view outlives the call: the buffer stays clearable
                self._check(OP_WRITE, path)
                with view[at:] as rest:
                    at += os.write(fd, rest)

    def fdatasync(self, fd: int, path: str) -> None:
        self._check(OP_SYNC, path)
        os.fdatasync(fd)

    def truncate(self, fd: int, size: int, path: str) -> None:
        self._check(OP_TRUNCATE, path)
        os.ftruncate(fd, size)

    def read(self, fd: int, size: int, offset: int) -> bytes:
        """`size` bytes at `offset` (what a failed sync leaves in the page cache)."""
        return os.pread(fd, size, offset)

    def sync_dir(self, directory: str) -> None:
        """The directory's entries (a new file's name) on disk."""
        self._check(OP_SYNC, directory)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
