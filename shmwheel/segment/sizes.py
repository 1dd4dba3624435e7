"""How big the regions of a service segment are, given its ``ServiceConfig``, and the
defaults of the sizes ``TimerService`` does not fix by itself (segment/layout.py lays the
regions out in this order and owns the rest).

Defaults. A timer of capacity is 48 bytes (its wheel node and side record). The other
regions are fixed by the config: the payload arena scales with capacity by default; the
watch and waiter tables are sized by use (live operations' keys, handles awaited at once),
not by capacity; the rings by max_clients and executors. At capacity 1 M with the defaults
(32 clients, one executor) the segment is 63 bytes per timer of capacity:

    48.0 MB  wheel nodes and side records (48 B a timer)
     8.4 MB  producer rings, 32 x 16384 records of 16 B (a smaller ring slows
             schedule_many, which waits whenever its ring is full)
     0.5 MB  outcome rings, 32 x OUTQ_CAPACITY records of 16 B
     0.5 MB  per executor: a dispatch and a result ring of 8192 records (16 B + 40 B)
     0.3 MB  per executor: its error log, 64 records of 4 KiB (errlog.c)
     4.8 MB  payload arena, 4 MiB (default_arena_bytes) and 16 B of bookkeeping per block
     0.6 MB  watch table, 16384 entries of 32 B and their chains
     0.3 MB  waiter table, 16384 entries of 16 B
    ~0.1 MB  header, config, counters, histograms, ring tables, the wheel's buckets
"""

from __future__ import annotations

from typing import Protocol

from . import contract


class ConfigShape(Protocol):
    """What the sizes read of a service's config (``layout.ServiceConfig`` is one: named
    by its shape here, so that layout, which sizes its regions with these, is not
    imported back)."""

    @property
    def executors(self) -> int: ...
    @property
    def arena_blocks(self) -> tuple[int, ...]: ...
    @property
    def watch_capacity(self) -> int: ...
    @property
    def waiter_capacity(self) -> int: ...


MIB = 1 << 20
DEFAULT_TABLE_CAPACITY = 16384  # watch entries; handles awaited at once (in all clients)
# records of each client's outcome ring. A waiter's entry holds its outcome, so a full ring
# only costs that client a recheck of its entries (shmwheel/native/waiters.c)
OUTQ_CAPACITY = 1024


def default_arena_bytes(capacity: int) -> int:
    """The payload arena unless ``arena_bytes`` is given: 4 bytes per timer of capacity,
    at least 4 MiB (so 4 MiB up to 1,048,576 timers: 32,768 payloads of 9-64 bytes, 4,096
    of up to 256, 512 of up to 1 KiB and 128 of up to 4 KiB)."""
    return max(4 * MIB, 4 * capacity)


def arena_meta_words(cfg: ConfigShape) -> int:
    """Class headers, then each class's next-free and owner tables."""
    return contract.ARENA_CLASSES * contract.A_CLASS_WORDS + 2 * sum(cfg.arena_blocks)


def watch_buckets(cfg: ConfigShape) -> int:
    """Hash chains of the watch lists: a power of two, about one per two entries."""
    return 1 << max(4, (max(cfg.watch_capacity, 1) // 2 - 1).bit_length())


def watch_words(cfg: ConfigShape) -> int:
    return contract.WT_HEADER + watch_buckets(cfg) + cfg.watch_capacity * contract.WE_WORDS


def waiter_buckets(cfg: ConfigShape) -> int:
    """Buckets of the waiter table: a power of two, WAIT_WAYS entries each, at least
    waiter_capacity entries in all (a handle's entries go in one of its two buckets, so
    an ask is refused when both are full: with random handles the first refusal comes
    once about three quarters of the table is in use, 70% at the least in 20 trials of
    16384 entries)."""
    return 1 << max(1, (-(-max(cfg.waiter_capacity, 1) // contract.WAIT_WAYS) - 1).bit_length())


def waiter_words(cfg: ConfigShape) -> int:
    return contract.WAIT_HEADER + waiter_buckets(cfg) * contract.WAIT_BUCKET_WORDS


def error_words(cfg: ConfigShape) -> int:
    """The failed tasks' records (errlog.h, "task error records"): a header, then a log
    of contract.ERR_RECORDS records per executor."""
    return int(contract.ERR_REGION_HEADER + cfg.executors * contract.ERR_LOG_WORDS)


def arena_blocks(arena_bytes: int) -> tuple[int, int, int, int]:
    """Blocks per size class for an arena of about `arena_bytes`: half the bytes for the
    smallest class, where most payloads land, then a quarter, an eighth, an eighth."""
    shares = (0.5, 0.25, 0.125, 0.125)
    n = [
        int(arena_bytes * f) // size
        for f, size in zip(shares, contract.ARENA_CLASS_BYTES, strict=True)
    ]
    return (n[0], n[1], n[2], n[3])
