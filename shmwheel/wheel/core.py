"""The wheel core: one timing-wheel algorithm (the native core's, ``shmwheel/native/wheel.c``,
whose header comment is the theory of operation) over one int64 array.

``WheelCore`` owns or attaches that array: ``wheel_layout`` fixes where each table lives,
the header records it (magic, layout version, sizes), and every operation is one call of
the native core with that array as its first argument.  In process the array is ordinary
numpy memory that can grow; in the shared-memory service it is a view of a segment, fixed
in size.  Times are integers in whatever unit the caller chose (milliseconds for the Kafka
layer).  Every word index, state and code comes from ``shmwheel/native/contract.h``
through the constants the extension exports.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from .. import _native as native
from ..errors import Full, LayoutError
from . import constants

MAGIC = constants.WHEEL_MAGIC  # "SHMWHEL2"
LAYOUT_VERSION = constants.WHEEL_LAYOUT_VERSION
DEFAULT_RANGE = 2**41  # ~70 years of milliseconds
_MAX_SPAN = 2**61


@dataclass(frozen=True)
class WheelGeometry:
    """Sizes that fix a wheel's layout. Level k has tick ``tick * wheel_size**k``."""

    tick: int
    wheel_size: int
    levels: int
    capacity: int

    @classmethod
    def spanning(
        cls, tick: int, wheel_size: int, capacity: int, max_range: int = DEFAULT_RANGE
    ) -> WheelGeometry:
        """The fewest levels whose top interval covers ``max_range`` time units."""
        if not isinstance(tick, int) or tick < 1:
            raise ValueError(f"tick must be a positive integer, got {tick!r}")
        if not isinstance(wheel_size, int) or wheel_size < 2:
            raise ValueError(f"wheel_size must be an integer >= 2, got {wheel_size!r}")
        if not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative integer, got {capacity!r}")
        levels, span = 1, tick * wheel_size
        while span < max_range and span * wheel_size <= _MAX_SPAN:
            levels += 1
            span *= wheel_size
        if span > _MAX_SPAN:
            raise ValueError(f"tick * wheel_size = {tick * wheel_size} overflows the clock range")
        return cls(tick, wheel_size, levels, capacity)

    @property
    def buckets(self) -> int:
        """Buckets stored per level: twice Kafka's wheel_size, the room pre-cascading needs."""
        return 2 * self.wheel_size

    @property
    def words(self) -> int:
        return (self.buckets + 63) // 64

    @property
    def sentinels(self) -> int:
        return self.levels * self.buckets

    @property
    def span(self) -> int:
        """Top level's interval: deadlines must lie less than this beyond the clock."""
        return self.tick * int(self.wheel_size**self.levels)  # int ** int is Any to mypy


def wheel_layout(g: WheelGeometry) -> dict[str, int]:
    """Word offsets of each table in the wheel array, and its total length in words."""
    sizes = [
        ("ticks", g.levels),
        ("bexp", g.sentinels),
        ("bits", g.levels * g.words),
        ("nodes", (g.sentinels + g.capacity) * constants.NODE_WORDS),
    ]
    offsets, at = {}, constants.WHEEL_HEADER_WORDS
    for name, n in sizes:
        offsets[name] = at
        at += n
    offsets["total"] = at
    return offsets


def words_needed(g: WheelGeometry) -> int:
    return wheel_layout(g)["total"]


def _write_header(mem: np.ndarray, g: WheelGeometry) -> None:
    off = wheel_layout(g)
    mem[: constants.WHEEL_HEADER_WORDS] = 0
    mem[constants.H_MAGIC] = MAGIC  # "SHMWHEL2" < 2**63: an int64 as it is
    mem[constants.H_VERSION] = LAYOUT_VERSION
    mem[constants.H_CAPACITY] = g.capacity
    mem[constants.H_LEVELS] = g.levels
    mem[constants.H_WHEEL] = g.wheel_size
    mem[constants.H_BUCKETS] = g.buckets
    mem[constants.H_WORDS] = g.words
    mem[constants.H_TICK] = g.tick
    mem[constants.H_OFF_TICKS] = off["ticks"]
    mem[constants.H_OFF_BEXP] = off["bexp"]
    mem[constants.H_OFF_BITS] = off["bits"]
    mem[constants.H_OFF_NODES] = off["nodes"]
    mem[constants.H_TOTAL] = off["total"]
    mem[constants.H_SENTINELS] = g.sentinels
    ot = off["ticks"]
    mem[ot : ot + g.levels] = _ticks(g)


