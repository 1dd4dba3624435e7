"""The in-process rows of the bench table: the wheel core beside heapq (``schedule_batch``
.. ``memory``), the in-process timers (``timer_ops``, ``timer_fire``) and the Kafka
layer's purgatory (``purgatory_call``), each beside the peers a program would use in its
own process; ``ROWS``, at the end, is the table.
"""

from __future__ import annotations

from ..inprocess import core
from ..service import purgatory
from ..workload import Goal, Workload
from .row import Row, Terms

S = "shmwheel"


def schedule_batch_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "schedule, batch",
        row.run,
        "core",
        [(f"{S} core insert_many", "heapq heapify")],
        about="the wheel core alone, in one process (no service): n timers, delays "
        "1-60 s, inserted in one batch, beside heapq.heapify of the same",
    )


def schedule_call_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "schedule, per call",
        row.run,
        "core",
        [(f"{S} core insert", "heapq heappush")],
        about="the wheel core: n timers inserted one call at a time, beside heappush",
    )


def cancel_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "cancel",
        row.run,
        "core",
        [
            (f"{S} core cancel_many", "heapq lazy cancel"),
            (f"{S} core cancel", "heapq lazy cancel"),
        ],
        about="the wheel core: every timer cancelled, in one batch and one call at a "
        "time, beside the heapq docs' lazy deletion",
        explain={
            "heapq lazy cancel": "lazy deletion only marks the entry and leaves the "
            "work to the pop; the wheel's cancel unlinks the entry and frees its slot "
            "at once."
        },
        notes=["ratio: core cancel / heapq lazy cancel"],
        goals=[
            Goal(
                "wheel core cancel, per call / heapq lazy cancel",
                "ratio: core cancel / heapq lazy cancel",
                ">=",
                1.0,
                "issue 25: a cancel of the in-process wheel costs no more than a heap's "
                "lazy cancel, so users of WheelCore lose nothing per call",
                "the wheel unlinks and frees the entry at once (about 23 ns of C) where "
                "lazy deletion stores one flag; a Python call costs about as much as that "
                "whole store, so an eager cancel cannot reach 1x",
            )
        ],
    )


def expire_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "expire (collect due)",
        row.run,
        "core",
        [(f"{S} core advance", "heapq heappop")],
        about="the wheel core: every timer collected as the clock moves 1 s at a time "
        "(pre-cascade and advance, both timed), beside popping the heap in order",
    )


def stall_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "clock step (wheel_size 20)",
        row.run,
        "core",
        [
            ("max step: pre-cascade", "max step: cascade at expiry (Kafka)"),
            ("p99.9 step: pre-cascade", "p99.9 step: cascade at expiry (Kafka)"),
        ],
        unit="us",
        about="the time of each 1 ms clock step while n timers come due, wheel_size 20 "
        "(Kafka's default): pre-cascading in bounded steps (shmwheel's reaper) beside "
        "cascading a whole bucket when it expires (Kafka's way); same kernels, same timers",
        explain={
            "max step: pre-cascade": "the longest of 60,001 steps: one sample per "
            "repetition. A machine stall (1-3 ms on a shared VM: python "
            "bench/vm_jitter.py) can set either side's maximum; Kafka's way's is its "
            "whole-bucket cascade and recurs in every run. A run where pre-cascade's "
            "maximum is the larger is a stall, not a regression: see the repetitions "
            "(--json) or re-run with --workloads stall --reps 5.",
            "p99.9 step: pre-cascade": "pre-cascading moves the bucket's re-insertion "
            "into ordinary steps, at most 4,096 entries each, so a typical step costs "
            "about the same or a little more: the point is the bounded longest step.",
        },
    )


def memory_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "bytes per pending timer",
        row.run,
        "core",
        [(f"{S} core", "heapq entry"), (f"{S} core", "asyncio call_later")],
        unit="B",
        about="the wheel core's array per pending timer, beside the Python allocations "
        "(tracemalloc) of a pending heap entry and an asyncio TimerHandle",
    )


