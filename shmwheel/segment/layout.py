"""Where everything of a service lives in its one shared segment, and attaching to it.

The segment is a sequence of int64 regions, each at an offset computed from the
``ServiceConfig`` recorded in the header (so every process derives the same layout):

    header | meta blob (config + task names, msgpack) | counters | lateness histograms |
    ring table | executor table | producer rings | dispatch rings | result rings |
    wheel (wheel_core layout) | side table | arena meta | arena data

The header starts with a magic, the layout version and the total size; ``attach`` checks
them and the recomputed layout against the segment before anything else is read.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass

import msgpack
import numpy as np
import posix_ipc

from . import slots as SK
from . import shm
from ..wheel import core as wheel_core
from ..errors import LayoutError
from .ring import Ring, ring_words

MAGIC = 0x5348575356433031  # "SHWSVC01"
LAYOUT_VERSION = 2
HEADER_WORDS = 64
META_BYTES = 16384

# header words
W_MAGIC = 0
W_VERSION = 1
W_TOTAL = 2
W_OWNER = 3          # pid of the supervisor (embedding process)
W_META_LEN = 4
W_DIRTY = 5          # set while a lock holder is mid-update
W_STOPPING = 6
W_COORD_SLEEPING = 7
W_REAPER_WAKE_AT = 8  # the time (ms) the reaper is sleeping until
W_READY = 9          # bit per service role that finished starting
W_REPAIRS = 10
W_PID_COORDINATOR = 11  # written by each service process when it starts
W_PID_REAPER = 12

READY_COORDINATOR = 1
READY_REAPER = 2

# counters: one row of COUNTER_WORDS per writer, so every word has a single writer
COUNTER_WORDS = 16
C_SCHEDULED = 0
C_FIRED = 1
C_CANCELLED = 2
C_COMPLETED = 3
C_ERRORS = 4
C_CRASHED = 5
C_GARBAGE = 6
C_STALE = 7
C_REARMED = 8
C_EARLY = 9
C_LINKED = 10
C_FREED = 11
ROW_COORDINATOR = 0
ROW_REAPER = 1
ROW_LOCKED = 2  # written only under the segment lock, by whoever holds it
FIXED_ROWS = 3

# lateness histogram: bucket 0 is < 1 us; bucket i >= 1 covers [2**((i-1)/8), 2**(i/8)) us
HIST_BUCKETS = 256
HIST_PER_OCTAVE = 8

# ring table row: pid of the claiming client, state
RING_ROW = 4
RT_PID = 0
RT_STATE = 1
RING_FREE = 0
RING_CLAIMED = 1
RING_CLOSING = 2

# executor table row
EXEC_ROW = 8
X_STARTED = 0   # dispatch sequence number the executor is running (-1 none)
X_SLEEPING = 1
X_PID = 2

PRODUCER_RECORD = 2  # handle, handle ^ CHECK_KEY
DISPATCH_RECORD = 2  # handle, fired_ns
RESULT_RECORD = 4    # handle, outcome, dispatch seq, lateness_us

MAX_PAYLOAD = SK.ARENA_CLASSES[-1]
INLINE_MAX = 8


def check_architecture() -> None:
    """The rings publish by store order, which x86-64's TSO keeps; elsewhere refuse."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        raise RuntimeError(
            f"shmwheel's lock-free rings rely on x86-64 store ordering (TSO); this machine "
            f"is {platform.machine()!r} and no fenced ring mode is implemented")


@dataclass(frozen=True)
class ServiceConfig:
    """Sizes that fix a service's layout (recorded in the segment's meta blob)."""

    capacity: int
    tick_ms: int
    wheel_size: int
    executors: int
    max_clients: int
    ring_capacity: int
    dispatch_capacity: int
    arena_blocks: tuple[int, int, int, int]
    tasks: tuple[tuple[str, str], ...]  # (name, "module:function")

    def meta_blob(self) -> bytes:
        d = asdict(self)
        d["tasks"] = [list(t) for t in self.tasks]
        d["arena_blocks"] = list(self.arena_blocks)
        return msgpack.packb(d)

    @classmethod
    def from_blob(cls, blob: bytes) -> ServiceConfig:
        d = msgpack.unpackb(blob)
        d["tasks"] = tuple(tuple(t) for t in d["tasks"])
        d["arena_blocks"] = tuple(d["arena_blocks"])
        return cls(**d)

    def geometry(self) -> wheel_core.WheelGeometry:
        return wheel_core.WheelGeometry.spanning(self.tick_ms, self.wheel_size, self.capacity)


