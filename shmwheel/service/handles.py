"""Handles of scheduled timers: ``TimerHandle`` (one timer; its native base holds the id and
deadline and cancels by compare-and-swap) and ``TimerHandles`` (a batch, over arrays).

A handle is bound to the service instance that made it: its client's ``_instance``, the
random word the supervisor wrote into the segment header at create (layout.py,
``W_INSTANCE``). A client refuses a handle of another instance with ValueError
(``check_owner``; the native cancel checks the same, producer.c ``handle_id``), even one
of a service of the same name that was stopped and started again: the same id there is
another timer. A bare int id is the caller's business."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .. import _native as N
from ..segment import contract as C

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client
    from .outcomes import Outcomes


class _FutureLike(N.Handle):
    """The futures side shared by TimerHandle and Operation (concurrent.futures.Future's
    names): the outcome reaches the client that asks through its outcome ring
    (shmwheel/service/outcomes.py); nothing is paid until someone asks."""

    __slots__ = ()
    _operation = False

    def _outcomes(self) -> Outcomes:
        client: Client = self._client
        return client._outcomes_of()

    def _fut(self) -> concurrent.futures.Future[str]:
        """This handle's future: made on the first ask and kept on the handle, so the
        outcome stays known to it however long after the slot is used again."""
        fut: concurrent.futures.Future[str] | None = self._future
        if fut is None:
            fut = self._future = self._outcomes().future(self.id, self._operation)
        return fut

    def done(self) -> bool:
        """True once the outcome is decided: ran (ok, error, crashed), cancelled, or for an
        operation completed / expired and its task run. Never blocks."""
        if self._future is not None and self._future.done():
            return True
        return self._outcomes().known(self.id, self._operation) is not None

    def cancelled(self) -> bool:
        """True iff a cancel won: the task never ran and never will."""
        fut = self._future
        if fut is not None and fut.done() and fut.exception() is None:
            return bool(fut.result() == "cancelled")
        return self._outcomes().known(self.id, self._operation) == "cancelled"

    def result(self, timeout: float | None = None) -> str:
        """Wait up to `timeout` seconds (None: no limit) for the outcome and return it:
        "ok" / "error" / "crashed" / "cancelled" for a timer, "completed" / "expired" /
        "cancelled" for an operation. TimeoutError if it is not decided in time. A
        repeating timer is decided only when it stops (cancelled, or its last run)."""
        return self._fut().result(timeout)

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call fn(handle) once the outcome is decided (at once if it is): in this
        process, on the client's outcome thread."""
        self._fut().add_done_callback(lambda _f: fn(self))

    def __await__(self) -> Generator[Any, None, str]:
        """``await handle`` gives result(): the event loop is woken by the client's outcome
        thread (asyncio.wrap_future), never blocked, and nothing polls the service."""
        return asyncio.wrap_future(self._fut()).__await__()

    def __eq__(self, other: object) -> bool:
        """Equal: the same kind, id and service instance."""
        return (
            type(other) is type(self)
            and other.id == self.id
            and other._client._instance == self._client._instance
        )

    def __hash__(self) -> int:
        return hash(self.id)


class TimerHandle(_FutureLike):
    """A scheduled timer. ``id`` is unique while the service lives and can be passed to
    ``Client.cancel`` or ``Client.handle`` in any process; ``cancel()`` is True iff the
    task will never run. Handles compare equal by id, and follow
    ``concurrent.futures.Future``: ``done()``, ``cancelled()``, ``result(timeout)``,
    ``add_done_callback(fn)``, and ``await``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return (
            f"TimerHandle(id={self.id:#x}, slot={C.handle_slot(self.id)}, "
            f"deadline_ms={self.deadline_ms})"
        )


def check_owner(client: Client, owner: Any, what: str) -> None:
    """Nothing if `owner` (the client that made a handle, or a batch of them, described by
    `what`) is bound to `client`'s service instance; else the ValueError that names both
    services (nothing has been changed in either)."""
    if owner is client or getattr(owner, "_instance", None) == client._instance:
        return
    theirs = getattr(owner, "name", "?")
    if theirs == client.name:
        whose = (
            f"another instance of service {theirs!r} (it was stopped and started again "
            f"since), not by the running one, this client's"
        )
    else:
        whose = f"service {theirs!r}, not by service {client.name!r} (this client's)"
    raise ValueError(
        f"{what} was made by {whose}: a handle cancels only in the service instance that "
        f"made it (the same id there is another timer). Nothing was cancelled: use a "
        f"client of the handle's own service"
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
