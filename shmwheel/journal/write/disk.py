"""The journal's one seam to the disk: every system call a journal writer makes on its
files goes through a ``Disk``, so that a test (or ``bench/journal_faults.py``) can make
chosen calls fail with a chosen errno, in this process or in a running service's
coordinator and reaper.

Injection. In this process, ``Disk.plan = (errno, ops)``. In a service, the injection word
of its segment header (``layout.W_JINJECT``, see ``inject``): ``errno | ops << 16 | roles
<< 24 | delay_ms << 32``, 0 for none, read before every call. A fault stays in force until
it is cleared, as a full or read-only disk does. A delay makes each chosen call wait that
long first (a slow or stalled disk; with errno 0 the call then succeeds). Nothing but
tests and benchmarks writes that word.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ... import _native as N

Buffer = bytes | bytearray | memoryview | N.JournalBuffer  # what write_all takes
# what a planned fault fails (ops)
OP_OPEN, OP_WRITE, OP_SYNC, OP_TRUNCATE = 1, 2, 4, 8
OPS_ALL = OP_OPEN | OP_WRITE | OP_SYNC | OP_TRUNCATE
# whose calls (roles)
ROLE_BITS = {"coordinator": 1, "reaper": 2, "recovery": 4}
_ERRNO_MASK, _OPS_SHIFT, _ROLES_SHIFT, _DELAY_SHIFT = 0xFFFF, 16, 24, 32
_BYTE, _DELAY_MASK = 0xFF, 0xFFFF  # ops and roles: 8 bits each; the delay: 16 bits of ms


def inject(errno_: int, ops: int = OPS_ALL, roles: int = 3, delay_ms: int = 0) -> int:
    """The injection word that makes `ops` of the writers in `roles` wait `delay_ms` and
    then fail with `errno_` (errno 0: wait, then succeed; both 0: a word that injects
    nothing)."""
    if not errno_ and not delay_ms:
        return 0
    if not 0 <= delay_ms <= _DELAY_MASK:
        raise ValueError(f"delay_ms must be in 0..{_DELAY_MASK}, got {delay_ms}")
    return (
        (errno_ & _ERRNO_MASK)
        | (ops & _BYTE) << _OPS_SHIFT
        | (roles & _BYTE) << _ROLES_SHIFT
        | delay_ms << _DELAY_SHIFT
    )


def injected_errno(word: int) -> int:
    """The errno an injection word fails its calls with (0: none)."""
    return word & _ERRNO_MASK


def injected_ops(word: int) -> int:
    """The calls an injection word acts on (OP_* bits)."""
    return (word >> _OPS_SHIFT) & _BYTE


def injected_roles(word: int) -> int:
    """The writers an injection word acts on (ROLE_BITS)."""
    return (word >> _ROLES_SHIFT) & _BYTE


def injected_delay_ms(word: int) -> int:
    """How long an injection word makes each of its calls wait first, in ms."""
    return (word >> _DELAY_SHIFT) & _DELAY_MASK


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
            if w and injected_ops(w) & op and injected_roles(w) & self._role_bit:
                if delay := injected_delay_ms(w):
                    time.sleep(delay / 1000)
                if code := injected_errno(w):
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
