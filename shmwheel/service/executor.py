"""An executor process: runs the registered task of each fired timer and reports its
outcome. Tasks come only from the registry recorded in the segment (``TimerService(tasks=)``);
nothing named in a payload is ever imported.

Per record, in this order: write ``started = seq``, run, publish the result (handle,
outcome, seq, lateness), and after a batch advance the dispatch ring's tail. A replacement
executor on the same rings therefore knows exactly what its predecessor did: results up
to the last published seq are done, the ``started`` record (if unreported) crashed with
it, and the rest are still to run — no task runs twice.
Started by the supervisor through ``shmwheel.service.main``.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from . import context as C
from ..segment import payload as P
from ..segment import slots as SK
from ..segment import layout as L
from ..wheel import kernels as K
from .process import ServiceProcess

BATCH = 256
_NIL_META = 1 << 16  # flags 0, class 0, length 1: the inline msgpack nil (a None payload)
_NIL = P.NIL_INLINE
_DUE = K.DUE
_PER_OCTAVE = L.HIST_PER_OCTAVE
_BUCKETS = L.HIST_BUCKETS
# the batch loop inlines these layouts
assert SK.SIDE_WORDS == 2 and K.NODE_WORDS == 4 and K.F_DEADLINE == 2 and K.F_GS == 3
assert L.RESULT_RECORD == 4
IDLE_WAIT_S = 0.05


_script_modules: dict[str, ModuleType] = {}


def resolve(spec: str) -> Callable[[Any], Any]:
    """The function a registry entry names: "package.module:function" or
    "/path/to/file.py:function" (how a task defined in a script's __main__ is recorded)."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"task spec {spec!r} must be 'module:function'")
    if module_name.endswith(".py"):
        module = _script_modules.get(module_name)
        if module is None:  # loaded once, so the tasks of one script share its globals
            loader_spec = importlib.util.spec_from_file_location("__shmwheel_main__",
                                                                  module_name)
            if loader_spec is None or loader_spec.loader is None:
                raise ImportError(f"cannot load {module_name}")
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
            _script_modules[module_name] = module
    else:
        module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"task spec {spec!r} names a {type(obj).__name__}, not a function")
    return obj