def _ticks(g: WheelGeometry) -> list[int]:
    return [g.tick * g.wheel_size**k for k in range(g.levels)]


_OFFSETS = (
    (constants.H_OFF_TICKS, "ticks"),
    (constants.H_OFF_BEXP, "bexp"),
    (constants.H_OFF_BITS, "bits"),
    (constants.H_OFF_NODES, "nodes"),
)


def read_geometry(mem: np.ndarray) -> WheelGeometry:
    """The geometry a formatted wheel array's header records; LayoutError for a header that
    is not one, or whose sizes and offsets disagree with one another or with the array."""
    if mem.dtype != np.int64 or mem.ndim != 1 or len(mem) < constants.WHEEL_HEADER_WORDS:
        raise LayoutError("a wheel array is a 1-d int64 array with at least a header")
    magic = int(np.int64(mem[constants.H_MAGIC]).view(np.uint64))
    if magic != MAGIC:
        raise LayoutError(f"not a shmwheel wheel: magic {magic:#x}, expected {MAGIC:#x}")
    if mem[constants.H_VERSION] != LAYOUT_VERSION:
        raise LayoutError(
            f"wheel layout version {int(mem[constants.H_VERSION])}, "
            f"this code reads {LAYOUT_VERSION}"
        )
    g = WheelGeometry(
        int(mem[constants.H_TICK]),
        int(mem[constants.H_WHEEL]),
        int(mem[constants.H_LEVELS]),
        int(mem[constants.H_CAPACITY]),
    )
    if g.tick < 1 or g.wheel_size < 2 or g.levels < 1 or g.capacity < 0:
        raise LayoutError(f"wheel header sizes are inconsistent ({g}, {len(mem)} words)")
    off = wheel_layout(g)
    if (
        mem[constants.H_TOTAL] != off["total"]
        or len(mem) < off["total"]
        or mem[constants.H_BUCKETS] != g.buckets
        or mem[constants.H_SENTINELS] != g.sentinels
        or mem[constants.H_WORDS] != g.words
        or any(mem[h] != off[name] for h, name in _OFFSETS)
        or mem[off["ticks"] : off["ticks"] + g.levels].tolist() != _ticks(g)
    ):
        raise LayoutError(f"wheel header sizes are inconsistent ({g}, {len(mem)} words)")
    return g


def formatted_wheel(
    tick: int, wheel_size: int, start_time: int, capacity: int, max_range: int = DEFAULT_RANGE
) -> np.ndarray:
    """A new empty wheel array in process memory: the fewest levels spanning ``max_range``,
    ``capacity`` entry slots, the clock at ``start_time`` (rounded down to the tick)."""
    g = WheelGeometry.spanning(tick, wheel_size, capacity, max_range)
    mem = np.zeros(words_needed(g), dtype=np.int64)
    WheelCore.format(mem, g, start_time)
    return mem


# the native calls of the hot paths, bound once
_insert_many = native.wheel_insert_many
_cancel_many = native.wheel_cancel_many
_advance = native.wheel_advance
_cascade_step = native.wheel_cascade_step
_next_wakeup = native.wheel_next_wakeup
_release = native.wheel_release
_NO_SLOT = constants.INS_NO_SLOT
_NEVER = constants.NEVER
_SLOT_MASK = constants.HANDLE_SLOT_MASK
_GEN_BITS = constants.GS_GEN_MASK << constants.GS_GEN_SHIFT


