"""Every workload of ``python -m shmwheel.bench``, in table order: the table's text (titles,
the figures compared, notes, goals) is the data file ``workloads.toml``; what is code is
here: the function that measures each workload (``MEASURED``), what it takes from the
command line (``TAKES``), and the names its text is filled in with (``names``). Also the
groups ``--workloads`` accepts, W7's default levels and the workloads with a Redis peer.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..inprocess import core
from ..journal import workloads as journal_workloads
from ..measure import Figures
from ..service import footprint, heartbeat, jobs, lease, ops, purgatory, timing
from ..service.producers import producer_counts, svc_producers
from ..workload import Goal, Workload
from . import fill

GROUPS = {"service": "every svc_* workload (W1-W13)", "inprocess": "every other workload"}
DEFAULT_LEVELS = [10_000, 100_000, 1_000_000]  # W7's pending levels; --full adds FULL_LEVEL
FULL_LEVEL = 10_000_000

SPECS: list[dict[str, Any]] = tomllib.loads(
    resources.files(__package__).joinpath("workloads.toml").read_text(encoding="utf-8")
)["workload"]

MEASURED: dict[str, Callable[..., Figures]] = {
    "svc_schedule_call": ops.svc_schedule_call,
    "svc_schedule_many": ops.svc_schedule_many,
    "svc_cancel": ops.svc_cancel,
    "svc_memory": footprint.svc_memory,
    "svc_lateness": timing.svc_lateness,
    "svc_producers": svc_producers,
    "svc_fire": timing.svc_fire,
    "svc_startup": footprint.svc_startup,
    "svc_scale": ops.svc_scale,
    "svc_journal": journal_workloads.svc_journal,
    "svc_recovery": journal_workloads.svc_recovery,
    "svc_purgatory": purgatory.svc_purgatory,
    "svc_purgatory_expire": purgatory.svc_purgatory_expire,
    "svc_heartbeat": heartbeat.svc_heartbeat,
    "svc_lease": lease.svc_lease,
    "svc_lease_expiry": lease.svc_lease_expiry,
    "svc_jobs": jobs.svc_jobs,
    "schedule_batch": core.core_schedule_batch,
    "schedule_call": core.core_schedule_call,
    "cancel": core.core_cancel,
    "expire": core.core_expire,
    "stall": core.cascade_stall,
    "memory": core.core_memory,
    "timer_ops": core.timer_schedule_cancel,
    "timer_fire": core.timer_fire,
    "purgatory_call": purgatory.purgatory_call,
}

# a workload has a Redis peer where its text names {redis}
REDIS_KEYS = {spec["name"] for spec in SPECS if "redis" in fill.named(spec)}


@dataclass(frozen=True)
class Terms:
    """What the command line sets in the table: W5's producer counts, W7's levels,
    whether the Redis peer runs (its rows and notes appear only then), W9's recovery size
    (named in its goal)."""

    producers: list[int]
    levels: list[int]
    redis: bool
    recovery_n: int


# the keywords a measuring function takes from the command line
TAKES: dict[str, Callable[[Terms], dict[str, Any]]] = {
    "svc_producers": lambda t: {"ks": t.producers},
    "svc_scale": lambda t: {"levels": t.levels},
}


def names(t: Terms) -> dict[str, Any]:
    """The names workloads.toml's text is filled in with: the terms (a list is an entry
    per value; ``redis`` and ``one_and_two`` are empty lists where their entries are left
    out) and the measuring modules, whose constants name the figures they record."""
    return {
        "redis": ["redis"] if t.redis else [],
        "producers": t.producers,
        "one_and_two": [""] if {1, 2} <= set(t.producers) else [],
        "levels": [ops.level_label(x) for x in t.levels],
        "recovery_n": ops.level_label(t.recovery_n),
        "footprint": footprint,
        "heartbeat": heartbeat,
        "jobs": jobs,
        "lease": lease,
        "purgatory": purgatory,
    }


def workload(spec: dict[str, Any], t: Terms) -> Workload:
    """The Workload of one ``[[workload]]`` of workloads.toml under the terms `t`."""
    own = fill.with_lists(spec.get("each", {}), names(t))
    run = MEASURED[spec["name"]]
    if spec["name"] in TAKES:
        run = functools.partial(run, **TAKES[spec["name"]](t))
    return Workload(
        spec["name"],
        fill.fill(spec["title"], own),
        run,
        spec["size"],
        [tuple(pair) for pair in fill.expand(spec.get("rows", []), own)],
        unit=spec.get("unit", "ops/s"),
        notes=fill.expand(spec.get("notes", []), own),
        goals=[Goal(**g) for g in fill.expand(spec.get("goals", []), own)],
        wid=spec.get("id", ""),
        about=fill.fill(spec["about"], own),
        explain=fill.fill(spec.get("explain", {}), own),
    )


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
    t = Terms(
        producers or producer_counts(),
        sorted(levels or DEFAULT_LEVELS),
        redis,
        recovery_n,
    )
    return [workload(spec, t) for spec in SPECS]
