"""What every service process (coordinator, reaper, executor) shares: attaching to the
segment, its wake-up semaphore, its logger, and knowing when to exit.

A service process exits when the supervisor sets ``stopping`` or when the supervisor
itself is gone (its parent changed, and the owner word names no live process: the
embedding process was killed). In the latter case
the coordinator, which owns the segments, unlinks them on its way out.

Neither SIGINT nor SIGTERM ends a service process: a signal sent to a whole process group
(a terminal's Ctrl-C, systemd's SIGTERM to every process of a unit, ``timeout``) must not
kill an executor mid-task; the embedding process decides, and its ``stop()`` ends them in
order (docs/operating.md, "Stopping"). SIGTERM is caught by a handler, not ignored, so that
the processes a task starts get the default action back: a forked child, which inherits the
handler, re-sends SIGTERM to itself with the default action; an exec'd one starts with it.
"""

from __future__ import annotations

import gc
import os
import signal
import time

import posix_ipc

from ... import _native as N
from ...segment import layout as L
from ...segment import shm

LIVENESS_S = 0.05  # how often a process checks that its supervisor is alive


_SERVICE_PID = 0  # the service process itself, as opposed to a process a task forked


def _on_sigterm(signum: int, frame: object) -> None:
    """Ignored in the service process; in a process a task forked, SIGTERM is fatal again."""
    if os.getpid() != _SERVICE_PID:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def keep_running_on_sigterm() -> None:
    """Make SIGTERM a no-op for this process (see the module doc)."""
    global _SERVICE_PID
    _SERVICE_PID = os.getpid()
    signal.signal(signal.SIGTERM, _on_sigterm)


class ServiceProcess:
    def __init__(self, service: str, role: str) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
        keep_running_on_sigterm()
        self.service = service
        self.role = role
        self.mem = L.ServiceMemory.attach(service)
        self.tables: N.Tables = self.mem.bind_tables()
        self.owner = int(self.mem.header[L.W_OWNER])
        # the process that started us (the supervisor): with the owner word, the two
        # signals that must agree before we believe the supervisor is gone (running())
        self.parent = os.getppid()
        self.bell = self.mem.semaphore(role)
        self._next_check = 0.0
        self.orphaned = False

    def settle_heap(self) -> None:
        """Once started: move everything imported so far (numpy, the tasks) out of the
        garbage collector's sight, so a full collection never pauses a hot loop for
        milliseconds walking objects that live as long as the process."""
        gc.collect()
        gc.freeze()

    def running(self) -> bool:
        """False once the service is stopping or the supervisor has died: reparented
        (our parent changed) AND the owner word, read now, names no live process. One
        corrupt field is never enough: the coordinator unlinks the segment of an orphan."""
        if self.mem.header[L.W_STOPPING]:
            return False
        t = time.monotonic()
        if t >= self._next_check:
            self._next_check = t + LIVENESS_S
            if os.getppid() != self.parent and not shm.pid_alive(int(self.mem.header[L.W_OWNER])):
                self.orphaned = True
                return False
        return True

    def wait(self, timeout_s: float) -> None:
        """Sleep until rung, a signal, or `timeout_s` passes (bounded: a lost wake-up
        costs a timeout). A signal that interrupts the wait (SIGTERM, which a service
        process catches and ignores) is a wake-up like any other, never an exception: it
        ended the reaper with its journal's last records unwritten."""
        if timeout_s <= 0:
            return
        try:
            self.bell.acquire(timeout_s)
        except (posix_ipc.BusyError, posix_ipc.SignalError):
            pass
