"""POSIX shared memory and semaphores named after a service, and the segment lock.

Names: the segment is ``/shmwheel.<service>`` (``/dev/shm/shmwheel.<service>``), each
semaphore ``/shmwheel.<service>.<role>`` (``/dev/shm/sem.shmwheel.<service>.<role>``);
all are created with mode 0600.  ``multiprocessing.shared_memory`` is deliberately not
used: its resource tracker unlinks segments that the tracking process did not create.

Trust (``trust``'s rules, docs/operating.md): an existing segment is used only if
``fstat`` on its open descriptor says it is this user's, a regular file, mode 0600 or
stricter and a whole number of words, every byte of it reserved (``check_own``); a name
another user holds raises ``ForeignSegment`` naming them, and ``unlink_service`` removes
only this user's files. What each entry in /dev/shm is, and the sweep of stale services,
are ``census``'s.

Reservation: a segment is made with every page allocated (``posix_fallocate``, ``reserve``)
and a semaphore's page is written when it is made (glibc's ``sem_open``), so a full
/dev/shm is ``SharedMemoryFull`` when they are made, never a SIGBUS when a page is first
touched; a segment with a page not reserved is refused at open (``check_own``), so no
mapping of this package ever touches a page that /dev/shm may not have.

The segment lock is ``flock`` on the segment's own file descriptor: the kernel drops it
when its holder dies, so a SIGKILLed holder never deadlocks the service.  A holder that
died mid-update is detected by the ``dirty`` word it leaves set; the next holder repairs.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import posix_ipc

from ..errors import LayoutError, SharedMemoryFull
from . import trust

_flock, _LOCK_EX, _LOCK_UN = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN
PREFIX = "shmwheel."
SHM_DIR = Path("/dev/shm")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # always fullmatch: "x\n" is not a name
PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no process id is above it


class NameTaken(LayoutError):
    """Creating a segment whose name this user's entry already holds (``census.describe``
    says what holds it)."""


class ForeignSegment(LayoutError):
    """A segment or semaphore name of a service held by another user: never attached,
    swept or salvaged; the name is unavailable to this user (``uid`` holds it)."""

    def __init__(self, message: str, uid: int) -> None:
        super().__init__(message)
        self.uid = uid


def valid_name(name: object) -> bool:
    """Whether `name` is a service name: 1-64 letters, digits, '_' or '-', matched whole."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_name(name: str) -> str:
    """`name` if it is a service name, else ValueError."""
    if not valid_name(name):
        raise ValueError(f"service name must be 1-64 letters, digits, '_' or '-', got {name!r}")
    return name


def shm_path(posix_name: str) -> Path:
    """The file of a posix-ipc segment ('/shmwheel.X') or semaphore name ('sem.' prefixed)."""
    return SHM_DIR / posix_name.lstrip("/")


def held_elsewhere(posix_name: str, path: Path, uid: int) -> ForeignSegment:
    """The error for a name that another user (`uid`) holds."""
    return ForeignSegment(
        f"{posix_name} ({path}) is held by {trust.user_name(uid)}, not by this process's "
        f"{trust.this_user()}: shmwheel uses only its own user's shared memory, so "
        f"this service name is unavailable here (choose another, or have that user or "
        f"root remove {path})",
        uid,
    )


def check_own(posix_name: str, st: os.stat_result) -> None:
    """Refuse what fstat says is not a segment of this user: another owner, not a regular
    file, group or other permission bits (ours are made 0600), a size that cannot be a
    segment (not a positive multiple of 8 bytes), or pages not reserved (a sparse file:
    touching a hole allocates, and a full /dev/shm makes that a SIGBUS)."""
    path = shm_path(posix_name)
    if not trust.owned(st):
        raise held_elsewhere(posix_name, path, trust.owner(st))
    why = trust.judge(path, st, trust.REGULAR_FILE, private=True)
    if why is not None:
        raise LayoutError(f"{why}: not used as a shared memory segment")
    if st.st_size < 8 or st.st_size % 8:
        raise LayoutError(f"{path} has {st.st_size} bytes: not a shmwheel segment")
    if st.st_blocks * 512 < st.st_size:
        raise LayoutError(
            f"{path} has {st.st_size} bytes but only {st.st_blocks * 512} of them reserved: "
            f"shmwheel reserves every byte of a segment when it makes it, so this one is not "
            f"a segment it made (or was damaged) and is not used"
        )


