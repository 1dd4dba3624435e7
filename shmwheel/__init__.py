"""shmwheel: Kafka's hierarchical timing wheel, SystemTimer and purgatory for Python.

The in-process, Kafka-faithful layer (API.md section 1) and the multiprocess service
(section 2) are importable from here.
"""

from .client import Client, TimerHandle, TimerHandles, connect
from .errors import Full, LayoutError, ShmwheelError
from .fire_context import FireContext, context
from .mock_timer import ManualClock, MockTimer
from .purgatory import DelayedOperation, DelayedOperationPurgatory
from .service import TimerService
from .system_timer import SystemTimer
from .timing_wheel import TimerTask, TimerTaskEntry, TimingWheel
from .wheel_core import WheelCore

__all__ = [
    "Client",
    "FireContext",
    "TimerHandle",
    "TimerHandles",
    "TimerService",
    "connect",
    "context",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "Full",
    "LayoutError",
    "ManualClock",
    "MockTimer",
    "ShmwheelError",
    "SystemTimer",
    "TimerTask",
    "TimerTaskEntry",
    "TimingWheel",
    "WheelCore",
]

__version__ = "0.1.0"
