"""A deterministic timer for tests (Kafka's MockTimer): a manual clock, tasks run inline.

``MockTimer.advance_clock(ms)`` moves the clock forward by ``ms`` and runs every task
that came due, in the calling thread, before it returns. It uses the same wheel as
``SystemTimer``, so tests of timer users exercise the real structure.
"""

from __future__ import annotations

from .system_timer import SystemTimer
from .timing_wheel import TimerTask


class ManualClock:
    """A monotonic clock that moves only when told to. Call it for nanoseconds."""

    def __init__(self, start_ms: int = 0) -> None:
        self._ns = start_ms * 1_000_000

    def __call__(self) -> int:
        return self._ns

    @property
    def ms(self) -> int:
        return self._ns // 1_000_000

    def advance(self, ms: int) -> None:
        """Move the clock forward by ``ms`` milliseconds (never back)."""
        if ms < 0:
            raise ValueError("a monotonic clock cannot go back")
        self._ns += ms * 1_000_000


class MockTimer(SystemTimer):
    """SystemTimer on a ManualClock whose tasks run inline during ``advance_clock``."""

    def __init__(
        self, clock: ManualClock | None = None, tick_ms: int = 1, wheel_size: int = 20
    ) -> None:
        self.clock = clock or ManualClock()
        self._inline_runs = 0
        super().__init__("mock", tick_ms, wheel_size, self.clock.ms, clock_ns=self.clock)

    def _make_runner(self) -> None:
        return None

    def _submit(self, tasks: list[TimerTask]) -> None:
        self._inline_runs += len(tasks)
        for task in tasks:
            task.run()

    @property
    def tasks_run(self) -> int:
        return self._inline_runs

    def advance_clock(self, timeout_ms: int) -> bool:
        """Move the clock forward by ``timeout_ms``; run what came due. True if any ran."""
        self.clock.advance(timeout_ms)
        with self._cond:
            due = self._advance(self.clock.ms)
            while self._cascade(1 << 30):
                pass
        before = self._inline_runs
        self._run_due(due)
        return self._inline_runs > before
