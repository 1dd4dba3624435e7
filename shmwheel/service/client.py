"""The worker side of the service: ``connect(name)`` gives a ``Client`` that schedules
timers through its own producer ring and cancels them directly in the shared wheel.

A client owns a cache of RESERVED slots (taken from the wheel's free stack under the
segment lock, in batches), so ``schedule`` knows its handle at once: it writes the
slot's side record and deadline, marks it SUBMITTED, and publishes (handle, check) on
its ring; the coordinator links it. ``cancel`` takes the segment lock and decides then
and there (see ``service_kernels.cancel_handles``): no round trip through a queue.
"""

from __future__ import annotations

import math
import os
import struct
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import posix_ipc

from ..segment import payload as P
from ..segment import ring as RG
from ..segment import slots as SK
from ..segment import layout as L
from ..wheel import kernels as K
from ..errors import Full, ShmwheelError
from ..segment.layout import INLINE_MAX
from .stats import read_stats

RING_WAIT_S = 2.0  # how long a full ring may block a producer before Full is raised
URGENT_MS = 20  # a deadline nearer than this wakes a sleeping coordinator at once; later
#                 ones are linked within its idle wait (5 ms), sparing a wake-up per call
_GEN_BITS = ~np.int64(0xFFFFFFFF)
_CHECK = int(SK.CHECK_KEY)
_NIL = P.NIL_INLINE
_SUBMITTED = SK.SUBMITTED
_W_SLEEPING = L.W_COORD_SLEEPING
_W_STOPPING = L.W_STOPPING
_live_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _mark_forked() -> None:
    """In a forked child every inherited Client refuses use (its ring has one producer)."""
    for client in list(_live_clients):
        client._forked = True


os.register_at_fork(after_in_child=_mark_forked)
# the per-call path below inlines these layouts
assert SK.SIDE_WORDS == 2 and K.NODE_WORDS == 4 and K.F_DEADLINE == 2 and K.F_GS == 3
assert (RG.HEAD, RG.TAIL, RG.HEADER, L.PRODUCER_RECORD) == (0, 8, 16, 2)


def now_ms() -> int:
    """Monotonic milliseconds, the service's clock (the same in every process)."""
    return time.monotonic_ns() // 1_000_000


class TimerHandle:
    """A scheduled timer: ``id`` is unique while the service lives; ``cancel()`` is True
    iff the task will never run."""

    __slots__ = ("_client", "deadline_ms", "id")

    def __init__(self, client: Client, id: int, deadline_ms: int) -> None:
        self._client = client
        self.id = id
        self.deadline_ms = deadline_ms

    def cancel(self) -> bool:
        return self._client.cancel(self)

    def __repr__(self) -> str:
        return f"TimerHandle(id={self.id:#x}, deadline_ms={self.deadline_ms})"


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
        for h, d in zip(self.ids.tolist(), self.deadlines_ms.tolist()):
            yield TimerHandle(self._client, h, d)

    def cancel(self) -> np.ndarray:
        """Cancel all; a bool array, True where that timer will never run."""
        return self._client.cancel_many(self.ids)


