"""shmwheel: Kafka's hierarchical timing wheel, SystemTimer and purgatory for Python.

The public API, all importable from here:

* the in-process, Kafka-faithful layer (``shmwheel.kafka``): TimerTask, TimerTaskEntry,
  TimingWheel, SystemTimer, MockTimer, ManualClock, DelayedOperation,
  DelayedOperationPurgatory;
* the wheel core both layers share (``shmwheel.wheel``): WheelCore;
* the multiprocess service (``shmwheel.service``): TimerService, connect, Client,
  TimerHandle, TimerHandles, Operation (the cross-process purgatory), Lease, context,
  FireContext;
* jobs, work bounded in time (``shmwheel.service.jobs``): Executor, Job, Retry;
* errors: ShmwheelError, Full, LayoutError, SharedMemoryFull, JournalError, JournalInUse,
  RecoveryError, UntrustedPath, TaskError (what a handle's ``exception()`` gives when its
  task raised, and what a job's ``result()`` raises when it failed), JobTimeout (a job
  that passed its time limit) and RemoteTraceback (their cause).

Everything else (``shmwheel.segment``, the native core ``shmwheel._native``, the service
processes) is private: its names may change between releases.
"""

from typing import TYPE_CHECKING, Any

from . import _lazy
from .errors import (
    Full,
    JobTimeout,
    JournalError,
    JournalInUse,
    LayoutError,
    RecoveryError,
    RemoteTraceback,
    SharedMemoryFull,
    ShmwheelError,
    TaskError,
    UntrustedPath,
)

# Each public name is imported from its module on first use (PEP 562), so `import
# shmwheel` costs almost nothing and a process pays only for the layer it uses (the
# Kafka layer, the service). Type checkers see the real imports below.
_WHERE = {
    "ManualClock": ".kafka.mock_timer",
    "MockTimer": ".kafka.mock_timer",
    "DelayedOperation": ".kafka.purgatory",
    "DelayedOperationPurgatory": ".kafka.purgatory",
    "SystemTimer": ".kafka.system_timer",
    "TimerTask": ".kafka.timing_wheel",
    "TimerTaskEntry": ".kafka.timing_wheel",
    "TimingWheel": ".kafka.timing_wheel",
    "Client": ".service.caller.client",
    "connect": ".service.caller.client",
    "TimerHandle": ".service.caller.handles",
    "TimerHandles": ".service.caller.handles",
    "Operation": ".service.caller.purgatory",
    "Lease": ".service.caller.lease",
    "FireContext": ".service.processes.context",
    "context": ".service.processes.context",
    "TimerService": ".service.supervisor.supervisor",
    "WheelCore": ".wheel.core",
    "Executor": ".service.jobs.executor",
    "Job": ".service.jobs.job",
    "Retry": ".service.jobs.retry",
}

if TYPE_CHECKING:  # pragma: no cover
    from .kafka.mock_timer import ManualClock, MockTimer
    from .kafka.purgatory import DelayedOperation, DelayedOperationPurgatory
    from .kafka.system_timer import SystemTimer
    from .kafka.timing_wheel import TimerTask, TimerTaskEntry, TimingWheel
    from .service.caller.client import Client, connect
    from .service.caller.handles import TimerHandle, TimerHandles
    from .service.caller.lease import Lease
    from .service.caller.purgatory import Operation
    from .service.jobs.executor import Executor
    from .service.jobs.job import Job
    from .service.jobs.retry import Retry
    from .service.processes.context import FireContext, context
    from .service.supervisor.supervisor import TimerService
    from .wheel.core import WheelCore


def __getattr__(name: str) -> Any:
    return _lazy.load(name, __name__, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Client",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "Executor",
    "FireContext",
    "Full",
    "Job",
    "JobTimeout",
    "JournalError",
    "JournalInUse",
    "LayoutError",
    "Lease",
    "ManualClock",
    "MockTimer",
    "Operation",
    "RecoveryError",
    "RemoteTraceback",
    "Retry",
    "SharedMemoryFull",
    "ShmwheelError",
    "SystemTimer",
    "TaskError",
    "TimerHandle",
    "TimerHandles",
    "TimerService",
    "TimerTask",
    "TimerTaskEntry",
    "TimingWheel",
    "UntrustedPath",
    "WheelCore",
    "connect",
    "context",
]

__version__ = "0.1.0"