class WheelCore(native.BoundWheel):
    """A hierarchical timing wheel over one int64 array; see ``shmwheel/native/wheel.c`` for
    the theory. Its per-call ``insert`` and ``cancel`` are the native base's
    (``shmwheel/native/wheel_bound.c``), which borrows the array once, when it is bound.

    Not thread-safe: callers serialise access (SystemTimer with a lock, the service by
    giving the wheel to one process). ``growable`` cores (process memory) double their
    entry table when it fills; a core over a caller's buffer raises ``Full`` instead.
    """

    def __init__(
        self,
        tick: int = 1,
        wheel_size: int = 20,
        start_time: int = 0,
        capacity: int = 1024,
        *,
        max_range: int = DEFAULT_RANGE,
        growable: bool = True,
    ) -> None:
        mem = formatted_wheel(tick, wheel_size, start_time, capacity, max_range)
        self._bind(mem, read_geometry(mem), growable)

    @staticmethod
    def format(mem: np.ndarray, g: WheelGeometry, start_time: int) -> None:
        """Lay out an empty wheel in `mem` (len >= words_needed(g)), clock at start_time."""
        if len(mem) < words_needed(g):
            raise LayoutError(f"wheel needs {words_needed(g)} words, buffer has {len(mem)}")
        now = (int(start_time) // g.tick) * g.tick
        if not -(2**63) + g.span <= now <= 2**63 - 1 - g.span:
            raise ValueError(
                f"start_time {start_time} is outside the clock range: the wheel's "
                f"span {g.span} must fit on either side of it in int64"
            )
        _write_header(mem, g)
        mem[constants.H_NOW] = now
        native.wheel_reset(mem)

    @classmethod
    def attach(cls, mem: np.ndarray, growable: bool = False) -> WheelCore:
        """A core over an already formatted array (e.g. a shared segment); checks the header.
        ``growable`` only for process memory: growing replaces the array."""
        core = cls.__new__(cls)
        core._bind(mem, read_geometry(mem), growable)
        return core

    def _bind(self, mem: np.ndarray, g: WheelGeometry, growable: bool) -> None:
        self._hold(mem)  # the native base checks the header and keeps the array borrowed
        self.mem = mem
        self.geometry = g
        self.growable = growable
        # what the batch calls borrow: a memoryview of the array, cheaper to borrow than it
        self._buf = mem.data

    # -- properties ---------------------------------------------------------------
    @property
    def tick(self) -> int:
        return self.geometry.tick

    @property
    def current_time(self) -> int:
        return int(self.mem[constants.H_NOW])

    @property
    def size(self) -> int:
        """Entries linked in the wheel (pending)."""
        return int(self.mem[constants.H_PENDING])

    @property
    def capacity(self) -> int:
        return int(self.mem[constants.H_CAPACITY])

    def max_deadline(self) -> int:
        """The first deadline the wheel refuses as out of range at the current time."""
        g = self.geometry
        top = g.tick * int(g.wheel_size ** (g.levels - 1))  # int ** int is Any to mypy
        return (self.current_time // top) * top + g.span - g.tick + 1

    # -- single operations: insert(deadline) and cancel(handle) are the native base's --
    def _out_of_range(self, deadline: int) -> None:
        raise ValueError(
            f"deadline {deadline} is beyond the wheel's range (must be < {self.max_deadline()})"
        )

    # -- batch operations ---------------------------------------------------------
    def insert_many(self, deadlines: np.ndarray) -> np.ndarray:
        """Insert a batch. Returns handles, with ALREADY_DUE / OUT_OF_RANGE codes for entries
        not inserted, and NO_SLOT for those left over when a fixed-size core is full."""
        d = np.ascontiguousarray(deadlines, dtype=np.int64)
        out = np.full(len(d), _NO_SLOT, dtype=np.int64)
        done = _insert_many(self._buf, d, out)
        while done < len(d) and self.growable:
            self._make_room(len(d) - done)
            done += _insert_many(self._buf, d[done:], out[done:])
        return out

    def cancel_many(self, handles: np.ndarray) -> np.ndarray:
        """Cancel a batch; returns a bool array, True where the entry was pending."""
        h = np.ascontiguousarray(handles, dtype=np.int64)
        out = np.empty(len(h), dtype=np.bool_)  # 1 byte a flag: an int64 out costs 8x the pages
        _cancel_many(self._buf, h, out)
        return out

    def advance_into(self, now: int, out: np.ndarray, release: bool = True) -> int:
        """Advance towards `now`, writing due slots into `out` (see ``wheel_advance`` in
        shmwheel/native/wheel.c). A return value equal to len(out) means more may be due:
        call again."""
        return _advance(self._buf, now, out, release)

    def advance(self, now: int, release: bool = True) -> np.ndarray:
        """Advance the clock to `now` and return every slot that came due, in deadline order
        of their buckets. With ``release`` the slots are freed for reuse at once."""
        out = np.empty(max(1, self.size), dtype=np.int64)
        n = _advance(self._buf, now, out, release)
        if n < len(out):
            return out[:n]
        parts = [out.copy()]
        while n == len(out):
            n = _advance(self._buf, now, out, release)
            parts.append(out[:n].copy())
        return np.concatenate(parts)

    def release(self, slots: np.ndarray) -> int:
        """Free slots emitted by ``advance(release=False)``."""
        return _release(self._buf, np.ascontiguousarray(slots, dtype=np.int64))

    def cascade_step(self, budget: int = 4096) -> int:
        """Pre-cascade up to `budget` entries from buckets that will expire next at each
        level; returns how many moved (0 means no pre-cascade work is pending)."""
        return _cascade_step(self._buf, budget)

    def next_wakeup(self) -> int | None:
        """When the wheel next has work (a bucket to fire or to pre-cascade); None if empty."""
        t = _next_wakeup(self._buf)
        return None if t == _NEVER else t

    # -- entry table --------------------------------------------------------------
    def entries(self) -> np.ndarray:
        """The entry records as a (capacity, 4) view: next, prev, deadline, gen|state."""
        g = self.geometry
        start = int(self.mem[constants.H_OFF_NODES]) + g.sentinels * constants.NODE_WORDS
        return self.mem[start : start + g.capacity * constants.NODE_WORDS].reshape(
            -1, constants.NODE_WORDS
        )

    def deadline_of(self, slot: int) -> int:
        """The exact deadline recorded in `slot`."""
        return int(self.entries()[slot, constants.F_DEADLINE])

    def handle_of(self, slot: int) -> int:
        """The handle that currently names `slot` (its generation and index)."""
        return (int(self.entries()[slot, constants.F_GS]) & _GEN_BITS) | slot

    @staticmethod
    def slot_of(handle: int) -> int:
        """The slot a handle names."""
        return handle & _SLOT_MASK

    def is_pending(self, handle: int) -> bool:
        """Whether the entry `handle` names is still waiting in the wheel."""
        slot = handle & _SLOT_MASK
        if handle < 0 or slot >= self.capacity:
            return False
        gs = int(self.entries()[slot, constants.F_GS])
        return (gs & _GEN_BITS) == (handle & _GEN_BITS) and (
            gs & constants.GS_STATE_MASK
        ) == constants.ST_PENDING

    # -- capacity -----------------------------------------------------------------
    def _make_room(self, wanted: int) -> None:
        if not self.growable:
            raise Full(
                f"the wheel is full ({self.capacity} entries): cancel some or "
                f"create it with a larger capacity"
            )
        self.grow(max(2 * self.capacity, self.capacity + wanted, 64))

    def grow(self, capacity: int) -> None:
        """Enlarge the entry table to `capacity` slots, keeping every entry and handle."""
        old, g = self.mem, self.geometry
        if capacity <= g.capacity:
            return
        ng = WheelGeometry(g.tick, g.wheel_size, g.levels, capacity)
        mem = np.zeros(words_needed(ng), dtype=np.int64)
        _write_header(mem, ng)
        mem[constants.H_NOW] = old[constants.H_NOW]
        mem[constants.H_FREE] = old[constants.H_FREE]
        mem[constants.H_PENDING] = old[constants.H_PENDING]
        o, n = wheel_layout(g), wheel_layout(ng)
        for name, length in (
            ("bexp", g.sentinels),
            ("bits", g.levels * g.words),
            ("nodes", (g.sentinels + g.capacity) * constants.NODE_WORDS),
        ):
            mem[n[name] : n[name] + length] = old[o[name] : o[name] + length]
        native.wheel_add_free_slots(mem, g.capacity)
        self._bind(mem, ng, self.growable)

    # -- checking -----------------------------------------------------------------
    def verify(self, moved: Collection[int] = ()) -> None:
        """Check the structural invariants of wheel.c (slow; for tests). A linked entry is
        PENDING, or CANCELLED (a service's lock-free cancel; the wheel retires it), and an
        entry is linked iff its prev is not -1. Raises AssertionError. `moved`: slots a
        service's reset may have given a deadline their bucket does not know yet (held
        RESETTING, or its record not yet drained): they may sit in any bucket."""
        mem, g = self.mem, self.geometry
        off = wheel_layout(g)
        nodes = mem[off["nodes"] : off["nodes"] + (g.sentinels + g.capacity) * constants.NODE_WORDS]
        nodes = nodes.reshape(-1, constants.NODE_WORDS)
        st = nodes[g.sentinels :, constants.F_GS] & constants.GS_STATE_MASK
        epv, enx = nodes[g.sentinels :, constants.F_PREV], nodes[g.sentinels :, constants.F_NEXT]
        # the walks read Python lists: indexing numpy one scalar at a time is ~5x slower
        nx, pv = nodes[:, constants.F_NEXT].tolist(), nodes[:, constants.F_PREV].tolist()
        stl, dl = st.tolist(), nodes[g.sentinels :, constants.F_DEADLINE].tolist()
        bexp = mem[off["bexp"] : off["bexp"] + g.sentinels].tolist()
        bits = mem[off["bits"] : off["bits"] + g.levels * g.words].view(np.uint64).tolist()
        now, linked = self.current_time, 0
        linkable = (
            constants.ST_PENDING,
            constants.ST_CANCELLED,
            constants.ST_COMPLETED,
            constants.ST_RESETTING,
        )
        moved = set(moved)
        for k in range(g.levels):
            tk = g.tick * g.wheel_size**k
            for i in range(g.buckets):
                b = k * g.buckets + i
                bit = bool((bits[k * g.words + i // 64] >> (i % 64)) & 1)
                node, prev, n = nx[b], b, 0
                while node != b:
                    assert pv[node] == prev, f"broken prev link at node {node}"
                    slot = node - g.sentinels
                    assert 0 <= slot < g.capacity, f"bucket {b} links to node {node}"
                    assert stl[slot] in linkable, (
                        f"slot {slot} linked in state {stl[slot]}, not pending/cancelled/"
                        f"completed/resetting"
                    )
                    if slot not in moved:  # (else its bucket is its old deadline's)
                        r = -((-dl[slot]) // g.tick) * g.tick
                        assert r > now or k == 0, f"slot {slot} overdue at level {k}"
                        # level 0: an entry linked already due (wheel_link) is in now's bucket
                        v = max(r, now) // tk if k == 0 else r // tk
                        assert v % g.buckets == i and v * tk == bexp[b], (
                            f"slot {slot} (r={r}) in level {k} bucket {i} expiring {bexp[b]}"
                        )
                        if k > 0:
                            assert v > now // tk, f"level {k} bucket {i} is the current one"
                    prev, node, n = node, nx[node], n + 1
                    assert n <= g.capacity, "cycle in a bucket list"
                assert bit == (n > 0) == (bexp[b] != constants.NO_TIME), (
                    f"level {k} bucket {i}: bit {bit}, {n} entries, expiration {bexp[b]}"
                )
                linked += n
        assert linked == self.size, f"{linked} linked entries, header says {self.size}"
        assert int(np.count_nonzero(epv != -1)) == linked, (
            "an unlinked entry has prev != -1 (linked iff prev != -1)"
        )
        assert not (((st == constants.ST_PENDING) & (epv == -1)).any()), (
            "a pending slot is not linked"
        )
        stack, s = [], int(mem[constants.H_FREE])
        while s != -1:
            assert 0 <= s < g.capacity, f"free list holds slot {s} out of range"
            stack.append(s)
            assert len(stack) <= g.capacity, "cycle in the free list"
            s = nx[g.sentinels + s]
        on_stack = np.array(stack, dtype=np.int64)
        bad = on_stack[st[on_stack] != constants.ST_FREE]
        assert len(bad) == 0, f"free list holds slot {int(bad[0]) if len(bad) else 0} not free"
        bad = on_stack[epv[on_stack] != -1]
        assert len(bad) == 0, f"free slot {int(bad[0]) if len(bad) else 0} has prev != -1"
        free = len(stack)
        assert int(np.count_nonzero(st == constants.ST_FREE)) == free, (
            "a FREE slot is off the stack"
        )
        held_mask = (st != constants.ST_FREE) & (epv == -1)  # FIRING (or reserved, in the service)
        assert (enx[held_mask] == -1).all(), "a held slot has next != -1 (in a list)"
        held = int(np.count_nonzero(held_mask))
        assert free + linked + held == g.capacity, (
            f"{free} free + {linked} linked + {held} held (firing, reserved) != "
            f"capacity {g.capacity}"
        )


def warm_up() -> None:
    """Kept for compatibility; does nothing. It loaded numba's compiled kernels before the
    first timer operation; the native core is compiled at install, so there is nothing to
    load."""
