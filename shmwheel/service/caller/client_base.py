"""The Python half of a client that every call builds on: binding the native half, the
lifecycle, the checks, the callbacks the native paths make, and the slot primitives the
Python paths share.

A ``Client`` is one object of two halves. Its native half, ``_native.Producer``
(shmwheel/native/producer.c, producer_slow.c, reset.c, watch.c), runs the common calls
without a lock or a system call, and calls back into the Python half only through the
methods ``_native.pyi`` declares as ``ProducerHooks`` (the list is ``PRODUCER_HOOKS`` in
producer.h; mypy checks that ``Client`` has them, tests/test_client_interface.py that the
lists agree). The Python half is this class and its two capabilities, ``BatchCalls``
(service/caller/batch.py) and ``PurgatoryCalls`` (service/caller/purgatory.py), joined in ``Client``
(service/caller/client.py). None of these modules imports another's privates: they are one class.

``SHMWHEEL_CLIENT_SLOW_PATHS=1`` in the environment at import turns the native fast paths
of ``schedule``, ``reset``, ``watch`` and ``check_and_complete`` off: every call then takes
its Python path (msgpack's PUREPYTHON convention, for testing that both paths agree).
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from typing import Any

import numpy as np
import posix_ipc

from ... import _native as N
from ...errors import Full, ShmwheelError
from ...segment import contract as C
from ...segment import layout as L
from ...segment import payload as P
from . import times as _times
from .handles import TimerHandle, _FutureLike, check_owner
from .outcomes import Outcomes

log = logging.getLogger("shmwheel.client")

FAST_PATHS = os.environ.get("SHMWHEEL_CLIENT_SLOW_PATHS", "") != "1"
_live_clients: weakref.WeakSet[ClientBase] = weakref.WeakSet()


def _mark_forked() -> None:
    """In a forked child every inherited Client refuses use (its ring has one producer)."""
    for client in list(_live_clients):
        client._forked = True


os.register_at_fork(after_in_child=_mark_forked)


def now_ms() -> int:
    """Monotonic milliseconds, the service's clock (the same in every process)."""
    return time.monotonic_ns() // 1_000_000