def layout(cfg: ServiceConfig) -> dict[str, int]:
    """Word offset of each region, and 'total' (words)."""
    arena_meta = SK.NCLASSES * SK.A_CLASS_WORDS + 2 * sum(cfg.arena_blocks)
    arena_data = sum(n * size for n, size in zip(cfg.arena_blocks, SK.ARENA_CLASSES)) // 8
    sizes = [
        ("meta", META_BYTES // 8),
        ("counters", (FIXED_ROWS + cfg.executors + cfg.max_clients) * COUNTER_WORDS),
        ("hist", cfg.executors * HIST_BUCKETS),
        ("ring_table", cfg.max_clients * RING_ROW),
        ("exec_table", cfg.executors * EXEC_ROW),
        ("producer", cfg.max_clients * ring_words(cfg.ring_capacity, PRODUCER_RECORD)),
        ("dispatch", cfg.executors * ring_words(cfg.dispatch_capacity, DISPATCH_RECORD)),
        ("results", cfg.executors * ring_words(cfg.dispatch_capacity, RESULT_RECORD)),
        ("wheel", wheel_core.words_needed(cfg.geometry())),
        ("side", cfg.capacity * SK.SIDE_WORDS),
        ("arena_meta", arena_meta),
        ("arena_data", arena_data),
    ]
    off, at = {}, HEADER_WORDS
    for name, n in sizes:
        at = (at + 7) // 8 * 8  # each region starts on a cache line
        off[name] = at
        at += n
    off["total"] = at
    return off


class ServiceMemory:
    """A process's attachment to a service segment: typed views of every region, the
    segment lock (with its repair) and the service's semaphores.

    ``create`` formats a new segment (the supervisor does this once); ``attach`` maps an
    existing one and refuses a header or layout it does not understand."""

    def __init__(self, service: str, seg: shm.Segment, cfg: ServiceConfig) -> None:
        self.service = service
        self.seg = seg
        self.config = cfg
        off = layout(cfg)
        if seg.size < off["total"] * 8:
            raise LayoutError(f"segment {seg.name} has {seg.size} bytes, layout needs "
                              f"{off['total'] * 8}")
        v = seg.view
        self.header = v(0, HEADER_WORDS)
        self.counters = v(off["counters"], (FIXED_ROWS + cfg.executors + cfg.max_clients)
                          * COUNTER_WORDS).reshape(-1, COUNTER_WORDS)
        self.hist = v(off["hist"], cfg.executors * HIST_BUCKETS).reshape(-1, HIST_BUCKETS)
        self.ring_table = v(off["ring_table"], cfg.max_clients * RING_ROW).reshape(-1, RING_ROW)
        self.exec_table = v(off["exec_table"], cfg.executors * EXEC_ROW).reshape(-1, EXEC_ROW)
        g = cfg.geometry()
        self.wheel = v(off["wheel"], wheel_core.words_needed(g))
        self.side = v(off["side"], cfg.capacity * SK.SIDE_WORDS)
        self.arena = v(off["arena_meta"], off["arena_data"] - off["arena_meta"])
        self.arena_data = seg.byte_view(off["arena_data"] * 8,
                                        (off["total"] - off["arena_data"]) * 8)
        self.arena_words = v(off["arena_data"], off["total"] - off["arena_data"])
        self.producer = self._rings(off["producer"], cfg.max_clients, cfg.ring_capacity,
                                    PRODUCER_RECORD)
        self.dispatch = self._rings(off["dispatch"], cfg.executors, cfg.dispatch_capacity,
                                    DISPATCH_RECORD)
        self.results = self._rings(off["results"], cfg.executors, cfg.dispatch_capacity,
                                   RESULT_RECORD)
        self.nodes_off = int(self.wheel[wheel_core.K.H_OFF_NODES]) + g.sentinels * 4
        self.task_names = [t[0] for t in cfg.tasks]
        self.task_ids = {name: i for i, name in enumerate(self.task_names)}
        self._sems: dict[str, posix_ipc.Semaphore] = {}
        self._lock = seg.locked(W_DIRTY, self._repair)

    def _rings(self, start: int, count: int, capacity: int, record: int) -> list[Ring]:
        n = ring_words(capacity, record)
        return [Ring(self.seg.view(start + i * n, n), capacity, record) for i in range(count)]

    # -- construction ---------------------------------------------------------------
    @classmethod
    def create(cls, service: str, cfg: ServiceConfig, owner_pid: int,
               start_ms: int) -> ServiceMemory:
        blob = cfg.meta_blob()
        if len(blob) > META_BYTES:
            raise ValueError(f"the task registry is too large for the segment header "
                             f"({len(blob)} bytes > {META_BYTES}): register fewer tasks")
        off = layout(cfg)
        seg = shm.Segment(shm.segment_name(service), off["total"] * 8)
        try:
            h = seg.words
            h[W_MAGIC] = np.int64(np.uint64(MAGIC).view(np.int64))
            h[W_VERSION] = LAYOUT_VERSION
            h[W_TOTAL] = off["total"] * 8
            h[W_OWNER] = owner_pid
            h[W_META_LEN] = len(blob)
            seg.bytes[off["meta"] * 8 : off["meta"] * 8 + len(blob)] = np.frombuffer(blob, np.uint8)
            mem = cls(service, seg, cfg)
            wheel_core.WheelCore.format(mem.wheel, cfg.geometry(), start_ms)
            a = mem.arena
            at, data = SK.NCLASSES * SK.A_CLASS_WORDS, 0
            for c, n in enumerate(cfg.arena_blocks):
                base = c * SK.A_CLASS_WORDS
                a[base + SK.A_NBLOCKS] = n
                a[base + SK.A_OFF_NEXT] = at
                a[base + SK.A_OFF_OWNER] = at + n
                a[base + SK.A_DATA] = data // 8  # the classes' blocks follow one another
                data += n * SK.ARENA_CLASSES[c]
                a[base + SK.A_BLOCK_WORDS] = SK.ARENA_CLASSES[c] // 8
                at += 2 * n
            SK.arena_format(a)
            for t in mem.exec_table:
                t[X_STARTED] = -1
            return mem
        except BaseException:
            seg.close()
            seg.unlink()
            raise

    @classmethod
    def attach(cls, service: str) -> ServiceMemory:
        seg = shm.Segment(shm.segment_name(shm.check_name(service)))
        try:
            cfg = read_config(seg)
            return cls(service, seg, cfg)
        except BaseException:
            seg.close()
            raise

    # -- the lock -------------------------------------------------------------------
    def locked(self) -> shm._Locked:
        """The segment lock (see shm.py); the same object every time."""
        return self._lock

    def _repair(self) -> None:
        SK.rebuild(self.wheel, self.side, self.arena)
        self.header[W_REPAIRS] += 1

    # -- semaphores -----------------------------------------------------------------
    def semaphore(self, role: str) -> posix_ipc.Semaphore:
        s = self._sems.get(role)
        if s is None:
            s = self._sems[role] = shm.open_semaphore(self.service, role, create=False)
        return s

    def ring_bell(self, role: str) -> None:
        """Wake the process waiting on `role`'s semaphore (at most one pending wake-up)."""
        s = self.semaphore(role)
        if s.value == 0:
            s.release()

    def close(self) -> None:
        for s in self._sems.values():
            s.close()
        self._sems.clear()
        self.producer = self.dispatch = self.results = []
        self.header = self.counters = self.hist = self.wheel = self.side = None  # type: ignore[assignment]
        self.arena = self.arena_data = self.ring_table = self.exec_table = None  # type: ignore[assignment]
        self.arena_words = None  # type: ignore[assignment]
        self.seg.close()

    # -- payloads ---------------------------------------------------------------------
    def arena_block(self, cls_: int, block: int) -> np.ndarray:
        """The bytes of one arena block (the caller checked cls_ and block); where a class
        starts is read from the arena header, the same word the kernels use."""
        size = SK.ARENA_CLASSES[cls_]
        start = int(self.arena[cls_ * SK.A_CLASS_WORDS + SK.A_DATA]) * 8 + block * size
        return self.arena_data[start : start + size]


def arena_blocks(arena_bytes: int) -> tuple[int, int, int, int]:
    """Blocks per size class for an arena of about `arena_bytes`: half the bytes for the
    smallest class, where most payloads land, then a quarter, an eighth, an eighth."""
    shares = (0.5, 0.25, 0.125, 0.125)
    n = [int(arena_bytes * f) // size for f, size in zip(shares, SK.ARENA_CLASSES)]
    return (n[0], n[1], n[2], n[3])


def semaphore_roles(cfg: ServiceConfig) -> list[str]:
    """Every service process's role, which is also the name of its wake-up semaphore."""
    return ["coordinator", "reaper"] + [f"exec{i}" for i in range(cfg.executors)]


def read_config(seg: shm.Segment) -> ServiceConfig:
    """The config recorded in a segment's header, after checking magic, version, size."""
    h = seg.words
    if seg.size < HEADER_WORDS * 8 + META_BYTES:
        raise LayoutError(f"segment {seg.name} is too small to be a shmwheel service")
    magic = int(np.int64(h[W_MAGIC]).view(np.uint64))
    if magic != MAGIC:
        raise LayoutError(f"segment {seg.name} is not a shmwheel service (magic {magic:#x})")
    if h[W_VERSION] != LAYOUT_VERSION:
        raise LayoutError(f"segment {seg.name} has layout version {int(h[W_VERSION])}; "
                          f"this shmwheel reads version {LAYOUT_VERSION}")
    n = int(h[W_META_LEN])
    if not 0 < n <= META_BYTES:
        raise LayoutError(f"segment {seg.name} has a corrupt header (meta length {n})")
    start = HEADER_WORDS * 8
    try:
        cfg = ServiceConfig.from_blob(bytes(seg.bytes[start : start + n]))
    except Exception as e:
        raise LayoutError(f"segment {seg.name} has an unreadable config: {e}") from e
    if int(h[W_TOTAL]) != layout(cfg)["total"] * 8 or seg.size < int(h[W_TOTAL]):
        raise LayoutError(f"segment {seg.name}: header size {int(h[W_TOTAL])} does not match "
                          f"its layout ({layout(cfg)['total'] * 8}) or the segment ({seg.size})")
    return cfg


def owner_of(seg: shm.Segment) -> int:
    read_config(seg)
    return int(seg.words[W_OWNER])
