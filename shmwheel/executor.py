"""An executor process: runs the registered task of each fired timer and reports its
outcome. Tasks come only from the registry recorded in the segment (``TimerService(tasks=)``);
nothing named in a payload is ever imported.

Per record, in this order: write ``started = seq``, run, publish the result (handle,
outcome, seq, lateness), and after a batch advance the dispatch ring's tail. A replacement
executor on the same rings therefore knows exactly what its predecessor did: results up
to the last published seq are done, the ``started`` record (if unreported) crashed with
it, and the rest are still to run — no task runs twice.
Started by the supervisor through ``shmwheel.process_main``.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from . import fire_context as C
from . import payload as P
from . import service_kernels as SK
from . import service_layout as L
from . import wheel_kernels as K
from .service_process import ServiceProcess

BATCH = 256
_NIL_META = 1 << 16  # flags 0, class 0, length 1: the inline msgpack nil (a None payload)
IDLE_WAIT_S = 0.05


def resolve(spec: str) -> Callable[[Any], Any]:
    """The function a registry entry names: "package.module:function" or
    "/path/to/file.py:function" (how a task defined in a script's __main__ is recorded)."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"task spec {spec!r} must be 'module:function'")
    if module_name.endswith(".py"):
        loader_spec = importlib.util.spec_from_file_location("__shmwheel_main__", module_name)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"cannot load {module_name}")
        module = importlib.util.module_from_spec(loader_spec)
        loader_spec.loader.exec_module(module)
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
        self.tasks: list[Callable[[Any], Any] | Exception] = []
        for name, spec in mem.config.tasks:
            try:
                self.tasks.append(resolve(spec))
            except Exception as e:  # reported on each run of that task
                self.tasks.append(ImportError(f"task {name!r} ({spec}) failed to import: {e!r}"))
        cap = mem.config.capacity
        nodes = mem.wheel[mem.nodes_off : mem.nodes_off + cap * K.NODE_WORDS]
        self.nodes = nodes.data
        self.side = mem.side.data
        self.buf = np.empty((BATCH, L.DISPATCH_RECORD), np.int64)
        self.capacity = cap
        self.started = self.table[L.X_STARTED : L.X_STARTED + 1].data
        self.tally = [0] * L.COUNTER_WORDS
        self.late: Counter[int] = Counter()

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

    def run_one(self, handle: int, fired_ns: int) -> tuple[int, int]:
        """Run one dispatched timer; (outcome, lateness in us). Counts go to self.tally
        and are published per batch (``publish_counts``)."""
        slot = handle & 0xFFFFFFFF
        tally = self.tally
        if not 0 <= slot < self.capacity or \
                self.nodes[slot * 4 + 3] != ((handle >> 32) << 32 | K.DUE):
            tally[L.C_GARBAGE] += 1  # not a timer in flight: never run it
            return SK.OUTCOME_ERROR, 0
        deadline = self.nodes[slot * 4 + 2]
        lateness_us = time.monotonic_ns() // 1000 - deadline * 1000
        if lateness_us < 0:
            tally[L.C_EARLY] += 1
        b = 0 if lateness_us < 1 else 1 + int(math.log2(lateness_us) * L.HIST_PER_OCTAVE)
        self.late[b if b < L.HIST_BUCKETS else L.HIST_BUCKETS - 1] += 1
        side = self.side
        i = slot * SK.SIDE_WORDS
        meta = side[i]
        tid = meta & 0xFFFF
        try:
            if tid >= len(self.tasks):
                raise ValueError(f"timer {handle:#x} names task id {tid}, which is not registered")
            fn = self.tasks[tid]
            if isinstance(fn, Exception):
                raise fn
            if meta >> 16 & 0xFFFFFFFF == _NIL_META and side[i + 1] == P.NIL_INLINE:
                payload, key, attempt = None, None, 1
            else:
                payload, key, attempt = P.decode(self.mem, slot)
            C._set(C.FireContext(handle, key, deadline, fired_ns // 1_000_000, attempt))
            fn(payload)
        except Exception:
            tally[L.C_ERRORS] += 1
            name = self.mem.task_names[tid] if tid < len(self.tasks) else tid
            self.log(f"task {name} (timer {handle:#x}) raised:\n{traceback.format_exc()}")
            return SK.OUTCOME_ERROR, lateness_us
        finally:
            C._set(None)
        tally[L.C_COMPLETED] += 1
        return SK.OUTCOME_OK, lateness_us

    def publish_counts(self) -> None:
        """Add this batch's counts and lateness samples to the shared rows (single writer)."""
        for k, v in enumerate(self.tally):
            if v:
                self.row[k] += v
                self.tally[k] = 0
        for b, v in self.late.items():
            self.hist[b] += v
        self.late.clear()

    def run(self) -> None:
        self.table[L.X_PID] = os.getpid()
        self.recover()
        ring, table, results = self.ring, self.table, self.results
        while self.running():
            seq0, n = ring.peek(BATCH, self.buf)
            if n == 0:
                table[L.X_SLEEPING] = 1
                if ring.pending() == 0:
                    self.wait(IDLE_WAIT_S)
                table[L.X_SLEEPING] = 0
                continue
            started = self.started
            seq = seq0
            for handle, fired_ns in self.buf[:n].tolist():
                started[0] = seq
                outcome, lateness = self.run_one(handle, fired_ns)
                if not results.push(handle, outcome, seq, lateness):
                    self.report(handle, outcome, seq, lateness)
                seq += 1
            ring.consume(n)
            started[0] = -1
            self.publish_counts()
            self.mem.ring_bell("reaper")


def main(service: str, index: int) -> None:
    executor = Executor(service, index)
    executor.settle_heap()
    executor.run()

