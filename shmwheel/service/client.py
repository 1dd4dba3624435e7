"""The worker side of the service: ``connect(name)`` gives a ``Client`` that schedules
timers through its own producer ring and cancels them by compare-and-swap.

``Client`` derives from the native ``Producer`` (shmwheel/native/producer.c), which runs
the common ``schedule`` and every ``cancel`` without a lock or a system call. What the
native path does not handle comes here: ``_schedule_slow`` validates every argument and
raises what the API promises, stores large payloads in the arena under the segment lock,
and waits (bounded) for room on a full ring; ``_restock`` refills the native caches of
reserved slots and arena blocks under the lock, a batch at a time.
"""

from __future__ import annotations

import logging
import math
import os
import struct
import time
import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import posix_ipc

from .. import _native as N
from ..errors import Full, ShmwheelError
from ..segment import contract as C
from ..segment import layout as L
from ..segment import payload as P
from . import batch as _batch
from . import operations as _ops
from . import times as _times
from .handles import TimerHandle, TimerHandles, check_owner
from .operations import Operation
from .outcomes import Outcomes
from .stats import read_stats

log = logging.getLogger("shmwheel.client")

RING_WAIT_S = 2.0  # how long a full ring may block a producer before Full is raised
FREE_WAIT_S = 0.05  # how long a full wheel waits for cancelled slots to be retired
_live_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _mark_forked() -> None:
    """In a forked child every inherited Client refuses use (its ring has one producer)."""
    for client in list(_live_clients):
        client._forked = True


os.register_at_fork(after_in_child=_mark_forked)


def now_ms() -> int:
    """Monotonic milliseconds, the service's clock (the same in every process)."""
    return time.monotonic_ns() // 1_000_000


_check_delay = _times.check_delay  # delays, deadlines and periods: service/times.py


def schedule(
    self: Client,
    task: str,
    payload: Any = None,
    *,
    delay_ms: float | None = None,
    deadline_ms: int | None = None,
    key: str | bytes | int | None = None,
    every_ms: float | None = None,
    at: datetime | None = None,
) -> TimerHandle:
    """Client.schedule's signature, checked by Python (Client._schedule_checked): named
    schedule so that the TypeError of a call that does not fit it says schedule()."""
    return self._schedule_slow(task, payload, delay_ms, deadline_ms, key, every_ms, at)


def reset(
    self: Client,
    handle: TimerHandle | int,
    delay_ms: float | None = None,
    *,
    deadline_ms: int | None = None,
    at: datetime | None = None,
) -> bool:
    """Client.reset's signature and every case its native fast path (shmwheel/native/
    reset.c: a number of ms) leaves to Python: the arguments are checked, then the new
    deadline is applied by ``_reset_to``. Named reset so that its TypeError says reset()."""
    self._check_accepting()
    return self._reset_to(handle, self._deadline(delay_ms, deadline_ms, at))


_checked_schedule, _checked_reset = schedule, reset
del schedule, reset


