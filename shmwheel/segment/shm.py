"""POSIX shared memory and semaphores named after a service, and the segment lock.

Names: the segment is ``/shmwheel.<service>`` (``/dev/shm/shmwheel.<service>``), each
semaphore ``/shmwheel.<service>.<role>`` (``/dev/shm/sem.shmwheel.<service>.<role>``);
all are created with mode 0600.  ``multiprocessing.shared_memory`` is deliberately not
used: its resource tracker unlinks segments that the tracking process did not create.

The segment lock is ``flock`` on the segment's own file descriptor: the kernel drops it
when its holder dies, so a SIGKILLed holder never deadlocks the service.  A holder that
died mid-update is detected by the ``dirty`` word it leaves set; the next holder repairs.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import posix_ipc

from ..errors import LayoutError

_flock, _LOCK_EX, _LOCK_UN = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN
PREFIX = "shmwheel."
SHM_DIR = Path("/dev/shm")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"service name must be 1-64 letters, digits, '_' or '-', got {name!r}")
    return name


def segment_name(service: str) -> str:
    return "/" + PREFIX + service


def semaphore_name(service: str, role: str) -> str:
    return "/" + PREFIX + service + "." + role


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Segment:
    """One mapped posix-ipc segment and its int64 view. ``close`` drops the mapping
    (views first) and the fd; ``unlink`` removes the name."""

    def __init__(self, name: str, size: int | None = None) -> None:
        self.name = name
        try:
            if size is None:
                self._shm = posix_ipc.SharedMemory(name)
            else:
                self._shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
        except posix_ipc.ExistentialError as e:
            what = "exists already" if size is not None else "does not exist"
            raise LayoutError(f"shared memory segment {name} {what}") from e
        self.fd = self._shm.fd
        self.size = self._shm.size
        self._map: mmap.mmap | None = mmap.mmap(self.fd, self.size)
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
    name = semaphore_name(service, role)
    if create:
        return posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o600, initial_value=0)
    return posix_ipc.Semaphore(name)


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
    """Remove the segment and every semaphore of a service (idempotent)."""
    posix_name = segment_name(service)
    try:
        posix_ipc.unlink_shared_memory(posix_name)
    except posix_ipc.ExistentialError:
        pass
    for p in SHM_DIR.glob("sem." + PREFIX + service + ".*"):
        unlink_semaphore("/" + p.name[len("sem.") :])


def sweep_stale(
    owner_of: Callable[[Segment], int], before_unlink: Callable[[str], bool] | None = None
) -> list[str]:
    """Unlink services whose segment's owner process is gone (the embedding process was
    killed). `owner_of` reads the owner pid from a segment's header; a segment that cannot
    be read as a service segment is left alone. `before_unlink(service)` runs first and
    may keep the segment by returning False (a journal salvages it). Returns the services
    removed."""
    removed = []
    for p in SHM_DIR.glob(PREFIX + "*"):
        service = p.name[len(PREFIX) :]
        if not _NAME.match(service):
            continue
        try:
            seg = Segment(segment_name(service))
        except (LayoutError, posix_ipc.Error, OSError):
            continue  # gone meanwhile, or another user's (mode 0600): not ours to judge
        try:
            owner = owner_of(seg)
        except LayoutError:
            owner = -1
        finally:
            seg.close()
        if owner > 0 and not pid_alive(owner):
            if before_unlink is not None and not before_unlink(service):
                continue
            unlink_service(service)
            removed.append(service)
    # semaphores whose segment is gone entirely
    for p in SHM_DIR.glob("sem." + PREFIX + "*"):
        service = p.name[len("sem." + PREFIX) :].rsplit(".", 1)[0]
        if not (SHM_DIR / (PREFIX + service)).exists() and service not in removed:
            try:
                unlink_semaphore("/" + p.name[len("sem.") :])
            except posix_ipc.Error:
                pass  # another user's
    return removed