class ClientBase(N.Producer):
    """The lifecycle, checks and callbacks of a ``Client`` (see the module docstring)."""

    RING_WAIT_S = 2.0  # how long a full ring may block a producer before Full is raised
    FREE_WAIT_S = 0.05  # how long a full wheel waits for cancelled slots to be retired

    def __init__(self, mem: L.ServiceMemory, ring: int, op_type: type[N.Handle]) -> None:
        self._mem = mem
        self.ring = ring
        self._pid = os.getpid()
        _live_clients.add(self)
        cfg = mem.config
        self._max_delay = cfg.geometry().span // 4
        row = L.FIXED_ROWS + cfg.executors + ring
        self._row = mem.counters[row]  # this client's counters (the native side's too)
        self._outcomes: Outcomes | None = None  # made when an outcome is first asked for
        batch = max(1, min(C.CACHE_MAX, cfg.capacity // (4 * cfg.max_clients)))
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
            FAST_PATHS,
        )
        fd, thread_lock, dirty = mem.locked().parts()
        self._bind_ops(mem.bind_tables(), fd, thread_lock, dirty, L.W_REAPER_WAKE_AT, op_type)

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
        except (posix_ipc.Error, ShmwheelError):
            pass  # the service was stopped and unlinked: there is nothing left to release
        finally:
            self._release()
            mem.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and hasattr(self, "_mem"):
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"ring {self.ring}"
        return f"Client(service={self.name!r}, {state}, pid={self._pid})"

    @staticmethod
    def _restore_handle(
        kind: type[_FutureLike], service: str, instance: int, id: int, deadline_ms: int
    ) -> _FutureLike:
        """A handle pickled in another process, made here (HandleOwner, handles.py): the
        Client's, in service/caller/client.py (a module unpickling imports)."""
        raise NotImplementedError

    # -- the callbacks of the native paths (_native.pyi, ProducerHooks) ----------------
    def _check(self) -> None:
        """Raise why this client cannot be used."""
        if self._closed:
            raise ShmwheelError("this client is closed; connect() again")
        if self._forked or os.getpid() != self._pid:
            raise ShmwheelError(
                "a Client cannot be used across fork(); call "
                "shmwheel.connect(name) in the child process"
            )
        if self._mem.header[L.W_STOPPING]:
            raise ShmwheelError(f"service {self.name!r} is stopping")

    def _restock(self) -> None:
        with self._mem.locked():
            self._restock_locked()

    def _bell(self) -> None:
        self._mem.ring_bell("coordinator")

    def _wake_reaper(self) -> None:
        self._mem.ring_bell("reaper")

    def _refuse_foreign(self, handle: N.Handle) -> None:
        """Raise the ValueError for a handle of another service instance (the native
        cancel and reset call this: shmwheel/native/producer.c, handle_id)."""
        check_owner(self, handle._client, repr(handle))
        raise ValueError(f"{handle!r} is not a handle of service {self.name!r}")

    def _wait_room(self) -> None:
        """A full ring before a reset (reset.c): wait for the coordinator to make room, so
        that a reset that wins can always publish its record; Full, with nothing changed,
        if none appears within RING_WAIT_S."""
        ring = self._mem.producer[self.ring]
        give_up = time.monotonic() + self.RING_WAIT_S
        while ring.pending() >= ring.capacity:
            if time.monotonic() >= give_up:
                raise Full(
                    f"producer ring of service {self.name!r} stayed full for "
                    f"{self.RING_WAIT_S} s (is the coordinator running?): the timer was "
                    f"not reset"
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
        give_up = time.monotonic() + self.RING_WAIT_S
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
            f"producer ring of service {self.name!r} stayed full for {self.RING_WAIT_S} s: "
            f"is the coordinator running?"
        )

    # -- what the Python paths share ---------------------------------------------------
    def _check_accepting(self) -> None:
        """_check, and JournalError while the journal cannot keep new timers durable
        (the native schedule and watch paths come here when W_JREFUSE is set)."""
        self._check()
        if self._mem.header[L.W_JREFUSE]:
            from ...journal.write.faults import refusal

            raise refusal(self._mem)

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

    def _task_id(self, task: str) -> int:
        tid = self._mem.task_ids.get(task) if isinstance(task, str) else None
        if tid is None:
            raise ValueError(
                f"unknown task {task!r}; registered tasks: "
                f"{', '.join(self._mem.task_names[:-1])}"  # (less L.NO_TASK)
            )
        return tid

    def _deadline(self, delay_ms: object, deadline_ms: object, at: object = None) -> int:
        """schedule()'s (or reset()'s) deadline, or the API's error before anything is
        taken or changed."""
        return _times.deadline(delay_ms, deadline_ms, self._max_delay, at)

    def _waiting_retirement(self) -> int:
        """Cancelled slots not yet retired by the coordinator or the reaper."""
        c = self._mem.counters
        return int(c[:, C.C_CANCELLED].sum() - c[:, C.C_RETIRED].sum())

    def _take_one(self) -> int:
        """A reserved handle; Full when the wheel has no free slot (after giving cancelled
        slots FREE_WAIT_S to be retired)."""
        h = self._take()
        give_up = time.monotonic() + self.FREE_WAIT_S
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

    def _schedule_blob(self, tid: int, blob: bytes, flags: int, deadline: int, every: int) -> int:
        """Schedule a checked timer (task id, encoded payload and its flags, deadline, period
        or 0) in a slot of its own: its payload inline or in an arena block, its record
        published; returns its handle id. Full, and nothing taken, if there is no room."""
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
        self._publish_one(h, meta, word, deadline)
        return h

    def _publish_one(self, h: int, meta: int, word: int, deadline: int) -> None:
        """Write a reserved slot's record and publish it (waiting for ring room: Full, the
        slot taken back, if none comes), and wake a sleeping coordinator."""
        if not self._submit(h, meta, word, deadline):
            self._wait_push(h, C.CHECK_SUBMIT)
        if self._mem.header[L.W_COORD_SLEEPING]:
            self._bell()

    def _store_blob(self, slot: int, blob: bytes, every: int = 0) -> tuple[int, int, int]:
        """(payload word, arena class, flag bits) for a blob stored in an arena block; a
        repeating timer's block starts with its period and run count. The caller holds
        the segment lock."""
        data = C.repeat_header(every) + blob if every else blob
        tables = self._tables()
        for c in range(P.size_class(len(data)), C.ARENA_CLASSES):  # a larger block if need be
            b = tables.arena_alloc(c, slot)
            if b >= 0:
                break
        else:
            raise self._arena_full(len(data))
        self._mem.arena_block(c, b)[: len(data)] = np.frombuffer(data, np.uint8)
        return b, c, C.FLAG_ARENA | (C.FLAG_REPEAT if every else 0)

    def _arena_full(self, nbytes: int) -> Full:
        """The Full of a payload (or an operation's block) of `nbytes` that no free block
        of the arena fits: what the arena holds, and the remedy."""
        classes = list(zip(self._mem.config.arena_blocks, C.ARENA_CLASS_BYTES, strict=True))
        held = ", ".join(f"{n} of {size} B" for n, size in classes)
        total = sum(n * size for n, size in classes)
        return Full(
            f"the payload arena of service {self.name!r} has no free block for {nbytes} "
            f"bytes (its {total} bytes hold blocks {held}, each payload over "
            f"{C.INLINE_MAX} bytes taking one until its timer ends): start the service "
            f"with a larger TimerService(arena_bytes=...), or use smaller payloads"
        )

    def _own_blocks(self, slots: Any, metas: Any, words: Any) -> None:
        """Name the arena blocks not yet submitted slots were just given in their side
        records (arrays, or one of each; entries without FLAG_ARENA are skipped), under
        the lock that gave them: a crash repair (slots_repair.c, slot_rebuild) treats a
        block its slot's side record does not name as stray, so naming it only at
        submission left a window (bench/chaos.py saw task errors from it)."""
        slots, metas = np.asarray(slots, np.int64), np.asarray(metas, np.int64)
        arena = (C.meta_flags(metas) & C.FLAG_ARENA) != 0
        base = slots[arena] * C.SIDE_WORDS
        self._mem.side[base + C.S_PAYLOAD] = np.asarray(words, np.int64)[arena]
        self._mem.side[base + C.S_META] = metas[arena]
