"""Handles of scheduled timers: ``TimerHandle`` (one timer; its native base holds the id and
deadline and cancels by compare-and-swap) and ``TimerHandles`` (a batch, over arrays).

A handle is bound to the service instance that made it: its client's ``_instance``, the
random word the supervisor wrote into the segment header at create (layout.py,
``W_INSTANCE``). A client refuses a handle of another instance with ValueError
(``check_owner``; the native cancel checks the same, producer.c ``handle_id``), even one
of a service of the same name that was stopped and started again: the same id there is
another timer. A bare int id is the caller's business.

What a handle needs of its client is declared here (``HandleOwner``), so this module
imports no client module: the client (service/caller/client.py) imports it, never the reverse.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

import numpy as np

from ... import _native as N
from ...errors import ShmwheelError
from ...segment import contract as C

if TYPE_CHECKING:  # pragma: no cover
    from ..tracebacks import Outcome
    from .outcomes import Outcomes


class ServiceBound(Protocol):
    """A client, as ``check_owner`` sees it: bound to one instance of a named service."""

    @property
    def name(self) -> str: ...
    @property
    def _instance(self) -> int: ...


class HandleOwner(ServiceBound, Protocol):
    """What a handle (or a batch of them) uses of the client that made it; the Client
    (service/caller/client.py) is one. ``_restore_handle`` makes a handle again in another
    process (pickling, ``__reduce__``): a function of the client's module, so that
    unpickling imports it."""

    ring: int

    def _outcomes_of(self) -> Outcomes: ...
    def cancel_many(self, handles: Any) -> np.ndarray: ...
    @staticmethod
    def _restore_handle(
        kind: type[_FutureLike], service: str, instance: int, id: int, deadline_ms: int
    ) -> _FutureLike: ...


class _Relay:
    """One stdlib waiter (concurrent.futures' wait / as_completed) installed on the
    internal future of a handle: it reports the handle, not the internal future, so the
    sets the helpers return hold what the caller passed in."""

    __slots__ = ("waiter", "handle")

    def __init__(self, waiter: Any, handle: _FutureLike) -> None:
        self.waiter, self.handle = waiter, handle

    def add_result(self, f: object) -> None:
        if getattr(f, "task_error", None) is not None:  # FIRST_EXCEPTION: a task raised
            self.waiter.add_exception(self.handle)
        else:
            self.waiter.add_result(self.handle)

    def add_exception(self, _f: object) -> None:
        self.waiter.add_exception(self.handle)

    def add_cancelled(self, _f: object) -> None:
        self.waiter.add_cancelled(self.handle)


class _Waiters:
    """``handle._waiters`` as the stdlib helpers use it (append, remove): a view of the
    internal future's waiter list that wraps each waiter in a _Relay."""

    __slots__ = ("_handle", "_list")

    def __init__(self, handle: _FutureLike, fut: concurrent.futures.Future[str]) -> None:
        self._handle, self._list = handle, fut._waiters

    def append(self, waiter: Any) -> None:
        self._list.append(_Relay(waiter, self._handle))  # type: ignore[arg-type]

    def remove(self, waiter: Any) -> None:
        for r in self._list:
            if isinstance(r, _Relay) and r.waiter is waiter and r.handle is self._handle:
                self._list.remove(r)
                return
        raise ValueError("waiter not installed on this handle")


class _Callback:
    """A done callback of a handle: fn(handle), findable by fn for remove_done_callback."""

    __slots__ = ("fn", "handle")

    def __init__(self, fn: Callable[[Any], object], handle: _FutureLike) -> None:
        self.fn, self.handle = fn, handle

    def __call__(self, _f: object) -> None:
        self.fn(self.handle)


class _LoopCallback(_Callback):
    """A done callback added in an event loop's thread: fn(handle) is called on that
    loop, as an asyncio future's callback is. asyncio.wait adds its callbacks straight to
    what it is given (Python 3.11 wraps only coroutines), and one called on the outcome
    thread would set the waiter without waking the loop: wait() would return only at its
    timeout, or never."""

    __slots__ = ("loop",)

    def __init__(
        self, fn: Callable[[Any], object], handle: _FutureLike, loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(fn, handle)
        self.loop = loop

    def __call__(self, _f: object) -> None:
        try:
            self.loop.call_soon_threadsafe(self.fn, self.handle)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass


def _to_loop(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[str]) -> Callable[[Any], None]:
    """A done callback of the internal future that hands its outcome to `waiter` on its
    event loop (from the client's outcome thread, or at once)."""

    def copy(f: concurrent.futures.Future[str]) -> None:
        if waiter.done():
            return
        exc = f.exception()
        if exc is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(f.result())

    def relay(f: concurrent.futures.Future[str]) -> None:
        try:
            loop.call_soon_threadsafe(copy, f)
        except RuntimeError:  # the loop is closed: nobody awaits any more
            pass

    return relay


class _FutureLike(N.Handle, concurrent.futures.Future[str]):
    """The futures side shared by TimerHandle and Operation. A handle IS a
    ``concurrent.futures.Future`` (isinstance holds, and the standard library's helpers
    accept it), but it never runs ``Future.__init__``: handles are made by the native
    schedule path without a lock or a condition each. The state the helpers read
    (``_condition``, ``_state``, ``_waiters``) is an internal future's, made on the first
    ask and resolved through the client's outcome ring (shmwheel/service/caller/outcomes.py);
    nothing is paid until someone asks. Only the service decides a handle: set_result()
    and the like raise, and cancel() is the timer's cancel (True iff it never runs)."""

    __slots__ = ()
    _operation = False

    def __init__(self, client: Any, id: int, deadline_ms: int) -> None:
        """Nothing to do: N.Handle's __new__ stored the fields."""

    def _outcomes(self) -> Outcomes:
        client: HandleOwner = self._client
        return client._outcomes_of()

    def _fut(self) -> Outcome:
        """This handle's internal future: made on the first ask and kept on the handle, so
        the outcome stays known to it however long after the slot is used again."""
        fut: Outcome | None = self._future
        if fut is None:
            fut = self._future = self._outcomes().future(self.id, self._operation)
        return fut

    def _settled(self) -> Outcome:
        """The internal future, resolved now if the slot's words say it is decided (its
        notification may still be on the way to the outcome thread)."""
        fut = self._fut()
        if not fut.done():
            self._outcomes().settle(self.id)
        return fut

    # -- what concurrent.futures.wait / as_completed read --------------------------------
    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._fut()._condition

    @property
    def _state(self) -> str:  # type: ignore[override]
        return self._fut()._state

    @property
    def _waiters(self) -> _Waiters:  # type: ignore[override]
        return _Waiters(self, self._fut())

    # -- the Future API ------------------------------------------------------------------
    def done(self) -> bool:
        """True once the outcome is decided: ran (ok, error, crashed), cancelled, stopped,
        or for an operation completed / expired and its task run. Never blocks, and reads
        the slot without starting the outcome thread; once True, result(timeout=0) returns
        at once (result() settles from the same words)."""
        fut = self._future
        if fut is not None and fut.done():
            return True
        outcomes = self._outcomes()
        if outcomes.known(self.id, self._operation) is None:
            return False
        if fut is not None:  # its waiters and callbacks learn it now, not at the next news
            outcomes.settle(self.id)
            # False while the listener, which took the waiter first, is still resolving
            # the future: result(timeout=0) reads the future, and would not find it set
            return bool(fut.done())
        return True

    def running(self) -> bool:
        """True while the timer's task runs in an executor (it can no longer be
        cancelled); False before, between the runs of a repeating timer, and after."""
        gs, _ = self._outcomes().state(self.id)
        return C.gs_gen(gs) == C.handle_gen(self.id) and C.gs_state(gs) in (
            C.ST_FIRING,
            C.ST_STOPPING,
        )

    def cancelled(self) -> bool:
        """True iff a cancel won: the task never ran and never will. Once True, done() is
        True and result(timeout=0) returns "cancelled"."""
        fut = self._future
        if fut is not None and fut.done():
            return fut.exception() is None and fut.result() == "cancelled"
        outcomes = self._outcomes()
        if outcomes.known(self.id, self._operation) != "cancelled":
            return False
        if fut is None:
            return True
        outcomes.settle(self.id)  # as done(): False until the future is set, here or by
        return bool(fut.done())  # the listener (a won cancel resolves it "cancelled")

    def result(self, timeout: float | None = None) -> str:
        """Wait up to `timeout` seconds (None: no limit) for the outcome and return it:
        "ok" / "error" / "crashed" / "cancelled" for a timer, "completed" / "expired" /
        "cancelled" for an operation, "stopped" for either when the service stopped
        first. TimeoutError if it is not decided in time. A repeating timer is decided
        only when it stops (cancelled, or its last run)."""
        return self._settled().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Once decided: a ``TaskError`` if the task raised (the outcome "error"; for an
        operation, its on_complete / on_expire task raised), with the exception's type
        name, message and traceback (docs/api.md says when they are no longer known);
        else None. The ShmwheelError when the outcome cannot be known (the client closed,
        or the slot was used again before anyone asked). TimeoutError as result()."""
        fut = self._settled()
        exc = fut.exception(timeout)
        return exc if exc is not None else fut.task_error

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call fn(handle) once the outcome is decided: on the client's outcome thread, or
        at once in this thread if it is decided already. Added in a thread that runs an
        asyncio event loop, fn is called on that loop instead (soon, if decided already),
        as an asyncio future's callbacks are: so ``asyncio.wait`` takes handles."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        cb = _Callback(fn, self) if loop is None else _LoopCallback(fn, self, loop)
        self._settled().add_done_callback(cb)

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        """Remove every pending fn added with add_done_callback; returns how many."""
        fut = self._future
        if fut is None:
            return 0
        with fut._condition:
            cbs = fut._done_callbacks
            keep = [c for c in cbs if not (isinstance(c, _Callback) and c.fn == fn)]
            removed = len(cbs) - len(keep)
            cbs[:] = keep
        return removed

    def set_running_or_notify_cancel(self) -> bool:
        raise RuntimeError("a handle is decided by the service, not by its caller")

    def set_result(self, result: str) -> None:
        raise RuntimeError("a handle is decided by the service, not by its caller")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a handle is decided by the service, not by its caller")

    def __await__(self) -> Generator[Any, None, str]:
        """``await handle`` gives result(): the event loop is woken by the client's outcome
        thread, never blocked, and nothing polls the service. An awaiting task that is
        cancelled (``asyncio.wait_for`` timing out, ``task.cancel()``) cancels the timer
        if it is still undecided: if that cancel wins the task never runs and cancelled()
        is True; if the task already fired, the handle stays undecided until its real
        outcome. ``asyncio.shield(handle)`` waits without that."""
        loop = asyncio.get_running_loop()
        fut = self._settled()
        waiter: asyncio.Future[str] = loop.create_future()
        relay = _to_loop(loop, waiter)
        fut.add_done_callback(relay)
        try:
            return (yield from waiter)
        except asyncio.CancelledError:
            if not self.done():
                try:
                    self.cancel()
                except ShmwheelError:  # closed or stopping: nothing runs from here on
                    pass
            raise
        finally:
            with fut._condition:
                cbs = fut._done_callbacks  # type: ignore[attr-defined]
                if relay in cbs:
                    cbs.remove(relay)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as (kind, service, instance, id, deadline): unpickled in a process of
        the same user, it is bound to a client of that service there (its client's
        ``_restore_handle``: service/caller/client.py)."""
        client: HandleOwner = self._client
        where = (client.name, int(client._instance))
        return (client._restore_handle, (type(self), *where, self.id, self.deadline_ms))

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
    task will never run. Handles compare equal by id, pickle (``__reduce__``), and are
    ``concurrent.futures.Future`` objects: ``running()``, ``done()``, ``cancelled()``,
    ``result(timeout)``, ``add_done_callback(fn)`` / ``remove_done_callback(fn)``, the
    stdlib's ``wait`` / ``as_completed``, and ``await`` (asyncio.wait, wait_for, gather)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return (
            f"TimerHandle(id={self.id:#x}, slot={C.handle_slot(self.id)}, "
            f"deadline_ms={self.deadline_ms})"
        )


def check_owner(client: ServiceBound, owner: Any, what: str) -> None:
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
        f"{what} was made by {whose}: a handle cancels or resets only in the service "
        f"instance that made it (the same id there is another timer). Nothing was changed: "
        f"use a client of the handle's own service"
    )


class TimerHandles(Sequence[TimerHandle]):
    """The handles of one ``schedule_many`` call as two arrays (ids, deadlines); items are
    TimerHandle objects made on access, so a million handles cost 16 MB, not a million
    objects."""

    def __init__(self, client: HandleOwner, ids: np.ndarray, deadlines: np.ndarray) -> None:
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
