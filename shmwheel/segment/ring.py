"""Single-producer / single-consumer rings of fixed-size int64 records in the segment.

The layout, the publishing protocol and its memory-ordering argument are the native
core's (``shmwheel/native/ring.h`` and ``atomics.h``): records are written, then ``head``
is stored with release; the consumer loads ``head`` with acquire, reads, then stores
``tail`` with release. Every publish and consume goes through the native functions, so
the protocol holds by the C11 memory model, not only by x86's store order. ``Ring`` only
adds numpy views for the reads that happen when nobody is writing (recovery, tests).
"""

from __future__ import annotations

import numpy as np

from .. import _native as native
from . import contract


class Ring:
    """One ring: a view of its words, its capacity (records) and record size (words)."""

    __slots__ = ("capacity", "data", "mask", "record", "words")

    def __init__(self, words: np.ndarray, capacity: int, record: int) -> None:
        if len(words) != contract.ring_words(capacity, record):
            raise ValueError(f"{len(words)} words is not a ring of {capacity} x {record}")
        self.words = words
        self.capacity = capacity
        self.mask = capacity - 1
        self.record = record
        self.data = words[contract.RING_HEADER_WORDS :].reshape(capacity, record)

    @property
    def head(self) -> int:
        return int(self.words[contract.RING_HEAD])

    @property
    def tail(self) -> int:
        return int(self.words[contract.RING_TAIL])

    def pending(self) -> int:
        """Records published and not consumed, clamped to [0, capacity]."""
        n = native.ring_pending(self.words, self.record)
        return self.capacity if n < 0 else n

    def corrupt(self) -> bool:
        """The producer wrote garbage over head (it is not within tail + [0, capacity])."""
        return bool(native.ring_pending(self.words, self.record) < 0)

    def free(self) -> int:
        return self.capacity - self.pending()

    def push(self, recs: np.ndarray) -> int:
        """Publish as many rows of recs (n x record, int64) as fit; returns the count."""
        recs = np.ascontiguousarray(recs, dtype=np.int64)
        return int(native.ring_push(self.words, self.record, recs, len(recs)))

    def peek(self, out: np.ndarray, limit: int | None = None) -> tuple[int, int]:
        """Copy up to `limit` unconsumed records into out (rows); (first seq, count), count
        -1 when head is corrupt. Nothing is consumed."""
        lim = len(out) if limit is None else limit
        seq0, n = native.ring_peek(self.words, self.record, out, lim)
        return int(seq0), int(n)

    def consume(self, n: int) -> None:
        """Done with n records; with a corrupt head (n == -1 from peek: pass 0), skip to it."""
        native.ring_consume(self.words, self.record, n)

    def record_at(self, seq: int) -> np.ndarray:
        """The record at sequence number `seq` (a view; for recovery and tests)."""
        row: np.ndarray = self.data[seq & self.mask]
        return row

    def column(self, col: int) -> np.ndarray:
        """Column `col` of the unconsumed records [tail, head), copied."""
        idx = (self.tail + np.arange(self.pending())) & self.mask
        values: np.ndarray = self.data[idx, col].copy()
        return values
