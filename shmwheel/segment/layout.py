"""Where everything of a service lives in its one shared segment, and attaching to it.

The segment is a sequence of int64 regions, each at an offset computed from the
``ServiceConfig`` recorded in the header (so every process derives the same layout):

    header | meta blob (config + task names, msgpack) | counters | lateness histograms |
    ring table | executor table | producer rings | dispatch rings | result rings |
    wheel (contract.h's wheel array) | side table | arena meta | arena data |
    [journal: anchors | live] | watch lists | outcome rings | waiter table | error logs

A slot is its wheel node and side record, 48 bytes, and nothing more: the purgatory and
the outcomes keep no word per slot (an operation's count is in its arena block, a freed
slot's last outcome in its payload word, and who waits for what in the waiter table,
sized by how many handles may be awaited at once: shmwheel/native/purgatory.c). The other
regions are fixed by the config: ``sizes`` says how big each is, and its defaults.

This module owns the segment header's words (``W_*``), the ring and executor tables and
the order of the regions; the encodings inside the regions (records, state words, rings)
are ``contract``'s. The header starts with a magic, the layout version and the total size;
``attach`` checks them and the recomputed layout against the segment before anything else
is read.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import asdict, dataclass

import msgpack
import numpy as np
import posix_ipc

from .. import _native as N
from ..errors import LayoutError
from ..wheel import core as wheel_core
from . import contract as C
from . import fixed, shm
from .ring import Ring
from .sizes import (
    DEFAULT_TABLE_CAPACITY,
    OUTQ_CAPACITY,
    arena_meta_words,
    error_words,
    waiter_buckets,
    waiter_words,
    watch_buckets,
    watch_words,
)
from .verify import verify

log = logging.getLogger("shmwheel.segment")

MAGIC = 0x5348575356433130  # "SHWSVC10"
MAGIC_FAMILY = MAGIC >> 16  # "SHWSVC": a service segment of any layout version
# 7: the error logs (issue 22); 8: no purgatory words per slot, the waiter table (issue 26);
# 9: the waiter table counts the asks under way (WA_WAITING: freers of an older layout
# would not read it, clients of an older one would not keep it); 10: dispatch records are
# claimed by CAS (ring.h: an older executor would run a record the reaper took over)
LAYOUT_VERSION = 10
HEADER_WORDS = 64
META_BYTES = 16384
# the task a lease without on_expire runs on expiry (Client.lease): a no-op every service
# has after its registered ones (task id len(tasks)), so that such a lease is a plain
# timer, journaled and recovered by name like any other; no user task may take its name
NO_TASK = "(no task)"

# header words
W_MAGIC = 0
W_VERSION = 1
W_TOTAL = 2
W_OWNER = 3  # pid of the supervisor (embedding process)
W_META_LEN = 4
W_DIRTY = 5  # set while a lock holder is mid-update
W_STOPPING = 6
W_COORD_SLEEPING = 7
W_REAPER_WAKE_AT = 8  # the time (ms) the reaper is sleeping until
W_READY = 9  # bit per service role that finished starting
W_REPAIRS = 10
W_PID_COORDINATOR = 11  # written by each service process when it starts
W_PID_REAPER = 12
W_RECOVERED = 13  # timers re-armed from the journal when the service started
W_JSEQ = 14  # the journal's next coordinator segment number (the coordinator's)
W_JLOW = 15  # the oldest coordinator segment still holding a live timer
W_RESTARTS_COORDINATOR = 16  # restarts of each role, counted by the supervisor
W_RESTARTS_REAPER = 17
W_INSTANCE = 18  # random, drawn at create: which instance of its name this segment is
# 1 from just before the reaper's advance until the FIRED records of what it won are
# written (0 again); written only by the reaper. A reaper that finds it 1 at start knows its
# predecessor died holding won timers it had not recorded: the FIRING slots in no place
# (shmwheel/service/processes/reaper.py, recover)
W_REAPER_JOPEN = 19
# the journal's faults (shmwheel/journal/write/writer.py, "Faults"): three words per writer
# (errno, since in wall ms, bytes held; all 0 while it writes), each written only by that
# writer; W_JREFUSE, written only by the supervisor, is 1 while either has a fault: the
# clients' schedule and watch paths read it and refuse with JournalError
W_JFAULT_COORDINATOR = 24  # .. 26
W_JFAULT_REAPER = 27  # .. 29
JFAULT_WORDS = 3
W_JREFUSE = 30
W_JINJECT = 31  # the fault-injection word of journal/write/disk.py (tests and benchmarks only)
# the watchdog's verdict (shmwheel/service/supervisor/watchdog.py), written only by the supervisor:
# the state (0 ok, 1 degraded, 2 failed) and a bitmask of its reasons (health.REASONS)
W_HEALTH = 32
W_HEALTH_REASONS = 33

READY_COORDINATOR = 1
READY_REAPER = 2

# counter rows: one row of C.COUNTER_WORDS per writer, so every word has a single writer
ROW_COORDINATOR = 0
ROW_REAPER = 1
ROW_LOCKED = 2  # written only under the segment lock, by whoever holds it
FIXED_ROWS = 3

# ring table row: pid of the claiming client, state
RING_ROW = 4
RT_PID = 0
RT_STATE = 1
RING_FREE = 0
RING_CLAIMED = 1
RING_CLOSING = 2

# executor table row
EXEC_ROW = 8
X_STARTED = 0  # dispatch sequence number the executor is running (-1 none)
X_SLEEPING = 1
X_PID = 2
X_RESTARTS = 3  # restarts of this executor, counted by the supervisor
X_STUCK = 4  # 1 while the reaper judges this executor stuck (reaper.py, take_over)


def check_architecture() -> None:
    """Refuse to run a service anywhere but x86-64. The native core's cross-process
    protocols are shown data-race-free in the C11 model (tests/tsan/), so they do not rest
    on x86's memory order; some of the Python side's plain accesses to shared words still
    do, and nothing has run elsewhere (docs/operating.md, "Memory ordering and
    platforms")."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        raise RuntimeError(
            f"shmwheel's service runs on x86-64 only; this machine is {platform.machine()!r}. "
            f"Its native core's protocols are data-race-free by the C11 memory model "
            f"(tests/tsan/), but a few of its Python-side reads and writes of shared words "
            f"still rely on x86's store and load order, and it has not run on another "
            f"architecture (docs/operating.md, 'Memory ordering and platforms')"
        )


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
    # the journal (shmwheel.journal.write.writer.JournalOptions); journal_dir "" for none
    journal_dir: str = ""
    journal_fsync: str = "interval"
    journal_fsync_ms: int = 100
    journal_segment_bytes: int = 64 << 20
    journal_keep_hours: float = 0.0
    journal_epoch: int = 0
    journal_next_gen: int = 0  # every slot's first generation (above the journal's ids)
    # the purgatory: watch entries (one per key of a live operation), hash chains
    watch_capacity: int = DEFAULT_TABLE_CAPACITY
    # the waiter table: about how many handles may be awaited at once (waiter_buckets)
    waiter_capacity: int = DEFAULT_TABLE_CAPACITY
    # an executor running one task this long with dispatched timers behind it is stuck:
    # the reaper takes those timers over to the other executors (reaper.py, take_over)
    stuck_after_ms: int = 1000

    def meta_blob(self) -> bytes:
        d = asdict(self)
        d["tasks"] = [list(t) for t in self.tasks]
        d["arena_blocks"] = list(self.arena_blocks)
        blob: bytes = msgpack.packb(d)  # msgpack ships no type hints
        return blob

    @classmethod
    def from_blob(cls, blob: bytes) -> ServiceConfig:
        d = msgpack.unpackb(blob)
        d["tasks"] = tuple(tuple(t) for t in d["tasks"])
        d["arena_blocks"] = tuple(d["arena_blocks"])
        return cls(**d)

    def geometry(self) -> wheel_core.WheelGeometry:
        return wheel_core.WheelGeometry.spanning(self.tick_ms, self.wheel_size, self.capacity)


def segment_layout(cfg: ServiceConfig) -> dict[str, int]:
    """Word offset of each region of a service segment, and 'total' (words)."""
    arena_data = (
        sum(n * size for n, size in zip(cfg.arena_blocks, C.ARENA_CLASS_BYTES, strict=True)) // 8
    )
    sizes = [
        ("meta", META_BYTES // 8),
        ("counters", (FIXED_ROWS + cfg.executors + cfg.max_clients) * C.COUNTER_WORDS),
        ("hist", cfg.executors * C.HIST_BUCKETS),
        ("ring_table", cfg.max_clients * RING_ROW),
        ("exec_table", cfg.executors * EXEC_ROW),
        ("producer", cfg.max_clients * C.ring_words(cfg.ring_capacity, C.PRODUCER_RECORD)),
        ("dispatch", cfg.executors * C.ring_words(cfg.dispatch_capacity, C.DISPATCH_RECORD)),
        ("results", cfg.executors * C.ring_words(cfg.dispatch_capacity, C.RESULT_RECORD)),
        ("wheel", wheel_core.words_needed(cfg.geometry())),
        ("side", cfg.capacity * C.SIDE_WORDS),
        ("arena_meta", arena_meta_words(cfg)),
        ("arena_data", arena_data),
        # the journal's retention (shmwheel/native/slots.h): int32 anchors, live counts
        ("anchors", (cfg.capacity + 1) // 2 if cfg.journal_dir else 0),
        ("live", C.JOURNAL_WINDOW if cfg.journal_dir else 0),
        # the purgatory and the outcomes (shmwheel/native/purgatory.c)
        ("watch", watch_words(cfg)),
        ("outq", cfg.max_clients * C.ring_words(OUTQ_CAPACITY, C.OUTQ_RECORD)),
        ("waiters", waiter_words(cfg)),
        # failed tasks' exceptions: a log per executor (errlog.c)
        ("errors", error_words(cfg)),
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
    native tables over them, the segment lock (with its repair) and the service's
    semaphores.

    ``create`` formats a new segment (the supervisor does this once); ``attach`` maps an
    existing one and refuses a header or layout it does not understand."""

    def __init__(self, service: str, seg: shm.Segment, cfg: ServiceConfig) -> None:
        self.service = service
        self.seg = seg
        self.config = cfg
        off = segment_layout(cfg)
        if seg.size < off["total"] * 8:
            raise LayoutError(
                f"segment {seg.name} has {seg.size} bytes, layout needs {off['total'] * 8}"
            )
        v = seg.view
        self.header = v(0, HEADER_WORDS)
        self.counters = v(
            off["counters"], (FIXED_ROWS + cfg.executors + cfg.max_clients) * C.COUNTER_WORDS
        ).reshape(-1, C.COUNTER_WORDS)
        self.hist = v(off["hist"], cfg.executors * C.HIST_BUCKETS).reshape(-1, C.HIST_BUCKETS)
        self.ring_table = v(off["ring_table"], cfg.max_clients * RING_ROW).reshape(-1, RING_ROW)
        self.exec_table = v(off["exec_table"], cfg.executors * EXEC_ROW).reshape(-1, EXEC_ROW)
        g = cfg.geometry()
        self.wheel = v(off["wheel"], wheel_core.words_needed(g))
        self.side = v(off["side"], cfg.capacity * C.SIDE_WORDS)
        self.arena = v(off["arena_meta"], arena_meta_words(cfg))
        self.arena_words = v(off["arena_data"], off["anchors"] - off["arena_data"])
        self.anchors = v(off["anchors"], off["live"] - off["anchors"])  # int32 pairs
        self.live = v(off["live"], off["watch"] - off["live"])
        self.watch = v(off["watch"], watch_words(cfg))
        self.outq_words = v(off["outq"], off["waiters"] - off["outq"])
        self.waiters = v(off["waiters"], waiter_words(cfg))
        self.errors = v(off["errors"], error_words(cfg))
        self.outq = self._rings(off["outq"], cfg.max_clients, OUTQ_CAPACITY, C.OUTQ_RECORD)
        self.producer = self._rings(
            off["producer"], cfg.max_clients, cfg.ring_capacity, C.PRODUCER_RECORD
        )
        self.dispatch = self._rings(
            off["dispatch"], cfg.executors, cfg.dispatch_capacity, C.DISPATCH_RECORD
        )
        self.results = self._rings(
            off["results"], cfg.executors, cfg.dispatch_capacity, C.RESULT_RECORD
        )
        self.task_names = [t[0] for t in cfg.tasks] + [NO_TASK]  # (NO_TASK: its note)
        self.task_ids = {name: i for i, name in enumerate(self.task_names)}
        self._sems: dict[str, posix_ipc.Semaphore] = {}
        self.tables: N.Tables | None = None
        self._lock = seg.locked(W_DIRTY, self._repair)

    def bind_tables(self) -> N.Tables:
        """The native tables over this attachment (made once; a formatted wheel needed)."""
        if self.tables is None:
            self.tables = N.Tables(self.wheel, self.side, self.arena, self.arena_words)
            if len(self.live):  # every attachment keeps the journal's live counts: any
                self.tables.set_anchors(self.anchors, self.live)  # may free a slot
            self.tables.set_purgatory(
                self.watch, self.waiters, self.outq_words, OUTQ_CAPACITY, self.config.max_clients
            )
        return self.tables

    def nodes(self) -> np.ndarray:
        """The entry records as a (capacity, NODE_WORDS) view."""
        start = int(self.wheel[C.H_OFF_NODES]) + int(self.wheel[C.H_SENTINELS]) * C.NODE_WORDS
        return self.wheel[start : start + self.config.capacity * C.NODE_WORDS].reshape(
            -1, C.NODE_WORDS
        )

    def _rings(self, start: int, count: int, capacity: int, record: int) -> list[Ring]:
        n = C.ring_words(capacity, record)
        return [Ring(self.seg.view(start + i * n, n), capacity, record) for i in range(count)]

    # -- construction ---------------------------------------------------------------
    @classmethod
    def create(
        cls, service: str, cfg: ServiceConfig, owner_pid: int, start_ms: int, local: bool = False
    ) -> ServiceMemory:
        """Format a new segment; with ``local`` in this process's memory (no name in
        /dev/shm: the state machine's tests)."""
        blob = cfg.meta_blob()
        if len(blob) > META_BYTES:
            raise ValueError(
                f"the task registry is too large for the segment header "
                f"({len(blob)} bytes > {META_BYTES}): register fewer tasks"
            )
        off = segment_layout(cfg)
        seg = (shm.LocalSegment if local else shm.Segment)(  # shm.NameTaken if it exists
            shm.segment_name(service), off["total"] * 8
        )
        try:
            h = seg.words
            h[W_OWNER] = owner_pid
            h[W_VERSION] = LAYOUT_VERSION
            h[W_TOTAL] = off["total"] * 8
            h[W_META_LEN] = len(blob)
            # never 0 (an unbound client's); os.urandom, as secrets would (whose import,
            # hmac and hashlib, roles would pay for in their zygote)
            h[W_INSTANCE] = int.from_bytes(os.urandom(8), "little") >> 2 | 1
            seg.bytes[off["meta"] * 8 : off["meta"] * 8 + len(blob)] = np.frombuffer(blob, np.uint8)
            # the magic last: until it is there, another process's census reads the entry
            # as damaged and leaves it alone; after, it finds the owner pid and the config
            # (with the owner written after the magic, a sweep starting meanwhile read a
            # service with owner 0 as stale and unlinked it)
            h[W_MAGIC] = C.as_int64(MAGIC)
            mem = cls(service, seg, cfg)
            wheel_core.WheelCore.format(mem.wheel, cfg.geometry(), start_ms)
            table = fixed.arena_classes(cfg.arena_blocks).reshape(-1)
            mem.arena[: len(table)] = table
            mem.anchors[:] = -1  # no slot anchored in a journal segment
            tables = mem.bind_tables()
            tables.watch_format(watch_buckets(cfg), cfg.watch_capacity)
            tables.waiters_format(waiter_buckets(cfg))
            tables.rebuild()  # every block and slot free, the lists threaded
            for t in mem.exec_table:
                t[X_STARTED] = -1
            return mem
        except BaseException:
            seg.close()
            seg.unlink()
            raise

    @classmethod
    def attach(cls, service: str) -> ServiceMemory:
        """Map the segment of `service` (this user's, wholly reserved: shm.Segment) after
        checking its header and every word create fixed (``fixed.check``): any damage is a
        ``LayoutError`` naming what is wrong, and nothing is left mapped."""
        seg = shm.Segment(shm.segment_name(shm.check_name(service)))
        try:
            cfg = read_config(seg)
            try:
                mem = cls(service, seg, cfg)
                sizes = (watch_buckets(cfg), cfg.watch_capacity)
                fixed.check(
                    seg.name,
                    mem.wheel,
                    cfg.geometry(),
                    mem.arena,
                    cfg.arena_blocks,
                    mem.watch,
                    sizes,
                    mem.waiters,
                    waiter_buckets(cfg),
                )
                mem.bind_tables()
            except (ValueError, TypeError, ArithmeticError, IndexError) as e:
                raise LayoutError(f"segment {seg.name} is damaged: {e}") from e
            return mem
        except BaseException:
            seg.close()
            raise

    # -- the lock -------------------------------------------------------------------
    def locked(self) -> shm.Locked:
        """The segment lock (see shm.py); the same object every time."""
        return self._lock

    def _repair(self) -> None:
        tables = self.bind_tables()
        relinked = tables.rebuild()
        self.counters[ROW_LOCKED, C.C_RETIRED] += tables.take_retired()
        self.header[W_REPAIRS] += 1
        log.warning(
            "service %s: a lock holder died mid-update; rebuilt the wheel from the "
            "slot states (%d timers relinked)",
            self.service,
            relinked,
        )
        t = time.perf_counter()
        try:  # the rebuild must leave every invariant true: check them all, now
            verify(self)
        except AssertionError as e:
            log.error("service %s: after the repair, verify() found: %s", self.service, e)
        else:
            log.info(
                "service %s: verify() after the repair passed (%.1f ms)",
                self.service,
                (time.perf_counter() - t) * 1000,
            )

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
        if self.tables is not None:
            self.tables.close()
            self.tables = None
        for s in self._sems.values():
            s.close()
        self._sems.clear()
        self.producer = self.dispatch = self.results = self.outq = []
        # a closed memory drops its views: they are typed as the arrays they are while open
        self.header = self.counters = self.hist = self.wheel = self.side = None  # type: ignore[assignment]
        self.arena = self.ring_table = self.exec_table = None  # type: ignore[assignment]
        self.arena_words = self.anchors = self.live = None  # type: ignore[assignment]
        self.watch = self.outq_words = self.waiters = self.errors = None  # type: ignore[assignment]
        self.seg.close()

    # -- payloads ---------------------------------------------------------------------
    def arena_block(self, cls_: int, block: int) -> np.ndarray:
        """The bytes of one arena block (the caller checked cls_ and block); where a class
        starts is read from the arena header, the same word the native core uses."""
        size = C.ARENA_CLASS_BYTES[cls_]
        start = int(self.arena[cls_ * C.A_CLASS_WORDS + C.A_DATA]) * 8 + block * size
        return self.arena_words.view(np.uint8)[start : start + size]


def semaphore_roles(cfg: ServiceConfig) -> list[str]:
    """Every service process's role, which is also the name of its wake-up semaphore."""
    return ["coordinator", "reaper"] + [f"exec{i}" for i in range(cfg.executors)]


def read_config(seg: shm.Segment) -> ServiceConfig:
    """The config recorded in a segment's header, after checking magic, version, size."""
    h = seg.words
    if seg.size < HEADER_WORDS * 8 + META_BYTES:
        raise LayoutError(f"segment {seg.name} is too small to be a shmwheel service")
    magic = int(h[W_MAGIC]) & (2**64 - 1)
    if magic >> 16 != MAGIC_FAMILY:
        raise LayoutError(f"segment {seg.name} is not a shmwheel service (magic {magic:#x})")
    if h[W_VERSION] != LAYOUT_VERSION or magic != MAGIC:
        raise LayoutError(
            f"segment {seg.name} has layout version {int(h[W_VERSION])} (magic "
            f"{magic.to_bytes(8, 'big').decode('ascii', 'replace')}); this shmwheel reads "
            f"version {LAYOUT_VERSION} ({MAGIC.to_bytes(8, 'big').decode()}) only: stop the "
            f"service that made it (with the shmwheel it was started with) and start it "
            f"again with this one"
        )
    n = int(h[W_META_LEN])
    if not 0 < n <= META_BYTES:
        raise LayoutError(f"segment {seg.name} has a corrupt header (meta length {n})")
    start = HEADER_WORDS * 8
    try:
        cfg = ServiceConfig.from_blob(bytes(seg.bytes[start : start + n]))
        fixed.check_sizes(asdict(cfg))
        total = segment_layout(cfg)["total"] * 8
    except Exception as e:
        raise LayoutError(f"segment {seg.name} has an unreadable config: {e}") from e
    if int(h[W_TOTAL]) != total or seg.size < int(h[W_TOTAL]):
        raise LayoutError(
            f"segment {seg.name}: header size {int(h[W_TOTAL])} does not match "
            f"its layout ({total}) or the segment ({seg.size})"
        )
    return cfg


def owner_of(seg: shm.Segment) -> int:
    read_config(seg)
    return int(seg.words[W_OWNER])
