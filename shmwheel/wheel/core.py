"""The wheel core: one timing-wheel algorithm (``wheel_kernels``) over one int64 array.

``WheelCore`` owns or attaches that array: ``layout`` fixes where each table lives, the
header records it (magic, layout version, sizes), and every operation is a compiled
kernel call with that single argument.  In process the array is ordinary numpy memory
that can grow; in the shared-memory service it is a view of a segment, fixed in size.
Times are integers in whatever unit the caller chose (milliseconds for the Kafka layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels as K
from ..errors import Full, LayoutError

MAGIC = 0x53484D5748454C31  # "SHMWHEL1"
LAYOUT_VERSION = 1
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
    def spanning(cls, tick: int, wheel_size: int, capacity: int,
                 max_range: int = DEFAULT_RANGE) -> WheelGeometry:
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
    def slots(self) -> int:
        """Buckets stored per level: twice Kafka's wheel_size, the room pre-cascading needs."""
        return 2 * self.wheel_size

    @property
    def words(self) -> int:
        return (self.slots + 63) // 64

    @property
    def sentinels(self) -> int:
        return self.levels * self.slots

    @property
    def span(self) -> int:
        """Top level's interval: deadlines must lie less than this beyond the clock."""
        return self.tick * self.wheel_size**self.levels


def layout(g: WheelGeometry) -> dict[str, int]:
    """Word offsets of each table in the wheel array, and its total length in words."""
    sizes = [
        ("ticks", g.levels),
        ("bexp", g.sentinels),
        ("bits", g.levels * g.words),
        ("nodes", (g.sentinels + g.capacity) * K.NODE_WORDS),
    ]
    offsets, at = {}, K.HEADER_WORDS
    for name, n in sizes:
        offsets[name] = at
        at += n
    offsets["total"] = at
    return offsets


def words_needed(g: WheelGeometry) -> int:
    return layout(g)["total"]


def _write_header(mem: np.ndarray, g: WheelGeometry) -> None:
    off = layout(g)
    mem[: K.HEADER_WORDS] = 0
    mem[K.H_MAGIC] = np.int64(np.uint64(MAGIC).view(np.int64))
    mem[K.H_VERSION] = LAYOUT_VERSION
    mem[K.H_CAPACITY] = g.capacity
    mem[K.H_LEVELS] = g.levels
    mem[K.H_WHEEL] = g.wheel_size
    mem[K.H_SLOTS] = g.slots
    mem[K.H_WORDS] = g.words
    mem[K.H_TICK] = g.tick
    mem[K.H_OFF_TICKS] = off["ticks"]
    mem[K.H_OFF_BEXP] = off["bexp"]
    mem[K.H_OFF_BITS] = off["bits"]
    mem[K.H_OFF_NODES] = off["nodes"]
    mem[K.H_TOTAL] = off["total"]
    mem[K.H_SENTINELS] = g.sentinels
    ot = off["ticks"]
    mem[ot : ot + g.levels] = [g.tick * g.wheel_size**k for k in range(g.levels)]


def _read_geometry(mem: np.ndarray) -> WheelGeometry:
    if mem.dtype != np.int64 or mem.ndim != 1 or len(mem) < K.HEADER_WORDS:
        raise LayoutError("a wheel array is a 1-d int64 array with at least a header")
    magic = int(np.int64(mem[K.H_MAGIC]).view(np.uint64))
    if magic != MAGIC:
        raise LayoutError(f"not a shmwheel wheel: magic {magic:#x}, expected {MAGIC:#x}")
    if mem[K.H_VERSION] != LAYOUT_VERSION:
        raise LayoutError(
            f"wheel layout version {int(mem[K.H_VERSION])}, this code reads {LAYOUT_VERSION}")
    g = WheelGeometry(int(mem[K.H_TICK]), int(mem[K.H_WHEEL]), int(mem[K.H_LEVELS]),
                      int(mem[K.H_CAPACITY]))
    off = layout(g)
    if g.tick < 1 or g.wheel_size < 2 or g.levels < 1 or mem[K.H_TOTAL] != off["total"] \
            or len(mem) < off["total"] or mem[K.H_SLOTS] != g.slots:
        raise LayoutError(f"wheel header sizes are inconsistent ({g}, {len(mem)} words)")
    return g