def timer_ops_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "in-process timer add/cancel",
        row.run,
        "timer",
        [
            ("add: shmwheel SystemTimer", "add: asyncio call_later"),
            ("add: shmwheel SystemTimer", "add: heapq+thread"),
            ("cancel: shmwheel SystemTimer", "cancel: asyncio call_later"),
            ("cancel: shmwheel SystemTimer", "cancel: heapq+thread"),
        ],
        about="the Kafka layer in one process: SystemTimer.add of n TimerTasks, then "
        "the cancel of each, beside asyncio and the heap timer",
        explain={
            "add: shmwheel SystemTimer": "the task sits in the wheel's slot (native "
            "TaskWheel): no entry object per add, no lock per task (issue 25).",
        },
        notes=[
            "ratio: add / asyncio call_later",
            "ratio: add / heapq+thread",
            "ratio: cancel / asyncio call_later",
        ],
        goals=[
            Goal(
                "SystemTimer.add / asyncio call_later",
                "ratio: add / asyncio call_later",
                ">=",
                1.5,
                "issue 25: the Kafka layer, the reference for the service's semantics, "
                "is ahead of the timer Python users reach for first",
                "add pays for Kafka's semantics (a task re-added moves; thread-safe) "
                "beyond asyncio's heap push",
            ),
            Goal(
                "SystemTimer.add / heapq + thread",
                "ratio: add / heapq+thread",
                ">=",
                1.0,
                "issue 25: no slower than the heap and thread a user would write",
                "add pays for Kafka's semantics beyond a heap push",
            ),
            Goal(
                "TimerTask.cancel / asyncio TimerHandle.cancel",
                "ratio: cancel / asyncio call_later",
                ">=",
                1.0,
                "issue 25: cancel is a slot operation, as cheap as asyncio's flag",
                "cancel unlinks the slot at once where asyncio only marks the handle",
            ),
        ],
    )


def timer_fire_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "in-process fire->run (no-op)",
        row.run,
        "timer",
        [
            ("shmwheel SystemTimer", "asyncio call_later"),
            ("shmwheel SystemTimer", "heapq+thread"),
        ],
        about="the Kafka layer: n no-op tasks due together (spread over 20 ms), from the "
        "first deadline until the last has run",
        notes=["ratio: fire->run / asyncio"],
        goals=[
            Goal(
                "fire -> run / asyncio",
                "ratio: fire->run / asyncio",
                ">=",
                3.0,
                "issue 25: the reaper's fire loop in C hands due tasks to Python in batches",
                "the task runner's queue or the Python call per task dominates",
            )
        ],
    )


def purgatory_call_spec(row: Row, t: Terms) -> Workload:
    return Workload(
        row.name,
        "in-process purgatory watch + complete",
        row.run,
        "timer",
        [
            (
                "in-process purgatory watch + complete, per call",
                "asyncio watch + complete, per call",
            )
        ],
        about="the in-process purgatory (its reaper running): per call, watch one "
        "operation on its own key, then check_and_complete that key, beside asyncio "
        "futures with call_later timeouts (W10's peers)",
        notes=["ratio: in-process purgatory / asyncio, per call"],
        goals=[
            Goal(
                "in-process purgatory / asyncio",
                "ratio: in-process purgatory / asyncio, per call",
                ">=",
                2.0,
                "issue 25: Kafka's DelayedOperationPurgatory in process, ahead of what an "
                "asyncio user would write",
                "the user's try_complete and on_complete are Python calls each time",
            )
        ],
    )


ROWS = [
    # id, name,           measured by,                spec: peers, notes, goals
    Row("", "schedule_batch", core.core_schedule_batch,   schedule_batch_spec),
    Row("", "schedule_call",  core.core_schedule_call,    schedule_call_spec),
    Row("", "cancel",         core.core_cancel,           cancel_spec),
    Row("", "expire",         core.core_expire,           expire_spec),
    Row("", "stall",          core.cascade_stall,         stall_spec),
    Row("", "memory",         core.core_memory,           memory_spec),
    Row("", "timer_ops",      core.timer_schedule_cancel, timer_ops_spec),
    Row("", "timer_fire",     core.timer_fire,            timer_fire_spec),
    Row("", "purgatory_call", purgatory.purgatory_call,   purgatory_call_spec),
]  # fmt: skip
