"""Every workload of ``python -m shmwheel.bench``, in table order: the service workloads
(W1-W13: the rows of ``service``, ``journal_purgatory``, ``heartbeat``, ``jobs``), then the
in-process ones (``inprocess``: wheel core, timers, Kafka layer); and the groups
``--workloads`` accepts.
"""

from __future__ import annotations

from ..journal import workloads as journal_workloads
from ..service import producers as service_producers
from ..workload import Workload
from . import heartbeat, inprocess, jobs, journal_purgatory, service
from .row import Row, Terms

GROUPS = {"service": "every svc_* workload (W1-W13)", "inprocess": "every other workload"}


def table() -> list[Row]:
    """Every row, in table order: W1-W8, W9 and W10, W11 and W12, W13, then the in-process
    rows."""
    return [
        *service.ROWS,
        *journal_purgatory.ROWS,
        *heartbeat.ROWS,
        *jobs.ROWS,
        *inprocess.ROWS,
    ]


def workloads(
    producers: list[int] | None = None,
    levels: list[int] | None = None,
    redis: bool = False,
    recovery_n: int = journal_workloads.RECOVERY_N,
) -> list[Workload]:
    """W1-W13 first (each multiprocess-service workload against its peers, with the Redis
    peer's rows if `redis`), then the further in-process workloads (wheel core, Kafka
    layer). With `redis`, main() sets service.common.use_redis to the same value so that
    the workloads measure it; `recovery_n` only names W9's recovery goal: the workload
    recovers sizes["recovery"] timers."""
    terms = Terms(
        producers or service_producers.producer_counts(),
        sorted(levels or service.DEFAULT_LEVELS),
        redis,
        recovery_n,
    )
    return [row.workload(terms) for row in table()]