def shm_space() -> tuple[int, int]:
    """(bytes free, bytes in all) of the file system at /dev/shm (statvfs)."""
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def no_room(what: str, needed: int, cause: OSError) -> SharedMemoryFull:
    """The error for `what` (needing `needed` bytes) that /dev/shm could not hold."""
    free, total = shm_space()
    return SharedMemoryFull(
        f"{SHM_DIR} has no room for {what}: it needs {_bytes(needed)} and {SHM_DIR} has "
        f"{_bytes(free)} free of {_bytes(total)} ({cause.strerror}): free space there "
        f"(`df {SHM_DIR}`; `shmwheel ls --all` lists shmwheel's entries), or start the "
        f"service with a smaller capacity",
        needed,
        free,
    )


def _bytes(n: int) -> str:
    return f"{n} bytes" + (f" ({n / 2**20:.1f} MiB)" if n >= 2**20 else "")


def reserve(fd: int, size: int, what: str) -> None:
    """Allocate every page of the first `size` bytes of the file `fd` now
    (``posix_fallocate``, which also sets its size); ``SharedMemoryFull`` if /dev/shm cannot
    hold them (tmpfs then keeps none of the pages this call allocated)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise no_room(what, size, e) from e
        raise LayoutError(f"cannot reserve {size} bytes of shared memory for {what}: {e}") from e


def segment_name(service: str) -> str:
    return "/" + PREFIX + service


def semaphore_name(service: str, role: str) -> str:
    return "/" + PREFIX + service + "." + role


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists; False for any value that cannot be a pid."""
    if not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):
        return False
    return True


class Segment:
    """One mapped posix-ipc segment and its int64 view. ``close`` drops the mapping
    (views first) and the fd; ``unlink`` removes the name.

    Opening an existing segment checks, with fstat on the open descriptor and before
    anything is mapped or read, that it is this user's and wholly reserved (``check_own``):
    another user's raises ``ForeignSegment`` naming its owner. Creating one is exclusive
    (``O_CREX``, mode 0600) and reserves every byte (``reserve``): ``SharedMemoryFull``,
    with the name unlinked again, if /dev/shm cannot hold it; a name already taken by
    another user raises ``ForeignSegment``."""

    def __init__(self, name: str, size: int | None = None) -> None:
        self.name = name
        path = shm_path(name)
        try:
            if size is None:
                self._shm = posix_ipc.SharedMemory(name)
            else:
                self._shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600)
        except (posix_ipc.ExistentialError, posix_ipc.PermissionsError) as e:
            uid = trust.foreign_holder(path)
            if uid is not None:
                raise held_elsewhere(name, path, uid) from e
            if isinstance(e, posix_ipc.PermissionsError):
                raise LayoutError(f"shared memory segment {name}: {e}") from e
            if size is not None:
                raise NameTaken(f"shared memory segment {name} exists already") from e
            raise LayoutError(f"shared memory segment {name} does not exist") from e
        except posix_ipc.Error as e:
            raise LayoutError(f"shared memory segment {name}: {e}") from e
        self.fd = self._shm.fd
        try:
            if size is not None:
                reserve(self.fd, size, f"the service segment {path}")
            st = os.fstat(self.fd)
            check_own(name, st)
            self.size = st.st_size
            self._map: mmap.mmap | None = mmap.mmap(self.fd, self.size)
        except BaseException as e:
            self._shm.close_fd()
            if size is not None:
                self.unlink()  # made here: nothing of it stays
            if isinstance(e, OSError):
                raise LayoutError(f"shared memory segment {name}: {e}") from e
            raise
        self.words = np.frombuffer(self._map, dtype=np.int64)
        self.bytes = np.frombuffer(self._map, dtype=np.uint8)
        self._views: list[np.ndarray] = []
        self._thread_lock = threading.Lock()

    def view(self, start: int, length: int) -> np.ndarray:
        """int64 view of words [start, start + length); dropped on close."""
        v = self.words[start : start + length]
        self._views.append(v)
        return v

    def byte_view(self, start: int, length: int) -> np.ndarray:
        v = self.bytes[start : start + length]
        self._views.append(v)
        return v

    # -- the segment lock -------------------------------------------------------------
    def locked(self, dirty_word: int, repair: Callable[[], None]) -> Locked:
        """Context manager: exclusive across processes (flock) and threads; runs `repair`
        first if the previous holder died with the dirty word set. Not re-entrant."""
        return Locked(self, dirty_word, repair)

    def close(self) -> None:
        if self._map is None:
            return
        self._views.clear()  # the views go first: an mmap with live views cannot close
        del self.words, self.bytes
        try:
            self._map.close()
        except BufferError:  # a caller still holds a view: leave the mapping to the GC
            pass
        self._map = None
        try:
            self._shm.close_fd()
        except posix_ipc.Error:
            pass

    def unlink(self) -> None:
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass


