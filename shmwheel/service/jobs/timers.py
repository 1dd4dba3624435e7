"""The job pool's timers: back-offs before a retry and hard stops after a time limit's
grace, in a ``WheelCore`` (the shmwheel wheel, tick 1 ms, in this process's memory).
Used by the pool's manager thread and, under the pool's lock, by callers that cancel.

The wheel is made with the first timer: the wheel core imports numpy, which a pool whose
jobs never retry nor overrun (and the program that starts it) need not load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ShmwheelError
from ...segment.clock import now_ms

if TYPE_CHECKING:  # pragma: no cover
    from ...wheel.core import WheelCore


class Timers:
    """Timers of a kind ("retry", "hard") and a target each. A timer due at t ms fires
    at the first ``due(now)`` with ``now >= t``: never early."""

    def __init__(self) -> None:
        self._wheel: WheelCore | None = None  # made by the first add()
        self._live: dict[int, tuple[int, str, Any]] = {}  # slot -> (handle, kind, target)

    def add(self, due_ms: int, kind: str, target: Any) -> int:
        """A timer due at `due_ms` (monotonic ms); its handle."""
        wheel = self._wheel
        if wheel is None:
            from ...wheel.core import WheelCore

            wheel = self._wheel = WheelCore(1, 64, now_ms(), 256)
        handle = int(wheel.insert(max(due_ms, wheel.current_time + 1)))
        if handle < 0:
            raise ShmwheelError(f"the job pool's wheel refused a timer due at {due_ms} ms")
        self._live[wheel.slot_of(handle)] = (handle, kind, target)
        return handle

    def cancel(self, handle: int) -> bool:
        wheel = self._wheel
        if handle < 0 or wheel is None or not wheel.cancel(handle):
            return False
        self._live.pop(wheel.slot_of(handle), None)
        return True

    def due(self, now: int) -> list[tuple[str, Any]]:
        """The (kind, target) of every timer due at `now`, in deadline order."""
        if self._wheel is None:
            return []
        return [self._live.pop(slot)[1:] for slot in self._wheel.advance(now).tolist()]

    def next_ms(self) -> int | None:
        """When the wheel next has work; None when it holds no timer."""
        return None if self._wheel is None else self._wheel.next_wakeup()

    def count(self, kind: str) -> int:
        return sum(1 for _, k, _ in self._live.values() if k == kind)

    def drop(self, kind: str) -> list[Any]:
        """Cancel every timer of `kind`; their targets."""
        out = []
        for handle, k, target in list(self._live.values()):
            if k == kind and self.cancel(handle):
                out.append(target)
        return out