class Executor(ServiceProcess):
    def __init__(self, service: str, index: int) -> None:
        super().__init__(service, f"exec{index}")
        mem = self.mem
        self.index = index
        self.ring = mem.dispatch[index]
        self.results = mem.results[index]
        self.row = mem.counters[L.FIXED_ROWS + index]
        self.hist = mem.hist[index]
        self.table = mem.exec_table[index]
        self.tasks: list[Callable[[Any], Any]] = []
        for name, spec in mem.config.tasks:
            try:
                self.tasks.append(resolve(spec))
            except Exception as e:  # reported as the error of each run of that task
                self.tasks.append(_failed_import(
                    ImportError(f"task {name!r} ({spec}) failed to import: {e!r}")))
        cap = mem.config.capacity
        nodes = mem.wheel[mem.nodes_off : mem.nodes_off + cap * K.NODE_WORDS]
        self.nodes = nodes.data
        self.side = mem.side.data
        self.buf = np.empty((BATCH, L.DISPATCH_RECORD), np.int64)
        self.capacity = cap
        self.started = self.table[L.X_STARTED : L.X_STARTED + 1].data
        self.tally = [0] * L.COUNTER_WORDS
        self.late = [0] * L.HIST_BUCKETS
        self.results_mv = self.results.words.data

    def report(self, handle: int, outcome: int, seq: int, lateness_us: int) -> None:
        while not self.results.push(handle, outcome, seq, lateness_us):
            self.mem.ring_bell("reaper")
            if not self.running():
                return
            time.sleep(0.0005)

    def recover(self) -> None:
        """Finish what a predecessor on these rings left: skip what it reported, report the
        record it was running as crashed."""
        ring, results, table = self.ring, self.results, self.table
        if results.head > 0:
            last = int(results.record_at(results.head - 1)[2])
            if last >= ring.tail:
                ring.consume(last + 1 - ring.tail)
        started = int(table[L.X_STARTED])
        if ring.tail <= started < ring.head:
            handle = int(ring.record_at(started)[0])
            self.report(handle, SK.OUTCOME_CRASHED, started, 0)
            self.row[L.C_CRASHED] += 1  # before any run of ours: no batch tally pending
            ring.consume(started + 1 - ring.tail)
            self.log(f"timer {handle:#x} was running when executor {self.index} died: crashed")
        table[L.X_STARTED] = -1

    def run_batch(self, seq0: int, n: int) -> None:
        """Run the n records peeked into self.buf (dispatch seqs seq0...), each in the
        order the module docstring gives: ``started``, run, publish its outcome. A record
        whose slot is not DUE of that generation is garbage: counted, never run. Counts and
        lateness samples are published to the shared rows after the batch."""
        nodes, side, tasks, cap = self.nodes, self.side, self.tasks, self.capacity
        started, tally, late = self.started, self.tally, self.late
        res, rcap, rmask = self.results_mv, self.results.capacity, self.results.mask
        mono, log2 = time.monotonic_ns, math.log2
        seq = seq0
        for handle, fired_ns in self.buf[:n].tolist():
            started[0] = seq
            slot = handle & 0xFFFFFFFF
            lateness_us = 0
            if slot < cap and nodes[(slot << 2) + 3] == ((handle >> 32) << 32 | _DUE):
                deadline = nodes[(slot << 2) + 2]
                lateness_us = mono() // 1000 - deadline * 1000
                if lateness_us < 1:
                    late[0] += 1
                    if lateness_us < 0:
                        tally[L.C_EARLY] += 1
                else:
                    b = 1 + int(log2(lateness_us) * _PER_OCTAVE)
                    late[b if b < _BUCKETS else _BUCKETS - 1] += 1
                meta = side[slot << 1]
                tid = meta & 0xFFFF
                try:
                    fn = tasks[tid]
                    if meta >> 16 & 0xFFFFFFFF == _NIL_META and side[(slot << 1) + 1] == _NIL:
                        payload, key, attempt = None, None, 1
                    else:
                        payload, key, attempt = P.decode(self.mem, slot)
                    C._current = (handle, key, deadline, fired_ns, attempt)
                    fn(payload)
                    outcome = SK.OUTCOME_OK
                    tally[L.C_COMPLETED] += 1
                except Exception:
                    outcome = SK.OUTCOME_ERROR
                    tally[L.C_ERRORS] += 1
                    name = self.mem.task_names[tid] if tid < len(tasks) else f"id {tid} (unknown)"
                    self.log(f"task {name} (timer {handle:#x}) raised:\n{traceback.format_exc()}")
                C._current = None
            else:
                outcome = SK.OUTCOME_ERROR
                tally[L.C_GARBAGE] += 1
            head = res[0]  # publish the outcome: record first, head last (ring.py)
            if head - res[8] < rcap:
                r = 16 + ((head & rmask) << 2)
                res[r] = handle
                res[r + 1] = outcome
                res[r + 2] = seq
                res[r + 3] = lateness_us
                res[0] = head + 1
            else:
                self.report(handle, outcome, seq, lateness_us)
            seq += 1
        self.publish_counts()

    def publish_counts(self) -> None:
        """Add this batch's counts and lateness samples to the shared rows (single writer)."""
        for k, v in enumerate(self.tally):
            if v:
                self.row[k] += v
                self.tally[k] = 0
        late = self.late
        for b in [i for i, v in enumerate(late) if v]:
            self.hist[b] += late[b]
            late[b] = 0

    def run(self) -> None:
        self.table[L.X_PID] = os.getpid()
        self.recover()
        ring, table = self.ring, self.table
        while self.running():
            seq0, n = ring.peek(BATCH, self.buf)
            if n == 0:
                table[L.X_SLEEPING] = 1
                if ring.pending() == 0:
                    self.wait(IDLE_WAIT_S)
                table[L.X_SLEEPING] = 0
                continue
            self.run_batch(seq0, n)
            ring.consume(n)
            self.started[0] = -1
            self.mem.ring_bell("reaper")


def _failed_import(error: Exception) -> Callable[[Any], Any]:
    def task(payload: Any) -> None:
        raise error
    return task


def main(service: str, index: int) -> None:
    executor = Executor(service, index)
    executor.settle_heap()
    executor.run()