class LocalSegment(Segment):
    """A segment in this process's own memory, with the same views and lock as a shared
    one (the lock is then only a thread lock): the slot state machine's tests drive the
    real tables and native code over it, with no process and nothing in /dev/shm."""

    def __init__(self, name: str, size: int) -> None:  # noqa: D107 - see the class
        self.name = name
        self.fd = -1
        self.size = size
        self._map = None
        self.words = np.zeros(size // 8, dtype=np.int64)
        self.bytes = self.words.view(np.uint8)
        self._views = []
        self._thread_lock = threading.Lock()

    def locked(self, dirty_word: int, repair: Callable[[], None]) -> Locked:
        return Locked(self, dirty_word, repair, use_flock=False)

    def close(self) -> None:
        self._views.clear()

    def unlink(self) -> None:
        pass


class Locked:
    """The segment lock as a reusable context manager (one per attachment: entering it
    allocates nothing, which matters on per-call paths such as Client.cancel)."""

    __slots__ = ("_dirty", "_fd", "_repair", "_thread_lock", "_words")

    def __init__(
        self, seg: Segment, dirty_word: int, repair: Callable[[], None], use_flock: bool = True
    ) -> None:
        self._fd = seg.fd if use_flock else -1
        self._words = seg.words.data
        self._thread_lock = seg._thread_lock
        self._dirty, self._repair = dirty_word, repair

    def __enter__(self) -> None:
        self._thread_lock.acquire()
        try:
            if self._fd >= 0:
                _flock(self._fd, _LOCK_EX)
            try:
                if self._words[self._dirty]:
                    self._repair()  # if this raises, dirty stays set: the next holder retries
                self._words[self._dirty] = 1
            except BaseException:
                if self._fd >= 0:
                    _flock(self._fd, _LOCK_UN)
                raise
        except BaseException:
            self._thread_lock.release()
            raise

    def parts(self) -> tuple[int, threading.Lock, int]:
        """(flock fd or -1, thread lock, dirty word): what native code needs to take this
        same lock (shmwheel/native/watch.c)."""
        return self._fd, self._thread_lock, self._dirty

    def __exit__(self, *exc: object) -> None:
        self._words[self._dirty] = 0
        if self._fd >= 0:
            _flock(self._fd, _LOCK_UN)
        self._thread_lock.release()


def open_semaphore(service: str, role: str, create: bool) -> posix_ipc.Semaphore:
    """A service's wake-up semaphore; `create` makes it exclusively (mode 0600; its page
    is written then: ``SharedMemoryFull`` if /dev/shm has no room), and a name another
    user holds raises ``ForeignSegment`` naming that user. Opening one the service does
    not have raises ``LayoutError``."""
    name = semaphore_name(service, role)
    path = SHM_DIR / ("sem." + name[1:])
    if create:
        try:
            return posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o600, initial_value=0)
        except posix_ipc.ExistentialError:
            uid = trust.foreign_holder(path)
            if uid is not None:
                raise held_elsewhere(name, path, uid) from None
            raise
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.ENOMEM):
                raise no_room(f"the semaphore {path}", mmap.PAGESIZE, e) from e
            raise
    try:
        return posix_ipc.Semaphore(name)
    except posix_ipc.Error as e:
        uid = trust.foreign_holder(path)
        if uid is not None:
            raise held_elsewhere(name, path, uid) from e
        raise LayoutError(
            f"service {service!r} has no usable {role} semaphore ({path}: {e}): it is "
            f"stopping, or its segment was not made by a running service"
        ) from e


def unlink_semaphore(name: str) -> None:
    try:
        posix_ipc.unlink_semaphore(name)
    except posix_ipc.ExistentialError:
        pass


def service_files(service: str) -> list[Path]:
    """Every /dev/shm file that belongs to the service: its segment and semaphores."""
    seg = SHM_DIR / (PREFIX + service)
    sems = SHM_DIR.glob("sem." + PREFIX + service + ".*")
    return [p for p in [seg, *sems] if p.exists()]


def unlink_service(service: str) -> None:
    """Remove the segment and every semaphore of a service (idempotent); a file of the
    name that another user holds is left alone (root could unlink it: it must not)."""
    check_name(service)
    seg = SHM_DIR / (PREFIX + service)
    if trust.ours(seg):
        try:
            posix_ipc.unlink_shared_memory(segment_name(service))
        except posix_ipc.ExistentialError:
            pass
    for p in SHM_DIR.glob("sem." + PREFIX + service + ".*"):
        if trust.ours(p):
            unlink_semaphore("/" + p.name[len("sem.") :])
