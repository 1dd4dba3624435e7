"""Batches of timers: ``Client.schedule_many`` and ``Client.cancel_many``. All or none:
slots are reserved under one lock, written natively in one call, published with bounded
waits for ring room. Every argument is checked before a slot is reserved; handles of
another service instance are refused before anything is cancelled (handles.py).
``BatchCalls`` is a part of ``Client`` (service/caller/client.py joins it with the others)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _native as N
from ...errors import Full
from ...segment import contract as C
from ...segment import layout as L
from ...segment import payload as P
from . import times as T
from .client_base import ClientBase
from .handles import TimerHandle, TimerHandles, check_owner

if TYPE_CHECKING:  # pragma: no cover
    from .purgatory import Operation


class BatchCalls(ClientBase):
    """The batch calls of a ``Client``."""

    def schedule_many(
        self,
        task: str,
        delays_ms: Sequence[float] | np.ndarray,
        payloads: Sequence[Any] | None = None,
    ) -> TimerHandles:
        """Schedule one timer per delay, all or none (Full if they do not all fit).
        Returns a ``TimerHandles`` sequence (ids and deadlines as arrays)."""
        self._check_accepting()
        tid = self._task_id(task)
        d = T.check_delays(delays_ms, self._max_delay)
        n = len(d)
        if payloads is not None and len(payloads) != n:
            raise ValueError(f"{len(payloads)} payloads for {n} delays")
        blobs = [P.encode(p) for p in payloads] if payloads is not None else None
        deadlines = T.due_ms_many(time.monotonic_ns(), d)
        if n == 0:
            return TimerHandles(self, np.empty(0, np.int64), deadlines)
        handles = self._reserve_many(n)
        metas = np.full(n, C.meta_make(tid, 0, 0, 1, self.ring), np.int64)
        words = np.full(n, C.NIL_INLINE, np.int64)
        if blobs is not None:
            try:
                self._store_blobs(handles, blobs, tid, metas, words)
            except Full:
                self._release_reserved(handles)
                raise
        self._write_many(handles, metas, words, deadlines)
        done = self._publish_waiting(handles)
        if done < n:
            for h in handles[done:].tolist():
                # (these ids were never returned: only a bare id can have reset one
                # meanwhile; such a timer is left to the client's reclaim, and its reset
                # was a guess)
                self._take_back(h)
            err = Full(
                f"producer ring of service {self.name!r} stayed full for "
                f"{self.RING_WAIT_S} s (is the coordinator running?): {done} of {n} timers "
                f"were accepted (their handles are in .accepted), the rest were not"
            )
            err.accepted = TimerHandles(self, handles[:done], deadlines[:done])
            raise err
        return TimerHandles(self, handles, deadlines)

    def cancel_many(
        self, handles: TimerHandles | Sequence[int | TimerHandle | Operation] | np.ndarray
    ) -> np.ndarray:
        """Cancel a batch (no lock); a bool array, True where that timer will never run.
        Handles of another service (instance) are refused whole with ValueError."""
        ids = np.ascontiguousarray(self._ids_of(handles), np.int64)
        out = np.zeros(len(ids), np.int64)
        self._cancel_many(ids, out)
        won: np.ndarray = out == C.CANCEL_WON
        return won

    # -- its parts ------------------------------------------------------------------------
    def _reserve_many(self, n: int) -> np.ndarray:
        """n RESERVED handles, all or none: Full if the wheel has fewer free slots."""
        out = np.empty(n, np.int64)
        got = 0
        give_up = time.monotonic() + self.FREE_WAIT_S
        while True:
            with self._mem.locked():
                got += self._tables().reserve(self.ring, out[got:])
            if got == n or self._waiting_retirement() == 0 or time.monotonic() > give_up:
                break
            self._bell()
            time.sleep(0.001)
        if got < n:
            self._release_reserved(out[:got])
            raise Full(
                f"service {self.name!r} has room for {got} more timers, not {n}: "
                f"cancel some, or start it with a larger capacity"
            )
        return out

    def _release_reserved(self, handles: np.ndarray) -> None:
        """Free RESERVED slots of a batch that will not be submitted."""
        with self._mem.locked():
            tables = self._tables()
            for h in handles.tolist():
                tables.retire(C.handle_slot(h))

    def _publish_waiting(self, handles: np.ndarray) -> int:
        """Publish a batch, waiting up to RING_WAIT_S (from the last progress) whenever the
        ring is full; returns how many were published."""
        done, n = 0, len(handles)
        give_up = time.monotonic() + self.RING_WAIT_S
        while True:
            k = self._publish(handles[done:], C.CHECK_SUBMIT)
            done += k
            if done == n:
                break
            self._bell()
            if k:
                give_up = time.monotonic() + self.RING_WAIT_S
            elif time.monotonic() > give_up:
                break
            time.sleep(0.0002)
        if self._mem.header[L.W_COORD_SLEEPING]:
            self._bell()
        return done

    def _store_blobs(
        self,
        handles: np.ndarray,
        blobs: list[tuple[bytes, int]],
        tid: int,
        metas: np.ndarray,
        words: np.ndarray,
    ) -> None:
        """Side-record words for encoded payloads, arena blocks taken under one lock. Before
        the lock goes, every block taken is named in its slot's side record
        (``_own_blocks``), so a crash repair before the batch is submitted keeps it, and if
        a class runs out, releasing the slots returns the blocks taken so far."""
        slots = C.handle_slot(handles)
        done = 0
        with self._mem.locked():
            try:
                for j, (blob, flags) in enumerate(blobs):
                    if len(blob) <= C.INLINE_MAX:
                        word, cls, more = C.inline_word(blob), 0, 0
                    else:
                        word, cls, more = self._store_blob(int(slots[j]), blob)
                    metas[j] = C.meta_make(tid, flags | more, cls, len(blob), self.ring)
                    words[j] = word
                    done = j + 1
            finally:
                self._own_blocks(slots[:done], metas[:done], words[:done])

    def _ids_of(self, handles: TimerHandles | Sequence[Any] | np.ndarray) -> np.ndarray:
        """The ids of a batch: a TimerHandles' array, an array or sequence of ids as given,
        or a sequence with handles among them; every handle checked to be of this client's
        service instance (ValueError before anything is cancelled)."""
        if isinstance(handles, TimerHandles):
            check_owner(self, handles._client, repr(handles))
            return handles.ids
        try:
            return np.asarray(handles, np.int64)  # ids (the common case: no handle objects)
        except TypeError:
            pass
        ids = []
        for h in handles:
            if isinstance(h, N.Handle):
                check_owner(self, h._client, repr(h))
                h = h.id
            ids.append(h)
        return np.asarray(ids, np.int64)
