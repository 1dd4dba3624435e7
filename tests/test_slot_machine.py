"""The slot state machine without processes: a hypothesis stateful test that drives the
real tables, rings and native code over a segment in this process's memory, playing
clients, the coordinator, the reaper and an executor in random orders, with cancels,
crash repairs, a client's death, an executor's and a reaper's — and checks ``verify()``
and the one-outcome rule after every step.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from slot_machine import SlotMachine

TestSlotMachine = SlotMachine.TestCase
TestSlotMachine.settings = settings(
    max_examples=120,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