class WheelCore:
    """A hierarchical timing wheel over one int64 array; see ``wheel_kernels`` for the theory.

    Not thread-safe: callers serialise access (SystemTimer with a lock, the service by
    giving the wheel to one process). ``growable`` cores (process memory) double their
    entry table when it fills; a core over a caller's buffer raises ``Full`` instead.
    """

    def __init__(self, tick: int = 1, wheel_size: int = 20, start_time: int = 0,
                 capacity: int = 1024, *, max_range: int = DEFAULT_RANGE,
                 growable: bool = True) -> None:
        g = WheelGeometry.spanning(tick, wheel_size, capacity, max_range)
        mem = np.zeros(words_needed(g), dtype=np.int64)
        self.format(mem, g, start_time)
        self._bind(mem, g, growable)

    @staticmethod
    def format(mem: np.ndarray, g: WheelGeometry, start_time: int) -> None:
        """Lay out an empty wheel in `mem` (len >= words_needed(g)), clock at start_time."""
        if len(mem) < words_needed(g):
            raise LayoutError(f"wheel needs {words_needed(g)} words, buffer has {len(mem)}")
        _write_header(mem, g)
        mem[K.H_NOW] = (int(start_time) // g.tick) * g.tick
        K.reset(mem)

    @classmethod
    def attach(cls, mem: np.ndarray) -> WheelCore:
        """A core over an already formatted array (e.g. a shared segment); checks the header."""
        core = cls.__new__(cls)
        core._bind(mem, _read_geometry(mem), growable=False)
        return core

    def _bind(self, mem: np.ndarray, g: WheelGeometry, growable: bool) -> None:
        self.mem = mem
        self.geometry = g
        self.growable = growable
        self._one = np.empty(1, dtype=np.int64)

    # -- properties ---------------------------------------------------------------
    @property
    def tick(self) -> int:
        return self.geometry.tick

    @property
    def current_time(self) -> int:
        return int(self.mem[K.H_NOW])

    @property
    def size(self) -> int:
        """Entries linked in the wheel (pending)."""
        return int(self.mem[K.H_PENDING])

    @property
    def capacity(self) -> int:
        return int(self.mem[K.H_CAPACITY])

    def max_deadline(self) -> int:
        """The first deadline the wheel refuses as out of range at the current time."""
        g = self.geometry
        top = g.tick * g.wheel_size ** (g.levels - 1)
        return (self.current_time // top) * top + g.span - g.tick + 1

    # -- single operations --------------------------------------------------------
    def insert(self, deadline: int) -> int:
        """Insert one deadline. Returns a handle (>= 0) or ALREADY_DUE (-1) if
        ``deadline <= current_time`` (nothing inserted). Raises ValueError beyond range."""
        h = K.insert_one(self.mem, deadline)
        if h == K.NO_SLOT:
            self._make_room(1)
            h = K.insert_one(self.mem, deadline)
        if h == K.OUT_OF_RANGE:
            raise ValueError(f"deadline {deadline} is beyond the wheel's range "
                             f"(must be < {self.max_deadline()})")
        return int(h)

    def cancel(self, handle: int) -> bool:
        """Unlink and free a pending entry in O(1); False for a stale or unknown handle."""
        return bool(K.cancel_one(self.mem, handle))

    # -- batch operations ---------------------------------------------------------
    def insert_many(self, deadlines: np.ndarray) -> np.ndarray:
        """Insert a batch. Returns handles, with ALREADY_DUE / OUT_OF_RANGE codes for entries
        not inserted, and NO_SLOT for those left over when a fixed-size core is full."""
        d = np.ascontiguousarray(deadlines, dtype=np.int64)
        out = np.full(len(d), K.NO_SLOT, dtype=np.int64)
        done = K.insert_batch(self.mem, d, out)
        while done < len(d) and self.growable:
            self._make_room(len(d) - done)
            done += K.insert_batch(self.mem, d[done:], out[done:])
        return out

    def cancel_many(self, handles: np.ndarray) -> np.ndarray:
        """Cancel a batch; returns a bool array, True where the entry was pending."""
        h = np.ascontiguousarray(handles, dtype=np.int64)
        out = np.zeros(len(h), dtype=np.bool_)
        K.cancel_batch(self.mem, h, out)
        return out

    def advance_into(self, now: int, out: np.ndarray, release: bool = True) -> int:
        """Advance towards `now`, writing due slots into `out`; see ``wheel_kernels.advance``.
        A return value equal to len(out) means more may be due: call again."""
        return int(K.advance(self.mem, now, out, release))

    def advance(self, now: int, release: bool = True) -> np.ndarray:
        """Advance the clock to `now` and return every slot that came due, in deadline order
        of their buckets. With ``release`` the slots are freed for reuse at once."""
        out = np.empty(max(1, self.size), dtype=np.int64)
        n = K.advance(self.mem, now, out, release)
        if n < len(out):
            return out[:n]
        parts = [out.copy()]
        while n == len(out):
            n = K.advance(self.mem, now, out, release)
            parts.append(out[:n].copy())
        return np.concatenate(parts)

    def release(self, slots: np.ndarray) -> int:
        """Free slots emitted by ``advance(release=False)``."""
        return int(K.release_batch(self.mem, np.ascontiguousarray(slots, dtype=np.int64)))

    def cascade_step(self, budget: int = 4096) -> int:
        """Pre-cascade up to `budget` entries from buckets that will expire next at each
        level; returns how many moved (0 means no pre-cascade work is pending)."""
        return int(K.cascade_step(self.mem, budget))

    def next_wakeup(self) -> int | None:
        """When the wheel next has work (a bucket to fire or to pre-cascade); None if empty."""
        t = K.next_wakeup(self.mem)
        return None if t == K.NEVER else int(t)

    # -- entry table --------------------------------------------------------------
    def entries(self) -> np.ndarray:
        """The entry records as a (capacity, 4) view: next, prev, deadline, gen|state."""
        g = self.geometry
        start = int(self.mem[K.H_OFF_NODES]) + g.sentinels * K.NODE_WORDS
        return self.mem[start : start + g.capacity * K.NODE_WORDS].reshape(-1, K.NODE_WORDS)

    def deadline_of(self, slot: int) -> int:
        return int(self.entries()[slot, K.F_DEADLINE])

    def handle_of(self, slot: int) -> int:
        """The handle that currently names `slot` (its generation and index)."""
        return ((int(self.entries()[slot, K.F_GS]) >> 32) << 32) | slot

    @staticmethod
    def slot_of(handle: int) -> int:
        return handle & K.SLOT_MASK

    def is_pending(self, handle: int) -> bool:
        slot = handle & K.SLOT_MASK
        if handle < 0 or slot >= self.capacity:
            return False
        gs = int(self.entries()[slot, K.F_GS])
        return (gs >> 32) == (handle >> 32) and (gs & 0xFF) == K.PENDING

    # -- capacity -----------------------------------------------------------------
    def _make_room(self, wanted: int) -> None:
        if not self.growable:
            raise Full(f"the wheel is full ({self.capacity} entries): cancel some or "
                       f"create it with a larger capacity")
        self.grow(max(2 * self.capacity, self.capacity + wanted, 64))

    def grow(self, capacity: int) -> None:
        """Enlarge the entry table to `capacity` slots, keeping every entry and handle."""
        old, g = self.mem, self.geometry
        if capacity <= g.capacity:
            return
        ng = WheelGeometry(g.tick, g.wheel_size, g.levels, capacity)
        mem = np.zeros(words_needed(ng), dtype=np.int64)
        _write_header(mem, ng)
        mem[K.H_NOW] = old[K.H_NOW]
        mem[K.H_FREE] = old[K.H_FREE]
        mem[K.H_PENDING] = old[K.H_PENDING]
        o, n = layout(g), layout(ng)
        for name, length in (("bexp", g.sentinels), ("bits", g.levels * g.words),
                             ("nodes", (g.sentinels + g.capacity) * K.NODE_WORDS)):
            mem[n[name] : n[name] + length] = old[o[name] : o[name] + length]
        K.add_free_slots(mem, g.capacity)
        self._bind(mem, ng, self.growable)

    # -- checking -----------------------------------------------------------------
    def verify(self) -> None:
        """Check the structural invariants (slow; for tests). Raises AssertionError."""
        mem, g = self.mem, self.geometry
        off = layout(g)
        nodes = mem[off["nodes"]:off["nodes"] + (g.sentinels + g.capacity) * K.NODE_WORDS]
        nodes = nodes.reshape(-1, K.NODE_WORDS)
        nx, pv = nodes[:, K.F_NEXT], nodes[:, K.F_PREV]
        gs, dl = nodes[g.sentinels:, K.F_GS], nodes[g.sentinels:, K.F_DEADLINE]
        bexp = mem[off["bexp"]:off["bexp"] + g.sentinels]
        bits = mem[off["bits"]:off["bits"] + g.levels * g.words].view(np.uint64)
        now, linked = self.current_time, 0
        for k in range(g.levels):
            tk = g.tick * g.wheel_size**k
            for i in range(g.slots):
                b = k * g.slots + i
                bit = bool((int(bits[k * g.words + i // 64]) >> (i % 64)) & 1)
                node, prev, n = int(nx[b]), b, 0
                while node != b:
                    assert int(pv[node]) == prev, f"broken prev link at node {node}"
                    slot = node - g.sentinels
                    assert 0 <= slot < g.capacity, f"bucket {b} links to node {node}"
                    assert int(gs[slot]) & 0xFF == K.PENDING, f"slot {slot} linked, not pending"
                    r = -((-int(dl[slot])) // g.tick) * g.tick
                    v = r // tk
                    assert v % g.slots == i and v * tk == int(bexp[b]), \
                        f"slot {slot} (r={r}) in level {k} bucket {i} expiring {int(bexp[b])}"
                    assert r > now or k == 0, f"slot {slot} overdue at level {k}"
                    if k > 0:
                        assert v > now // tk, f"level {k} bucket {i} is the current one"
                    prev, node, n = node, int(nx[node]), n + 1
                    assert n <= g.capacity, "cycle in a bucket list"
                assert bit == (n > 0) == (int(bexp[b]) != K.NO_TIME), \
                    f"level {k} bucket {i}: bit {bit}, {n} entries, expiration {int(bexp[b])}"
                linked += n
        assert linked == self.size, f"{linked} linked entries, header says {self.size}"
        free, s = 0, int(mem[K.H_FREE])
        while s != -1:
            assert int(gs[s]) & 0xFF == K.FREE, f"free list holds slot {s} not free"
            free, s = free + 1, int(nx[g.sentinels + s])
            assert free <= g.capacity, "cycle in the free list"
        held = int(np.count_nonzero(((gs & 0xFF) != K.FREE) & ((gs & 0xFF) != K.PENDING)))
        assert free + linked + held == g.capacity, \
            f"{free} free + {linked} linked + {held} held (due, reserved) != capacity {g.capacity}"


_warm = False


def warm_up() -> None:
    """Load (or compile) every kernel once in this process, so that no timer operation
    pays for compilation later. Idempotent; about 0.3 s from numba's on-disk cache."""
    global _warm
    if _warm:
        return
    core = WheelCore(1, 4, 0, 4)
    h = core.insert_many(np.array([5, 50, 500], dtype=np.int64))
    core.cancel_many(h[:1])
    core.cancel(core.insert(7))
    core.cascade_step(1)
    core.next_wakeup()
    out = np.empty(4, dtype=np.int64)
    core.advance_into(1000, out, False)
    core.release(out[:0])
    core.grow(8)
    _warm = True
