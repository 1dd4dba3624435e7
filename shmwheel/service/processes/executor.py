"""An executor process: runs the registered task of each fired timer and reports its
outcome. The batch loop is native (shmwheel/native/executor.c: its header gives the order
of the writes that makes a crash recoverable); this module sets it up, recovers what a
predecessor on the same rings left, logs and records task tracebacks (service/tracebacks.py),
and sleeps when idle. A stop ends the batch in hand after the task running
now (the records after it stay on the ring, never started); a copy of the process that a
task forked ends as soon as the task returns in it (executor.c).
Started by the supervisor through ``shmwheel.service.processes.main``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import _native as N
from ...segment import contract as C
from ...segment import layout as L
from ...segment import payload as P
from .. import calendar, tracebacks
from ..tasks import resolve
from .lines import exit_now
from .process import ServiceProcess

log = logging.getLogger("shmwheel.executor")
IDLE_WAIT_S = 0.05


class Executor(ServiceProcess):
    def __init__(self, service: str, index: int) -> None:
        super().__init__(service, f"exec{index}")
        mem = self.mem
        self.index = index
        self.ring = mem.dispatch[index]
        self.results = mem.results[index]
        self.row = mem.counters[L.FIXED_ROWS + index]
        self.table = mem.exec_table[index]
        tasks: list[Callable[[Any], Any]] = []
        for name, spec in mem.config.tasks:
            try:
                tasks.append(resolve(spec))
            except Exception as e:  # reported as the error of each run of that task
                tasks.append(
                    _failed_import(ImportError(f"task {name!r} ({spec}) failed to import: {e!r}"))
                )
        tasks.append(_no_task)  # L.NO_TASK, the last task id (layout.py)
        self.native = N.Executor(
            mem.wheel,
            mem.side,
            mem.arena,
            mem.arena_words,
            self.ring.words,
            self.results.words,
            self.table[L.X_STARTED : L.X_STARTED + 1],
            self.row,
            mem.hist[index],
            tasks,
            P.unpack,
            self._task_failed,
            self._results_full,
            mem.header[L.W_STOPPING : L.W_STOPPING + 1],  # a stop ends a batch early
            self._on_calendar,
        )

    def _task_failed(self, handle: int, tid: int, exc: BaseException, run: int, flags: int) -> None:
        """A task raised: log it, and record it for the handles (service/tracebacks.py), before
        the native loop publishes the outcome "error"."""
        names = self.mem.task_names
        name = names[tid] if 0 <= tid < len(names) else f"id {tid} (unknown)"
        log.error("task %s (timer %#x) raised", name, handle, exc_info=exc)
        tracebacks.record(self.mem, self.index, handle, tid, exc, run, flags)

    def _on_calendar(self, handle: int, deadline: int, spec: dict[str, Any], after: bool) -> Any:
        """A calendar timer's run (executor.c, calendar_call; service/calendar.py): before its task,
        whether it runs (a misfire with misfire="skip" does not); after it, the deadline of
        its next fire time."""
        if not after:
            return calendar.runs(spec, deadline, time.monotonic_ns() // 1_000_000)
        try:
            return calendar.next_ms(spec)
        except StopIteration:  # no fire time left: the timer ends with this run
            return 0

    def _results_full(self) -> bool:
        """The result ring is full: wake the reaper and wait a little; False to give up."""
        self.mem.ring_bell("reaper")
        time.sleep(0.0005)
        return self.running()

    def recover(self) -> None:
        handle = recover_rings(self.mem, self.index, self._results_full)
        if handle is not None:
            log.warning("timer %#x was running when executor %d died: crashed", handle, self.index)

    def run(self) -> None:
        self.table[L.X_PID] = os.getpid()
        self.recover()
        ring, table, native = self.ring, self.table, self.native
        while self.running():
            n = native.run()
            if n > 0:
                self.mem.ring_bell("reaper")
                continue
            if n < 0 and ring.corrupt():
                log.error("dispatch ring %d has a corrupt head; skipping to it", self.index)
                ring.consume(0)
            table[L.X_SLEEPING] = 1
            if ring.pending() == 0:
                self.wait(IDLE_WAIT_S)
            table[L.X_SLEEPING] = 0


def recover_rings(
    mem: L.ServiceMemory, index: int, wait: Callable[[], bool] = lambda: False
) -> int | None:
    """Finish what a dead executor on rings `index` left: skip what it reported, report
    the record it claimed and did not report as crashed (its handle is returned), skip the
    records the reaper took over from it (they run elsewhere: ring.h). The first record
    nobody claimed, and those after it, are still to run. `wait` is called while the
    result ring is full; when it gives up (False), the record stays as it was, for the
    next recovery to report."""
    ring, results, table = mem.dispatch[index], mem.results[index], mem.exec_table[index]
    if results.head > 0:
        last = int(results.record_at(results.head - 1)[C.RR_SEQ])
        if last >= ring.tail:
            ring.consume(min(last + 1 - ring.tail, ring.pending()))
    handle = None
    # it claims one record at a time, in order, and reports it before the next, so past
    # the last report there is at most one of its claims, among records the reaper took
    while ring.pending() and not ring.corrupt():
        seq = ring.tail
        claim = int(C.dr_claim(int(ring.record_at(seq)[C.DR_FIRED_NS])))
        if claim == 0:
            break
        if claim == C.DR_CLAIM_RUN:
            handle = int(ring.record_at(seq)[C.DR_HANDLE])
            rec = np.zeros((1, C.RESULT_RECORD), np.int64)
            rec[0, C.RR_HANDLE], rec[0, C.RR_OUTCOME], rec[0, C.RR_SEQ] = (
                handle,
                C.OUTCOME_CRASHED,
                seq,
            )
            while results.push(rec) == 0:
                if not wait():
                    return None
            mem.counters[L.FIXED_ROWS + index, C.C_CRASHED] += 1
        ring.consume(1)
    table[L.X_STARTED] = -1
    return handle


def _no_task(payload: Any) -> None:
    """L.NO_TASK: what a lease without on_expire runs when it expires (nothing)."""


def _failed_import(error: Exception) -> Callable[[Any], Any]:
    def task(payload: Any) -> None:
        raise error

    return task


def main(service: str, index: int) -> None:
    """Run an executor until the service stops, then end the process with ``os._exit``:
    an interpreter's normal exit would wait for what a task left behind (a
    ``multiprocessing`` child that is not a daemon, a thread, an atexit handler), and
    a stop must not (docs/operating.md, "Stopping")."""
    code = 0
    try:
        executor = Executor(service, index)
        executor.settle_heap()
        executor.run()
    except SystemExit as e:  # a task raised it: the process ends, as Python would
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        log.critical("executor %d ends on an exception", index, exc_info=True)
        code = 1
    finally:
        logging.shutdown()
        exit_now(code)