def _check_delay(value: object, what: str, limit: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of milliseconds, got {type(value).__name__}")
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{what} must be finite, got {value!r}")
    if v < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    if v >= limit:
        raise ValueError(f"{what}={value!r} is beyond the wheel's range ({limit} ms); "
                         f"use a shorter delay or a larger tick_ms/wheel_size")
    return v


class Client:
    """A connection to a running service: one producer ring, used by one process."""

    def __init__(self, mem: L.ServiceMemory, ring: int) -> None:
        self._mem = mem
        self._ring = ring
        self._producer = mem.producer[ring]
        self._pid = os.getpid()
        self._forked = False  # set in a forked child (os.register_at_fork below)
        _live_clients.add(self)
        self._lock = threading.Lock()
        self._closed = False
        cfg = mem.config
        self._max_delay = cfg.geometry().span // 4
        self._batch = max(1, min(256, cfg.capacity // (4 * cfg.max_clients)))
        self._cache: list[int] = []  # RESERVED handles of this client's ring
        row = L.FIXED_ROWS + cfg.executors + ring
        self._counters = mem.counters.reshape(-1).data
        self._scheduled_at = row * L.COUNTER_WORDS + L.C_SCHEDULED
        self._scheduled = int(mem.counters[row, L.C_SCHEDULED])
        self._task_ids = mem.task_ids
        self._owner_bits = ring << SK.OWNER_SHIFT
        # the side record's meta word of a None payload, per task id
        self._nil_meta = [t | 1 << 32 | self._owner_bits for t in range(len(mem.task_names))]
        self._ring_mv = self._producer.words.data
        self._ring_cap = self._producer.capacity
        self._ring_mask = self._producer.mask
        self._side = mem.side.data
        self._wheel = mem.wheel.data
        self._header = mem.header.data
        self._nodes = mem.nodes_off

    # -- lifecycle --------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._mem.service

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the ring: the coordinator drains what was published, frees the slots
        this client reserved but never submitted, and frees the ring for another client."""
        if self._closed:
            return
        self._closed = True
        mem = self._mem
        try:
            if os.getpid() == self._pid:
                with mem.locked():
                    mem.ring_table[self._ring, L.RT_STATE] = L.RING_CLOSING
                mem.ring_bell("coordinator")
        except posix_ipc.Error:
            pass  # the service was stopped and unlinked: there is nothing left to release
        finally:
            mem.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:
                pass

    def _check(self) -> None:
        if self._closed:
            raise ShmwheelError("this client is closed; connect() again")
        if self._forked or os.getpid() != self._pid:
            raise ShmwheelError("a Client cannot be used across fork(); call "
                                "shmwheel.connect(name) in the child process")
        if self._header[L.W_STOPPING]:
            raise ShmwheelError(f"service {self.name!r} is stopping")

    # -- argument checks --------------------------------------------------------------
    def _task_id(self, task: str) -> int:
        tid = self._mem.task_ids.get(task) if isinstance(task, str) else None
        if tid is None:
            raise ValueError(f"unknown task {task!r}; registered tasks: "
                             f"{', '.join(self._mem.task_names)}")
        return tid

    def _deadline(self, delay_ms: float | None, deadline_ms: int | None) -> int:
        if (delay_ms is None) == (deadline_ms is None):
            raise TypeError("pass exactly one of delay_ms= or deadline_ms=")
        now_ns = time.monotonic_ns()
        if delay_ms is not None:
            d = _check_delay(delay_ms, "delay_ms", self._max_delay)
            return -(-(now_ns + math.ceil(d * 1e6)) // 1_000_000)
        if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, (int, np.integer)):
            raise TypeError(f"deadline_ms must be an int (monotonic ms), got "
                            f"{type(deadline_ms).__name__}")
        if deadline_ms - now_ns // 1_000_000 >= self._max_delay:
            raise ValueError(f"deadline_ms={deadline_ms} is beyond the wheel's range "
                             f"({self._max_delay} ms from now)")
        return int(deadline_ms)

    # -- slots ------------------------------------------------------------------------
    def _take(self, n: int) -> np.ndarray:
        """n reserved handles: from the cache first, the rest reserved under the lock (with
        a batch more for the cache); Full if the wheel has fewer free slots (then the
        cache keeps what it got)."""
        cache = self._cache
        if len(cache) >= n:
            out = np.array(cache[len(cache) - n:], np.int64)
            del cache[len(cache) - n:]
            return out
        got = np.empty(n - len(cache) + self._batch, np.int64)
        mem = self._mem
        with mem.locked():
            k = SK.reserve(mem.wheel, mem.side, self._ring, got)
        if len(cache) + k < n:
            cache.extend(got[:k].tolist())
            raise Full(f"service {self.name!r} is full ({self._mem.config.capacity} "
                       f"timers): cancel some, or start it with a larger capacity")
        use = n - len(cache)
        out = np.concatenate([np.array(cache, np.int64), got[:use]])
        cache[:] = got[use:k].tolist()
        return out

    def _give_back(self, handles: np.ndarray) -> None:
        self._cache.extend(handles.tolist())

    def _store_blob(self, slot: int, blob: bytes, every: int = 0) -> tuple[int, int, int]:
        """(payload word, arena class, flag bits) for a blob stored in an arena block; a
        repeating timer's block starts with its period and run count. The caller holds
        the segment lock."""
        data = struct.pack("<qq", every, 1) + blob if every else blob
        mem = self._mem
        for c in range(P.size_class(len(data)), SK.NCLASSES):  # a larger block if need be
            b = SK.arena_alloc(mem.arena, c, slot)
            if b >= 0:
                break
        else:
            raise Full(f"the payload arena has no free block for {len(data)} bytes: use "
                       f"smaller payloads or start the service with a larger arena_bytes")
        mem.arena_block(c, b)[: len(data)] = np.frombuffer(data, np.uint8)
        return b, c, SK.FLAG_ARENA | (SK.FLAG_REPEAT if every else 0)

    def _publish(self, recs: np.ndarray) -> int:
        """Push records, waiting up to RING_WAIT_S for the coordinator whenever the ring is
        full; returns how many were published (fewer only when that wait ran out)."""
        ring, mem = self._producer, self._mem
        done = 0
        give_up = time.monotonic() + RING_WAIT_S
        while True:
            k = ring.push_records(recs[done:])
            done += k
            if done == len(recs):
                break
            mem.ring_bell("coordinator")
            if k:
                give_up = time.monotonic() + RING_WAIT_S
            elif time.monotonic() > give_up:
                break
            time.sleep(0.0002)
        if self._header[L.W_COORD_SLEEPING]:
            mem.ring_bell("coordinator")
        return done

    def _unsubmit(self, handles: np.ndarray) -> None:
        """Take back reserved-and-written slots that were never published."""
        slots = handles & 0xFFFFFFFF
        nodes = self._wheel
        for h, slot in zip(handles.tolist(), slots.tolist()):
            nodes[self._nodes + slot * K.NODE_WORDS + K.F_GS] = (h >> 32) << 32 | SK.RESERVED
        mem = self._mem
        with mem.locked():
            for slot in slots.tolist():
                SK.free_payload(mem.side, mem.arena, slot)
        self._give_back(handles)

    # -- the API ----------------------------------------------------------------------
    def schedule(self, task: str, payload: Any = None, *, delay_ms: float | None = None,
                 deadline_ms: int | None = None, key: str | bytes | int | None = None,
                 every_ms: float | None = None) -> TimerHandle:
        """Run ``task(payload)`` in an executor at or after the deadline (monotonic ms);
        with ``every_ms`` again every period until cancelled."""
        if self._closed or self._forked or self._header[_W_STOPPING]:
            self._check()
        tid = self._task_ids.get(task) if task.__class__ is str else None
        if tid is None:
            tid = self._task_id(task)
        now_ns = time.monotonic_ns()
        if delay_ms.__class__ in (int, float) and deadline_ms is None and \
                0 <= delay_ms < self._max_delay:  # type: ignore[operator]  # NaN fails both
            deadline = -(-(now_ns + math.ceil(delay_ms * 1e6)) // 1_000_000)  # type: ignore[operator]
        else:
            deadline = self._deadline(delay_ms, deadline_ms)
        every = 0
        if every_ms is not None:
            every = math.ceil(_check_delay(every_ms, "every_ms", self._max_delay))
            if every == 0:
                raise ValueError("every_ms must be > 0")
        if payload is None and key is None:
            blob, flags = b"\xc0", 0
        else:
            blob, flags = P.encode(payload, key)
        inline = not every and len(blob) <= INLINE_MAX
        if every and len(blob) + SK.REPEAT_HEADER > L.MAX_PAYLOAD:
            raise ValueError(f"a repeating timer's payload may encode to at most "
                             f"{L.MAX_PAYLOAD - SK.REPEAT_HEADER} bytes, got {len(blob)}")
        with self._lock:
            h = self._cache.pop() if self._cache else int(self._take(1)[0])
            slot = h & 0xFFFFFFFF
            if inline:
                word, c, more = (_NIL if blob == b"\xc0" else P.inline_word(blob)), 0, 0
            else:
                try:
                    with self._mem.locked():
                        word, c, more = self._store_blob(slot, blob, every)
                except Full:
                    self._give_back(np.array([h], np.int64))
                    raise
            side, wheel, i = self._side, self._wheel, slot << 1  # SIDE_WORDS == 2
            side[i] = tid | (flags | more) << 16 | c << 24 | len(blob) << 32 | self._owner_bits \
                if more or flags or word != _NIL else self._nil_meta[tid]
            side[i + 1] = word
            n = self._nodes + (slot << 2)  # NODE_WORDS == 4
            wheel[n + 2] = deadline  # F_DEADLINE
            wheel[n + 3] = (h >> 32) << 32 | _SUBMITTED  # F_GS
            # publish on the ring: record first, head last (see ring.py)
            ring = self._ring_mv
            head = ring[0]
            if head - ring[8] < self._ring_cap:
                r = 16 + ((head & self._ring_mask) << 1)
                ring[r] = h
                ring[r + 1] = h ^ _CHECK
                ring[0] = head + 1
            else:
                self._wait_for_room(h)
            self._scheduled += 1
            self._counters[self._scheduled_at] = self._scheduled
            if self._header[_W_SLEEPING] and (
                    deadline - now_ns // 1_000_000 < URGENT_MS
                    or head - ring[8] > self._ring_cap >> 2):
                self._mem.ring_bell("coordinator")
        return TimerHandle(self, h, deadline)

    def _wait_for_room(self, h: int) -> None:
        """The ring was full: publish h once the coordinator makes room; if none appears
        within RING_WAIT_S, take the slot back (it was never published) and raise Full."""
        if self._publish(np.array([[h, h ^ _CHECK]], np.int64)) == 0:
            self._unsubmit(np.array([h], np.int64))
            raise Full(f"producer ring of service {self.name!r} stayed full for "
                       f"{RING_WAIT_S} s: is the coordinator running?")

    def schedule_many(self, task: str, delays_ms: Sequence[float] | np.ndarray,
                      payloads: Sequence[Any] | None = None) -> TimerHandles:
        """Schedule one timer per delay, all or none (Full if they do not all fit).
        Returns a ``TimerHandles`` sequence (ids and deadlines as arrays)."""
        self._check()
        tid = self._task_id(task)
        try:
            d = np.asarray(delays_ms, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(f"delays_ms must be a sequence of numbers: {e}") from None
        if d.ndim != 1:
            raise ValueError("delays_ms must be one-dimensional")
        if not np.isfinite(d).all():
            raise ValueError("delays_ms must all be finite (no NaN or infinity)")
        if len(d) and (d.min() < 0 or d.max() >= self._max_delay):
            raise ValueError(f"delays_ms must lie in [0, {self._max_delay}) ms")
        n = len(d)
        if payloads is not None and len(payloads) != n:
            raise ValueError(f"{len(payloads)} payloads for {n} delays")
        blobs = [P.encode(p) for p in payloads] if payloads is not None else None
        deadlines = -(-(time.monotonic_ns() + np.ceil(d * 1e6).astype(np.int64)) // 1_000_000)
        if n == 0:
            return TimerHandles(self, np.empty(0, np.int64), deadlines)
        with self._lock:
            handles = self._take(n).copy()
            slots = handles & 0xFFFFFFFF
            meta = np.empty(n, np.int64)
            words = np.empty(n, np.int64)
            if blobs is None:
                meta[:] = tid | 1 << 32 | self._owner_bits
                words[:] = P.NIL_INLINE
            else:
                try:
                    self._store_blobs(slots, blobs, tid, meta, words)
                except Full:
                    self._give_back(handles)
                    raise
            side = self._mem.side.reshape(-1, SK.SIDE_WORDS)
            side[slots, SK.S_META] = meta
            side[slots, SK.S_PAYLOAD] = words
            nodes = self._mem.wheel[self._nodes : self._nodes + self._mem.config.capacity
                                    * K.NODE_WORDS].reshape(-1, K.NODE_WORDS)
            nodes[slots, K.F_DEADLINE] = deadlines
            nodes[slots, K.F_GS] = (handles & _GEN_BITS) | SK.SUBMITTED
            recs = np.empty((n, 2), np.int64)
            recs[:, 0] = handles
            recs[:, 1] = handles ^ SK.CHECK_KEY
            done = self._publish(recs)
            self._scheduled += done
            self._counters[self._scheduled_at] = self._scheduled
            if done < n:
                self._unsubmit(handles[done:])
                err = Full(f"producer ring of service {self.name!r} stayed full for "
                           f"{RING_WAIT_S} s (is the coordinator running?): {done} of {n} "
                           f"timers were accepted (their handles are in .accepted), the "
                           f"rest were not")
                err.accepted = TimerHandles(self, handles[:done], deadlines[:done])
                raise err
        return TimerHandles(self, handles, deadlines)

    def _store_blobs(self, slots: np.ndarray, blobs: list[tuple[bytes, int]], tid: int,
                     meta: np.ndarray, words: np.ndarray) -> None:
        """Side-record words for encoded payloads, arena blocks taken under one lock; if a
        class runs out, the blocks already taken are returned before Full propagates."""
        mem, side, done = self._mem, self._side, 0
        with mem.locked():
            try:
                for j, (blob, flags) in enumerate(blobs):
                    slot = int(slots[j])
                    if len(blob) <= INLINE_MAX:
                        word, c, more = P.inline_word(blob), 0, 0
                    else:
                        word, c, more = self._store_blob(slot, blob)
                    meta[j] = tid | (flags | more) << 16 | c << 24 | len(blob) << 32 \
                        | self._owner_bits
                    words[j] = word
                    side[slot * SK.SIDE_WORDS] = int(meta[j])
                    side[slot * SK.SIDE_WORDS + 1] = word
                    done = j + 1
            except Full:
                for j in range(done):
                    SK.free_payload(mem.side, mem.arena, int(slots[j]))
                raise

    def cancel(self, handle: TimerHandle | int) -> bool:
        """True iff the timer will never run; its slot is free when this returns. For a
        repeating timer with a run in flight, False, and it will not run again."""
        self._check()
        h = handle.id if isinstance(handle, TimerHandle) else handle
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)):
            raise TypeError(f"cancel() takes a TimerHandle or its id, got {type(handle).__name__}")
        mem = self._mem
        with mem.locked():
            code = SK.cancel_one(mem.wheel, mem.side, mem.arena, h)
            if code == SK.CANCEL_YES:
                mem.counters[L.ROW_LOCKED, L.C_CANCELLED] += 1
        return code == SK.CANCEL_YES

    def _warm_up(self) -> None:
        """Load the compiled kernels a client calls (10-300 ms the first time in a process),
        so that no deadline computed by a first call is already past when it lands."""
        mem, none = self._mem, np.empty(0, np.int64)
        SK.reserve(mem.wheel, mem.side, self._ring, none)
        SK.cancel_handles(mem.wheel, mem.side, mem.arena, none, none)
        SK.cancel_one(mem.wheel, mem.side, mem.arena, -1)

    def stats(self) -> dict[str, Any]:
        """The service's stats() as this process sees them in shared memory (no restart
        counts: only the supervisor knows those)."""
        return read_stats(self._mem)

    def cancel_many(self, handles: TimerHandles | Sequence[int] | np.ndarray) -> np.ndarray:
        """Cancel a batch under one lock; a bool array, True where that timer will never run."""
        self._check()
        ids = handles.ids if isinstance(handles, TimerHandles) else np.asarray(handles, np.int64)
        out = np.zeros(len(ids), np.int64)
        mem = self._mem
        with mem.locked():
            n = SK.cancel_handles(mem.wheel, mem.side, mem.arena,
                                  np.ascontiguousarray(ids, np.int64), out)
            mem.counters[L.ROW_LOCKED, L.C_CANCELLED] += n
        return out == SK.CANCEL_YES


def connect(name: str) -> Client:
    """Attach to the running service `name` (same user) and claim a producer ring."""
    L.check_architecture()
    mem = L.ServiceMemory.attach(name)
    try:
        if mem.header[L.W_STOPPING]:
            raise ShmwheelError(f"service {name!r} is stopping")
        mem.semaphore("coordinator")  # opened now, so close() can ring it after a stop
        pid = os.getpid()
        with mem.locked():
            free = np.flatnonzero(mem.ring_table[:, L.RT_STATE] == L.RING_FREE)
            if len(free) == 0:
                raise ShmwheelError(f"all {mem.config.max_clients} client rings of service "
                                    f"{name!r} are in use: close clients or raise max_clients")
            ring = int(free[0])
            mem.ring_table[ring, L.RT_PID] = pid
            mem.ring_table[ring, L.RT_STATE] = L.RING_CLAIMED
        client = Client(mem, ring)
        client._warm_up()
        return client
    except BaseException:
        mem.close()
        raise
