"""The pool's side of one job worker process: starting it from the fork server, its
pipes and slot, reading its outcome frames, and closing it. Runs in the process that owns
the pool, on the pool's manager thread (``start`` also on the thread that starts the
pool); what the outcomes mean is the pool's (pool.py).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import pickle
import time
from typing import TYPE_CHECKING, Any

from . import worker as W

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job

MAX_WINDOW = 64  # jobs sent ahead to one worker, at the most
WINDOW_TARGET_S = 0.002  # a worker is sent about this much work ahead
READ_BYTES = 1 << 20


def fork_server() -> Any:
    """multiprocessing's fork server context, with the worker's module preloaded: every
    worker is a fork of a process that has already imported it."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["shmwheel.service.jobs.worker"])
    return ctx


class WorkerProc:
    """One job worker: its process, the pool's ends of its pipes, and what it was sent.

    ``inflight`` holds the jobs sent to it, in order, until their frames come back
    (the pool's manager thread changes it, under the pool's lock). ``slot`` is shared with
    the worker (worker.py: RUNNING, STOP). ``avg_s`` is a running average of one job's
    time, which sizes how far ahead it is sent work (``window``)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Any = None
        self.tasks: Any = None  # the Connection jobs are sent on
        self.conns: tuple[Any, ...] = ()  # the pool's ends of the result and wake-up pipes
        self.results_fd = self.wake_fd = -1
        self.slot: W.Slot | None = None
        self.inflight: collections.deque[Job] = collections.deque()
        self.buf = bytearray()  # the start of a frame not yet whole
        self.avg_s = WINDOW_TARGET_S
        self.last_s = 0.0  # when the last frame came (or the first job was sent)
        self.kill_reason: tuple[int, str] | None = None  # (job id, "timeout" | "stop" | ...)
        self.hard_timer = -1  # the hard stop's wheel handle, while armed
        self.started_s = 0.0
        self.dead = True
        self.failures = 0  # deaths in a row before running any job

    def window(self) -> int:
        return max(1, min(MAX_WINDOW, int(WINDOW_TARGET_S / max(self.avg_s, 1e-7))))

    def start(self, ctx: Any, name: str, max_bytes: int) -> None:
        t_r, t_w = ctx.Pipe(duplex=False)
        r_r, r_w = ctx.Pipe(duplex=False)
        k_r, k_w = ctx.Pipe(duplex=False)
        slot = W.Slot()
        slot[W.RUNNING] = slot[W.STOP] = -1
        proc = ctx.Process(
            target=W.serve,
            args=(t_r, r_w, k_w, slot, max_bytes),
            name=f"shmwheel-{name}-{self.index}",
            daemon=True,
        )
        try:
            proc.start()
        finally:
            for c in (t_r, r_w, k_w):
                c.close()
        os.set_blocking(r_r.fileno(), False)
        os.set_blocking(k_r.fileno(), False)
        self.proc, self.tasks, self.slot, self.dead = proc, t_w, slot, False
        self.conns = (r_r, k_r)
        self.results_fd, self.wake_fd = r_r.fileno(), k_r.fileno()
        self.started_s = time.monotonic()
        self.buf = bytearray()

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
        return self.results_fd, self.wake_fd, self.proc.sentinel

    def send(self, batch: list[tuple[int, float, bytes, bytes]]) -> None:
        try:
            self.tasks.send_bytes(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            pass  # the worker is dead: its sentinel says so, and its jobs go back

    def read_frames(self) -> list[tuple[int, int, Any]] | None:
        """The whole frames its result pipe holds now ([] if none); None at the pipe's
        end (the worker is gone)."""
        try:
            data = os.read(self.results_fd, READ_BYTES)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            return None
        buf = self.buf
        buf += data
        frames = []
        off, end = 0, len(buf)
        while end - off >= 4:  # multiprocessing.Connection's framing: "!i" length, or -1 + "!Q"
            n = int.from_bytes(buf[off : off + 4], "big", signed=True)
            head = 4
            if n == -1:
                if end - off < 12:
                    break
                n, head = int.from_bytes(buf[off + 4 : off + 12], "big"), 12
            if end - off < head + n:
                break
            frames.append(pickle.loads(buf[off + head : off + head + n]))
            off += head + n
        del buf[:off]
        return frames

    def read_wake(self) -> bytes:
        try:
            return os.read(self.wake_fd, 4096)
        except OSError:
            return b""

    def kill(self) -> None:
        if self.proc is not None and not self.dead:
            self.proc.kill()

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
            self.proc.join(2.0)
            if self.proc.exitcode is None:
                self.proc.kill()
                self.proc.join()
        for c in self.conns:
            c.close()
        self.conns = ()
        if self.slot is not None:
            self.slot.close()
            self.slot = None
        if self.proc.exitcode is not None:
            self.proc.close()
        self.proc = None
        self.dead = True