class Client(N.Producer):
    """A connection to a running service: one producer ring, used by one process (its
    threads may share it). Get one with ``shmwheel.connect(name)`` or
    ``TimerService.client()``; close it (or use it as a context manager) when done."""

    def __init__(self, mem: L.ServiceMemory, ring: int) -> None:
        self._mem = mem
        self.ring = ring
        self._pid = os.getpid()
        _live_clients.add(self)
        cfg = mem.config
        self._max_delay = cfg.geometry().span // 4
        row = L.FIXED_ROWS + cfg.executors + ring
        self._row = mem.counters[row]  # this client's counters (the native side's too)
        self._outcomes: Outcomes | None = None  # made when an outcome is first asked for
        batch = max(1, min(256, cfg.capacity // (4 * cfg.max_clients)))
        self._bind(
            mem.wheel,
            mem.side,
            mem.arena,
            mem.arena_words,
            mem.producer[ring].words,
            mem.counters[row],
            mem.header,
            ring,
            L.W_COORD_SLEEPING,
            L.W_STOPPING,
            self._max_delay,
            batch,
            dict(mem.task_ids),
            P.fast_pack,
            TimerHandle,
            int(mem.header[L.W_INSTANCE]),  # handles are bound to it (handles.py)
            L.W_JREFUSE,  # new timers refused while set (_check_accepting)
        )
        fd, thread_lock, dirty = mem.locked().parts()
        self._bind_ops(mem.bind_tables(), fd, thread_lock, dirty, L.W_REAPER_WAKE_AT, Operation)

    # -- lifecycle --------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The service's name."""
        return self._mem.service

    @property
    def closed(self) -> bool:
        return bool(self._closed)

    def close(self) -> None:
        """Release the ring: the coordinator drains what was published, frees the slots
        this client reserved but never submitted, and frees the ring for another client."""
        if self._closed:
            return
        self._closed = True
        mem = self._mem
        if self._outcomes is not None:  # its thread and views go before the segment
            self._outcomes.close()
            self._outcomes = None
        try:
            if os.getpid() == self._pid and not self._forked:
                with mem.locked():
                    mem.ring_table[self.ring, L.RT_STATE] = L.RING_CLOSING
                mem.ring_bell("coordinator")
        except posix_ipc.Error:
            pass  # the service was stopped and unlinked: there is nothing left to release
        finally:
            self._release()
            mem.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and hasattr(self, "_mem"):
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"ring {self.ring}"
        return f"Client(service={self.name!r}, {state}, pid={self._pid})"

    def _check(self) -> None:
        """Raise why this client cannot be used (the native paths call this)."""
        if self._closed:
            raise ShmwheelError("this client is closed; connect() again")
        if self._forked or os.getpid() != self._pid:
            raise ShmwheelError(
                "a Client cannot be used across fork(); call "
                "shmwheel.connect(name) in the child process"
            )
        if self._mem.header[L.W_STOPPING]:
            raise ShmwheelError(f"service {self.name!r} is stopping")

    def _check_accepting(self) -> None:
        """_check, and JournalError while the journal cannot keep new timers durable
        (the native schedule and watch paths come here when W_JREFUSE is set)."""
        self._check()
        if self._mem.header[L.W_JREFUSE]:
            from ..journal.faults import refusal

            raise refusal(self._mem)

    # -- callbacks of the native paths ------------------------------------------------
    def _restock(self) -> None:
        with self._mem.locked():
            self._restock_locked()

    def _bell(self) -> None:
        self._mem.ring_bell("coordinator")

    def _wake_reaper(self) -> None:
        self._mem.ring_bell("reaper")

    def _wait_room(self) -> None:
        """A full ring before a reset (reset.c): wait for the coordinator to make room, so
        that a reset that wins can always publish its record; Full, with nothing changed,
        if none appears within RING_WAIT_S."""
        ring = self._mem.producer[self.ring]
        give_up = time.monotonic() + RING_WAIT_S
        while ring.pending() >= ring.capacity:
            if time.monotonic() >= give_up:
                raise Full(
                    f"producer ring of service {self.name!r} stayed full for {RING_WAIT_S} "
                    f"s (is the coordinator running?): the timer was not reset"
                )
            self._bell()
            time.sleep(0.0002)

    def _wait_push(self, h: int, check: int) -> None:
        """A full ring: publish (h, h ^ check) once the coordinator makes room. If none
        appears within RING_WAIT_S, a schedule (or watch) is taken back (its slot was never
        published) and Full raised; a cancel stays decided, and its slot is retired when
        the reaper meets it instead. A schedule another process decided first by its id or
        keys (a reset, a completion: slot_unsubmit) is published after all, however long
        it takes: someone was told it will run."""
        give_up = time.monotonic() + RING_WAIT_S
        while time.monotonic() < give_up:
            self._bell()
            time.sleep(0.0002)
            if self._push(h, check):
                return
        if check == C.CHECK_CANCEL:
            log.warning(
                "service %s: ring %d stayed full; timer %#x is cancelled and will be "
                "freed when its deadline comes",
                self.name,
                self.ring,
                h,
            )
            return
        if not self._take_back(h):
            log.warning(
                "service %s: ring %d stays full, but timer %#x was reset or completed by "
                "another process before it could be taken back: waiting to publish it",
                self.name,
                self.ring,
                h,
            )
            while not self._push(h, check):
                self._check()  # (a closed client or a stopping service ends the wait)
                self._bell()
                time.sleep(0.001)
            return
        raise Full(
            f"producer ring of service {self.name!r} stayed full for {RING_WAIT_S} s: "
            f"is the coordinator running?"
        )

    def _take_back(self, h: int) -> bool:
        """A written but unpublished slot is freed; True unless another process decided it
        first. A cancel that won it: its own record retires it (True: it is not ours to
        publish). A reset or a completion: False, the caller publishes it (_wait_push)."""
        if self._unsubmit(h):
            with self._mem.locked():
                self._tables().retire(C.handle_slot(h))
            return True
        slot = C.handle_slot(h)
        gs = int(self._mem.nodes()[slot, C.F_GS])
        return C.gs_handle(gs, slot) != h or C.gs_state(gs) == C.ST_CANCELLED

    def _tables(self) -> N.Tables:
        return self._mem.bind_tables()

    def _outcomes_of(self) -> Outcomes:
        """This client's waiters (made on first use: a client that never asks for an
        outcome runs no thread and claims no waiter entry)."""
        if self._outcomes is None:
            if self._closed:  # a stopped service's handles still learn "stopped"
                raise ShmwheelError("this client is closed; connect() again")
            if self._forked or os.getpid() != self._pid:
                self._check()
            self._outcomes = Outcomes(self._mem, self.ring)
        return self._outcomes

    # -- argument checks --------------------------------------------------------------
    def _task_id(self, task: str) -> int:
        tid = self._mem.task_ids.get(task) if isinstance(task, str) else None
        if tid is None:
            raise ValueError(
                f"unknown task {task!r}; registered tasks: {', '.join(self._mem.task_names)}"
            )
        return tid

    def _deadline(
        self, delay_ms: float | None, deadline_ms: int | None, at: datetime | None = None
    ) -> int:
        """schedule()'s (or reset()'s) deadline, or the API's error before anything is
        taken or changed."""
        return _times.deadline(delay_ms, deadline_ms, self._max_delay, at)

    def _refuse_foreign(self, handle: N.Handle) -> None:
        """Raise the ValueError for a handle of another service instance (the native
        cancel calls this: shmwheel/native/producer.c, handle_id)."""
        check_owner(self, handle._client, repr(handle))
        raise ValueError(f"{handle!r} is not a handle of service {self.name!r}")

    # -- slots ------------------------------------------------------------------------
    def _waiting_retirement(self) -> int:
        """Cancelled slots not yet retired by the coordinator or the reaper."""
        c = self._mem.counters
        return int(c[:, C.C_CANCELLED].sum() - c[:, C.C_RETIRED].sum())

    def _take_one(self) -> int:
        """A reserved handle; Full when the wheel has no free slot (after giving cancelled
        slots FREE_WAIT_S to be retired)."""
        h = self._take()
        give_up = time.monotonic() + FREE_WAIT_S
        while h < 0 and self._waiting_retirement() > 0 and time.monotonic() < give_up:
            self._bell()
            time.sleep(0.001)
            h = self._take()
        if h < 0:
            raise Full(
                f"service {self.name!r} is full ({self._mem.config.capacity} timers): "
                f"cancel some, or start it with a larger capacity"
            )
        return h

    def _store_blob(self, slot: int, blob: bytes, every: int = 0) -> tuple[int, int, int]:
        """(payload word, arena class, flag bits) for a blob stored in an arena block; a
        repeating timer's block starts with its period and run count. The caller holds
        the segment lock."""
        data = struct.pack("<qq", every, 1) + blob if every else blob
        tables = self._tables()
        for c in range(P.size_class(len(data)), C.ARENA_CLASSES):  # a larger block if need be
            b = tables.arena_alloc(c, slot)
            if b >= 0:
                break
        else:
            raise Full(
                f"the payload arena has no free block for {len(data)} bytes: use "
                f"smaller payloads or start the service with a larger arena_bytes"
            )
        self._mem.arena_block(c, b)[: len(data)] = np.frombuffer(data, np.uint8)
        return b, c, C.FLAG_ARENA | (C.FLAG_REPEAT if every else 0)

    def _own_blocks(self, slots: Any, metas: Any, words: Any) -> None:
        """Name the arena blocks not yet submitted slots were just given in their side
        records (arrays, or one of each; entries without FLAG_ARENA are skipped), under
        the lock that gave them: a crash repair (slots.c, slot_rebuild) treats a block its
        slot's side record does not name as stray, so naming it only at submission left
        a window (bench/chaos.py saw task errors from it)."""
        slots, metas = np.asarray(slots, np.int64), np.asarray(metas, np.int64)
        arena = (C.meta_flags(metas) & C.FLAG_ARENA) != 0
        base = slots[arena] * C.SIDE_WORDS
        self._mem.side[base + C.S_PAYLOAD] = np.asarray(words, np.int64)[arena]
        self._mem.side[base + C.S_META] = metas[arena]

    # -- the API (schedule and cancel are the native Producer's) ------------------------
    # schedule() with argument shapes the native path does not take: Python checks the
    # signature, and a wrong call's TypeError names schedule(), the method the caller called
    _schedule_checked = _checked_schedule
    _reset_slow = _checked_reset

    def _schedule_slow(
        self,
        task: str,
        payload: Any,
        delay_ms: float | None,
        deadline_ms: int | None,
        key: Any,
        every_ms: float | None,
        at: datetime | None = None,
    ) -> TimerHandle:
        self._check_accepting()
        tid = self._task_id(task)
        deadline = self._deadline(delay_ms, deadline_ms, at)
        every = 0
        if every_ms is not None:
            every = math.ceil(_check_delay(every_ms, "every_ms", self._max_delay))
            if every == 0:
                raise ValueError("every_ms must be > 0")
        blob, flags = P.encode(payload, key)
        if every and len(blob) + C.REPEAT_HEADER > C.MAX_PAYLOAD:
            raise ValueError(
                f"a repeating timer's payload may encode to at most "
                f"{C.MAX_PAYLOAD - C.REPEAT_HEADER} bytes, got {len(blob)}"
            )
        h = self._take_one()
        slot = C.handle_slot(h)
        if not every and len(blob) <= C.INLINE_MAX:
            word = C.inline_word(blob)
            meta = C.meta_make(tid, flags, 0, len(blob), self.ring)
        else:
            try:
                with self._mem.locked():
                    word, cls, more = self._store_blob(slot, blob, every)
                    meta = C.meta_make(tid, flags | more, cls, len(blob), self.ring)
                    self._own_blocks(slot, meta, word)
            except Full:
                if not self._give_back(h):  # the cache is full (other threads): free it
                    with self._mem.locked():
                        self._tables().retire(slot)
                raise
        if not self._submit(h, meta, word, deadline):
            self._wait_push(h, C.CHECK_SUBMIT)
        if self._mem.header[L.W_COORD_SLEEPING]:
            self._bell()
        return TimerHandle(self, h, deadline)

    def schedule_many(
        self,
        task: str,
        delays_ms: Sequence[float] | np.ndarray,
        payloads: Sequence[Any] | None = None,
    ) -> TimerHandles:
        """Schedule one timer per delay, all or none (Full if they do not all fit).
        Returns a ``TimerHandles`` sequence (ids and deadlines as arrays)."""
        return _batch.schedule_many(self, task, delays_ms, payloads)

    def cancel_many(
        self, handles: TimerHandles | Sequence[int | TimerHandle | Operation] | np.ndarray
    ) -> np.ndarray:
        """Cancel a batch (no lock); a bool array, True where that timer will never run.
        Handles of another service (instance) are refused whole with ValueError."""
        return _batch.cancel_many(self, handles)

    # watch() and check_and_complete() are native (shmwheel/native/watch.c, their
    # docstrings there); what their common case does not cover comes here, as given
    def _watch_slow(
        self,
        keys: Sequence[str | bytes | int],
        timeout_ms: float,
        *,
        on_complete: str | None = None,
        on_expire: str | None = None,
        payload: Any = None,
        required: int = 1,
    ) -> Operation:
        return _ops.watch(self, keys, timeout_ms, on_complete, on_expire, payload, required)

    def _check_and_complete_slow(self, key: str | bytes | int, amount: int = 1) -> int:
        return _ops.check_and_complete(self, key, amount)

    def handle(self, id: int) -> TimerHandle:
        """The TimerHandle of a timer's id, made in any process of the service (its
        deadline is read from the slot, -1 if the timer has ended)."""
        return TimerHandle(self, *self._id_and_deadline(id))

    def operation(self, id: int) -> Operation:
        """The Operation of an operation's id, made in any process (see ``handle``)."""
        return Operation(self, *self._id_and_deadline(id))

    def _id_and_deadline(self, id: int) -> tuple[int, int]:
        self._check()
        if isinstance(id, bool) or not isinstance(id, (int, np.integer)):
            raise TypeError(f"an id is an int, got {type(id).__name__}")
        h = int(id)
        if h < 0 or C.handle_slot(h) >= self._mem.config.capacity or h >> 63:
            raise ValueError(f"{h:#x} is not an id of service {self.name!r}")
        gs, _ = self._outcomes_of().state(h)
        node = self._mem.nodes()[C.handle_slot(h)]
        deadline = int(node[C.F_DEADLINE]) if C.gs_gen(gs) == C.handle_gen(h) else -1
        return h, deadline

    def stats(self) -> dict[str, Any]:
        """The service's stats() as this process sees them in shared memory (no restart
        counts: only the supervisor knows those). ShmwheelError once the client is closed
        or the service is stopping or stopped (docs/quickstart.md, "Errors at the call")."""
        self._check()
        return read_stats(self._mem)
