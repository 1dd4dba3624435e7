"""Handles of scheduled timers: ``TimerHandle`` (one timer; its native base holds the id and
deadline and cancels by compare-and-swap) and ``TimerHandles`` (a batch, over arrays)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .. import _native as N
from ..segment import contract as C

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client


class TimerHandle(N.Handle):
    """A scheduled timer. ``id`` is unique while the service lives and can be passed to
    ``Client.cancel`` in any process; ``cancel()`` is True iff the task will never run.
    Handles compare equal by id."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimerHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return (
            f"TimerHandle(id={self.id:#x}, slot={C.handle_slot(self.id)}, "
            f"deadline_ms={self.deadline_ms})"
        )

    # the futures-like side of API.md section 2 is not built yet: say so, clearly
    def done(self) -> bool:
        """Not built yet (raises NotImplementedError): outcomes do not reach clients."""
        raise NotImplementedError(_NO_OUTCOMES)

    def cancelled(self) -> bool:
        """Not built yet (raises NotImplementedError); ``cancel()``'s result says it."""
        raise NotImplementedError(_NO_OUTCOMES)

    def result(self, timeout: float | None = None) -> str:
        """Not built yet (raises NotImplementedError)."""
        raise NotImplementedError(_NO_OUTCOMES)

    def add_done_callback(self, fn: Any) -> None:
        """Not built yet (raises NotImplementedError)."""
        raise NotImplementedError(_NO_OUTCOMES)

    def __await__(self) -> Any:
        raise NotImplementedError(_NO_OUTCOMES)


_NO_OUTCOMES = (
    "a timer's outcome does not reach the client yet (done/result/callbacks/await "
    "are not built; see docs/api.md): cancel() returns whether it will run, and "
    "stats() counts outcomes"
)


class TimerHandles(Sequence[TimerHandle]):
    """The handles of one ``schedule_many`` call as two arrays (ids, deadlines); items are
    TimerHandle objects made on access, so a million handles cost 16 MB, not a million
    objects."""

    def __init__(self, client: Client, ids: np.ndarray, deadlines: np.ndarray) -> None:
        self._client = client
        self.ids = ids
        self.deadlines_ms = deadlines

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> TimerHandle: ...
    @overload
    def __getitem__(self, i: slice) -> TimerHandles: ...

    def __getitem__(self, i: int | slice) -> TimerHandle | TimerHandles:
        if isinstance(i, slice):
            return TimerHandles(self._client, self.ids[i], self.deadlines_ms[i])
        return TimerHandle(self._client, int(self.ids[i]), int(self.deadlines_ms[i]))

    def __iter__(self) -> Iterator[TimerHandle]:
        for h, d in zip(self.ids.tolist(), self.deadlines_ms.tolist(), strict=True):
            yield TimerHandle(self._client, h, d)

    def cancel(self) -> np.ndarray:
        """Cancel all; a bool array, True where that timer will never run."""
        return self._client.cancel_many(self.ids)

    def __repr__(self) -> str:
        return f"TimerHandles({len(self)} timers of client ring {self._client.ring})"
