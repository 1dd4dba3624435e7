"""One repetition of each multiprocess-service workload, for shmwheel and its peers.

Like ``workloads``: every function takes a size and returns ``{figure: value}`` for one
repetition. Each workload starts its own ``TimerService`` (default executors, so the
pool is sized from nproc), measures it, stops it in a ``finally`` (which ends every
service process and unlinks its segment and semaphores), and only then measures the
baselines, so the idle service does not share the CPU with them.

The producer in the single-producer workloads is this process (the bench), a separate
process from the service's coordinator, reaper and executors. Timers that must not fire
while they are measured get delays of 30-60 s; stopping the service drops them.

This module only gathers the workloads, which live by capability in
``service_ops`` (W1 schedule, W2 cancel, W7 scale), ``service_footprint``
(W3 memory, W8 start-up), ``service_timing`` (W4 lateness, W6 fire) and
``service_producers`` (W5), and the shared helpers of ``service_common``. The bench's
mutable run state (``use_redis``, ``REDIS_CALL_N``, ``REDIS_BATCH_N``, ``services_started``,
``leaked``, ``lateness_samples``, ``lateness_hists``) is not re-exported: set and read it
as ``service_common.NAME``.
"""

from __future__ import annotations

from .service_common import (
    BATCH,
    FAR_HI_MS,
    FAR_LO_MS,
    MEMORY_CAPACITY,
    TASKS,
    Figures,
    R,
    S,
    noop_task,
    owned,
    warm,
)
from .service_footprint import RSS_N, RSS_PEERS, TRACE_N, svc_memory, svc_startup
from .service_ops import (
    SCALE_OPS,
    SCHED_CANCEL_BUDGET_S,
    batch_delays,
    level_label,
    sched_cancel_rate,
    schedule_call_rate,
    schedule_many_rate,
    svc_cancel,
    svc_scale,
    svc_schedule_call,
    svc_schedule_many,
)
from .service_producers import producer_counts, svc_producers
from .service_timing import (
    LATENESS_MARGIN_MS,
    POOL_CHUNK,
    POOL_MAP_N,
    POOL_N,
    QUICK_MARGIN_MS,
    svc_fire,
    svc_lateness,
)

__all__ = [
    "BATCH",
    "FAR_HI_MS",
    "FAR_LO_MS",
    "LATENESS_MARGIN_MS",
    "MEMORY_CAPACITY",
    "POOL_CHUNK",
    "POOL_MAP_N",
    "POOL_N",
    "QUICK_MARGIN_MS",
    "RSS_N",
    "RSS_PEERS",
    "SCALE_OPS",
    "SCHED_CANCEL_BUDGET_S",
    "TASKS",
    "TRACE_N",
    "Figures",
    "R",
    "S",
    "batch_delays",
    "level_label",
    "noop_task",
    "owned",
    "producer_counts",
    "sched_cancel_rate",
    "schedule_call_rate",
    "schedule_many_rate",
    "svc_cancel",
    "svc_fire",
    "svc_lateness",
    "svc_memory",
    "svc_producers",
    "svc_scale",
    "svc_schedule_call",
    "svc_schedule_many",
    "svc_startup",
    "warm",
]
