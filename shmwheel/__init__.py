"""shmwheel: Kafka's hierarchical timing wheel, SystemTimer and purgatory for Python.

The public API, all importable from here:

* the in-process, Kafka-faithful layer (``shmwheel.kafka``): TimerTask, TimerTaskEntry,
  TimingWheel, SystemTimer, MockTimer, ManualClock, DelayedOperation,
  DelayedOperationPurgatory;
* the wheel core both layers share (``shmwheel.wheel``): WheelCore;
* the multiprocess service (``shmwheel.service``): TimerService, connect, Client,
  TimerHandle, TimerHandles, context, FireContext;
* errors: ShmwheelError, Full, LayoutError.

Everything else (``shmwheel.segment``, the native core ``shmwheel._native``, the service
processes) is private: its names may change between releases.
"""

from .errors import Full, LayoutError, ShmwheelError
from .kafka.mock_timer import ManualClock, MockTimer
from .kafka.purgatory import DelayedOperation, DelayedOperationPurgatory
from .kafka.system_timer import SystemTimer
from .kafka.timing_wheel import TimerTask, TimerTaskEntry, TimingWheel
from .service.client import Client, TimerHandle, TimerHandles, connect
from .service.context import FireContext, context
from .service.supervisor import TimerService
from .wheel.core import WheelCore

__all__ = [
    "Client",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "FireContext",
    "Full",
    "LayoutError",
    "ManualClock",
    "MockTimer",
    "ShmwheelError",
    "SystemTimer",
    "TimerHandle",
    "TimerHandles",
    "TimerService",
    "TimerTask",
    "TimerTaskEntry",
    "TimingWheel",
    "WheelCore",
    "connect",
    "context",
]

__version__ = "0.1.0"
