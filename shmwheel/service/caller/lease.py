"""Leases: a timer that its holder keeps from firing by beating it (``Client.lease``).

A lease is one timer slot, made by ``Client.lease(ttl_ms)`` with its deadline ``ttl_ms``
ahead. ``beat()`` is that timer's ``reset`` to ``ttl_ms`` from now (shmwheel/native/
reset.c: one compare-and-swap on the slot and one ring record, no lock, no new slot);
``release()`` is its ``cancel``. If no beat comes within the ttl, the timer fires like any
other: its ``on_expire`` task runs once in the executor pool, never before the last beat's
ttl has passed (a beat and the fire race on the slot's state, and exactly one wins: the
reset rule, shmwheel/native/slots.h), and a beat after that is False, so a holder learns it
was declared dead. With a journal the lease is journaled as the timer it is: a restart keeps
it at its last deadline.

The timer's task is ``on_expire``, or ``L.NO_TASK`` (a no-op every service has) when there
is none; its key is ``[holder]`` (``segment/payload.py``, ``encode_lease``), which
``shmwheel.context()`` reports as ``holder`` in the expiry task.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from ... import _native as N
from ...segment import layout as L
from ...segment import payload as P
from . import times as T
from .client_base import ClientBase
from .handles import _FutureLike

# a lease's outcome, from its timer's: released (cancelled) or expired (its task ran,
# whatever the task did: exception() tells an error); "stopped" stays as it is
_WORDS = {"cancelled": "released", "ok": "expired", "error": "expired", "crashed": "expired"}


def _word(outcome: str) -> str:
    return _WORDS.get(outcome, outcome)


def _restore_lease(restore: Any, args: tuple[Any, ...], holder: str | None, ttl: float) -> Lease:
    """A pickled lease in this process: its handle restored as any handle is, then its
    holder and ttl set."""
    lease: Lease = restore(*args)
    lease.holder, lease._ttl = holder, float(ttl)
    return lease


def _ttl(value: object, limit: int) -> float:
    """A lease's ttl checked: a delay (times.check_delay) that is more than 0."""
    ttl = T.check_delay(value, "ttl_ms", limit)
    if ttl <= 0:
        raise ValueError("ttl_ms must be > 0")
    return ttl


class Lease(_FutureLike):
    """A lease held by ``holder`` (``Client.lease``): it expires unless beaten within its
    ttl. ``beat(ttl_ms=None)`` renews it for ``ttl_ms`` (default: its own ttl) from now and
    is True iff it was still held; ``release()`` ends it, True iff it was held (its
    on_expire task then never runs). Future-like, as TimerHandle (the whole
    concurrent.futures protocol, ``await``): ``result()`` is "expired" once it expired and
    its on_expire task ran (``exception()`` gives the TaskError if that task raised),
    "released" once released, "stopped" if the service stopped first. ``cancel()`` is
    ``release()``, and ``cancelled()`` True once released. It pickles, so it can be handed
    to the process that holds it (which beats it through a client of its own, connected on
    first need); ``id`` and ``deadline_ms`` (of this process's last beat) as a handle's."""

    __slots__ = ("holder",)
    holder: str | None

    def __new__(
        cls, client: Any, id: int, deadline_ms: int, holder: str | None = None, ttl_ms: float = 0
    ) -> Lease:
        return super().__new__(cls, client, id, deadline_ms)  # type: ignore[call-arg]

    def __init__(
        self, client: Any, id: int, deadline_ms: int, holder: str | None = None, ttl_ms: float = 0
    ) -> None:
        self.holder, self._ttl = holder, float(ttl_ms)

    @property
    def ttl_ms(self) -> float:
        """The ttl (ms) a beat without one renews the lease for, as Client.lease was given."""
        return float(self._ttl)

    # beat(ttl_ms=None) -> bool: renew the lease, its deadline ttl_ms (None: the lease's
    # ttl) from now; True iff renewed, False once it expired or was released. Native
    # (shmwheel/native/handle.c, _lease_beat): the client's reset to the ttl, no Python
    # frame between.
    beat = N.Handle._lease_beat

    def release(self) -> bool:
        """End the lease: True iff it was held (its on_expire task will never run); False
        once it expired or was released already."""
        return bool(self.cancel())

    def result(self, timeout: float | None = None) -> str:
        """Wait up to `timeout` seconds (None: no limit) for the lease to end: "expired"
        (its on_expire task has run), "released", or "stopped" (the service stopped first).
        TimeoutError if it has not ended in time."""
        return _word(super().result(timeout))

    def __await__(self) -> Generator[Any, None, str]:
        """``await lease`` gives result(); an awaiting task that is cancelled releases the
        lease if it is still held (as awaiting a handle cancels its timer)."""
        return _word((yield from super().__await__()))

    def __reduce__(self) -> tuple[Any, ...]:
        restore, args = super().__reduce__()
        return (_restore_lease, (restore, args, self.holder, self.ttl_ms))

    def __repr__(self) -> str:
        return (
            f"Lease(id={self.id:#x}, holder={self.holder!r}, ttl_ms={self.ttl_ms}, "
            f"deadline_ms={self.deadline_ms})"
        )


class LeaseCalls(ClientBase):
    """``Client.lease`` (a part of ``Client``: service/caller/client.py joins it with the
    others)."""

    def lease(
        self,
        ttl_ms: float,
        *,
        on_expire: str | None = None,
        payload: Any = None,
        holder: str | None = None,
    ) -> Lease:
        """A lease of `ttl_ms` ms for `holder` (any str, or None), held from now: it expires
        unless beaten (``Lease.beat``) within its ttl, and then the task `on_expire` (a
        registered task name; None: no task, only the outcome) runs once in the executor
        pool with `payload`; ``shmwheel.context().holder`` there names the holder. Errors
        as schedule(): an unknown task, a ttl not in (0, the wheel's range), a payload
        msgpack cannot encode or too large, a holder that is not a str, a full service."""
        self._check_accepting()
        tid = self._mem.task_ids[L.NO_TASK] if on_expire is None else self._task_id(on_expire)
        ttl = _ttl(ttl_ms, self._max_delay)
        blob, flags = P.encode_lease(payload, holder)
        deadline = T.due_ms(time.monotonic_ns(), ttl)
        h = self._schedule_blob(tid, blob, flags, deadline, 0)
        return Lease(self, h, deadline, holder, ttl)
