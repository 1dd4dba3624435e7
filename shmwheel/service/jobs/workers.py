"""The pool's side of one job worker process: starting it (forked by a zygote, role
``job``: service/forkserver.py), its pipes and slot, reading its outcome frames, learning
how it ended, and closing it. Runs in the process that owns the pool, on the pool's
manager thread (``start`` also on the thread that starts the pool); what the outcomes mean
is the pool's (pool.py).
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import signal
import struct
import subprocess
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from ..forkserver import RoleProcess
from . import worker as W

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job

# forks a role: (argv, the descriptors it inherits, their numbers appended to its argv)
Forks = Callable[[list[str], tuple[int, ...]], RoleProcess]

MAX_WINDOW = 64  # jobs sent ahead to one worker, at the most
WINDOW_TARGET_S = 0.002  # a worker is sent about this much work ahead
READ_BYTES = 1 << 16  # the result buffer's size (grown for a larger frame while it comes)
_HEAD, _BIG = struct.Struct("!i"), struct.Struct("!Q")


log = logging.getLogger("shmwheel.jobs")


class WorkerProc:
    """One job worker: its process, the pool's ends of its pipes, and what it was sent.

    ``inflight`` holds the jobs sent to it, in order, until their frames come back
    (the pool's manager thread changes it, under the pool's lock). ``slot`` is shared with
    the worker (worker.py: RUNNING, STOP). ``avg_s`` is a running average of one job's
    time, which sizes how far ahead it is sent work (``window``)."""

    frame_bound = 1 << 62  # the largest frame it may send: its max_bytes (start) + a length

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Any = None  # its RoleProcess
        self.tasks: Any = None  # the Connection jobs are sent on
        self.results_fd = self.wake_fd = -1  # the pool's ends of the result and wake-up pipes
        self.sentinel = -1  # readable once it has exited: its pidfd
        self._ended = -1  # the sentinel when it had been reaped before its pidfd was opened
        self.slot: W.Slot | None = None
        self.inflight: collections.deque[Job] = collections.deque()
        self.buf, self.have, self.need = self.empty_reader()  # its result pipe's reader
        self.avg_s = WINDOW_TARGET_S
        self.last_s = 0.0  # when the last frame came (or the first job was sent)
        self.kill_reason: tuple[int, str] | None = None  # (job id, "timeout" | "stop" | ...)
        self.hard_timer = -1  # the hard stop's wheel handle, while armed
        self.started_s = 0.0
        self.dead = True
        self.failures = 0  # deaths in a row before running any job

    def window(self) -> int:
        return max(1, min(MAX_WINDOW, int(WINDOW_TARGET_S / max(self.avg_s, 1e-7))))

    def start(self, forks: Forks, name: str, max_bytes: int) -> None:
        """Fork it (`forks`: its zygote's) with the child's ends of its three pipes (tasks,
        results, wake-up) and its slot's memfd."""
        (t_r, t_w), (r_r, r_w), (k_r, k_w) = os.pipe(), os.pipe(), os.pipe()
        slot = None
        try:
            slot = W.Slot()
            slot[W.RUNNING] = slot[W.STOP] = -1
            argv = ["job", name, str(self.index), str(max_bytes), W.main_spec()]
            proc = forks(argv, (t_r, r_w, k_w, slot.fd))
        except BaseException:
            for fd in (t_w, r_r, k_r):
                os.close(fd)
            if slot is not None:
                slot.close()
            raise
        finally:
            for fd in (t_r, r_w, k_w):
                os.close(fd)
        os.set_blocking(r_r, False)
        os.set_blocking(k_r, False)
        self.proc, self.slot, self.dead = proc, slot, False
        self.tasks = Connection(t_w, readable=False)
        self.results_fd, self.wake_fd = r_r, k_r
        self.sentinel = proc.pidfd
        if self.sentinel < 0:  # already reaped (it died at once): a pipe at its end instead
            self.sentinel, end = os.pipe()
            os.close(end)
            self._ended = self.sentinel
        self.started_s = time.monotonic()
        self.buf, self.have, self.need = self.empty_reader()
        self.frame_bound = max_bytes + 12

    def running(self) -> int:
        """The id of the job it runs now (its RUNNING word), -1 between jobs."""
        return int(self.slot[W.RUNNING]) if self.slot is not None else -1

    def ask_stop(self, job_id: int) -> None:
        """Mark `job_id` to be stopped: the worker skips it if it has not started it."""
        if self.slot is not None:
            self.slot[W.STOP] = job_id

    def describe(self) -> dict[str, Any]:
        return {"pid": self.proc.pid if self.proc else None, "alive": not self.dead}

    def fds(self) -> tuple[int, int, int]:
        """What the manager waits on: results, wake-up bytes, and the exit sentinel."""
        return self.results_fd, self.wake_fd, self.sentinel

    def send(self, batch: list[tuple[int, float, bytes, bytes]]) -> None:
        try:
            self.tasks.send_bytes(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            pass  # the worker is dead: its sentinel says so, and its jobs go back

    @staticmethod
    def empty_reader() -> tuple[bytearray, int, int]:
        """``read_frames``' state: the buffer it reads into, of which the first ``have``
        bytes are the start of a frame not yet whole, which is whole at ``need`` bytes."""
        return bytearray(READ_BYTES), 0, 4

    def read_frames(self) -> list[tuple[int, int, Any]] | None:
        """The whole frames its result pipe holds now ([] if none); None at the pipe's
        end (the worker is gone). Read into a buffer kept from one read to the next (a
        fresh one per read would cost a large allocation each time)."""
        while True:
            frames, full = self._read_once()
            if frames or not full:  # a read that filled the buffer without a frame: on
                return frames

    def _read_once(self) -> tuple[list[tuple[int, int, Any]] | None, bool]:
        """One read, and its whole frames; whether the read filled the buffer."""
        if self.need < 0:  # it broke the protocol (below): as at the pipe's end
            return None, False
        buf, have = self.buf, self.have
        with memoryview(buf) as view:
            try:
                got = os.readv(self.results_fd, [view[have:]])
            except BlockingIOError:
                return [], False
            except OSError:
                got = 0
            if not got:
                return None, False
            end = have + got
            full = end == len(buf)
            if end < self.need:  # a frame's start came before: read on until it is whole
                self.have = end
                return [], full
            frames, need = [], 4  # 4: a frame's length not yet whole
            off, head, loads = 0, _HEAD.unpack_from, pickle.loads
            while end - off >= 4:  # multiprocessing.Connection's framing: "!i", or -1 + "!Q"
                (n,) = head(buf, off)
                start = off + 4
                if n == -1:
                    if end - off < 12:
                        need = 12
                        break
                    (n,) = _BIG.unpack_from(buf, start)
                    start += 8
                if end - start < n:
                    need = start - off + n
                    break
                frames.append(loads(view[start : start + n]))
                off = start + n
        left = end - off
        if off and left:
            buf[:left] = buf[off:end]  # the next frame's start, to the front
        self.have, self.need = left, need
        if need > self.frame_bound:  # a worker that breaks the protocol is not trusted:
            log.error("job worker %d sent a frame of %d bytes: killed", self.index, need)
            self.kill()  # the frames before it count; nothing after it is read
            self.have, self.need = 0, -1
            return frames, False
        if need > len(buf):  # a frame larger than the buffer: room for it whole
            buf.extend(bytes(need - len(buf)))
        elif not left and len(buf) > READ_BYTES:
            del buf[READ_BYTES:]
        return frames, full

    def read_wake(self) -> bytes:
        try:
            return os.read(self.wake_fd, 4096)
        except OSError:
            return b""

    def kill(self) -> None:
        if self.proc is not None and not self.dead:
            self.proc.kill()

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)

    def how_it_ended(self) -> str:
        """How it ended: "exit code N", a signal's name ("SIGSEGV"), "exit code unknown"."""
        code = self.exit_code()
        if code is None:
            return "exit code unknown"
        if code >= 0:
            return f"exit code {code}"
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"

    def exit_code(self) -> int | None:
        """How it ended, once it has (its sentinel fired): a ``Popen`` return code (-N for
        signal N), as its zygote reports it (waited for, 2 s at most); None if unknown
        (no report, or its zygote died before it could report)."""
        try:
            code = self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            return None
        return None if code == -1 and self.proc.server.dead else int(code)

    def close(self, wait: bool) -> None:
        """Close the pool's ends (the worker's loop ends at EOF); with `wait`, reap it
        (killed if it has not exited within 2 s)."""
        if self.proc is None:
            return
        try:
            self.tasks.close()
        except OSError:
            pass
        if wait:
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self.results_fd, self.wake_fd, self._ended):
            if fd >= 0:
                os.close(fd)
        self.results_fd = self.wake_fd = self._ended = self.sentinel = -1
        if self.slot is not None:
            self.slot.close()
            self.slot = None
        self.proc = None  # its pidfd closes with it
        self.dead = True
