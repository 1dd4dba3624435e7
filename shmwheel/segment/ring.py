"""Single-producer / single-consumer ring of fixed-size int64 records in shared memory.

Layout: word 0 is ``head`` (records ever published, written only by the producer), word 8
is ``tail`` (records ever consumed, written only by the consumer), each on its own cache
line; records follow from word 16, ``capacity`` (a power of two) of ``record`` words.

Memory ordering: the producer writes a record's words first and publishes by storing
``head`` last; the consumer reads ``head``, then the records below it.  Each store is one
aligned 8-byte write, and x86-64 (TSO) never makes a store visible before an earlier one,
so a consumer never sees a published index before its data.  On weaker architectures
(ARM64) this does not hold; ``service_layout.check_architecture`` refuses to start there.
A ring never trusts its peer: ``pending`` clamps a corrupt head to what can be valid.
"""

from __future__ import annotations

import numpy as np

HEADER = 16
HEAD = 0
TAIL = 8


def ring_words(capacity: int, record: int) -> int:
    if capacity < 2 or capacity & (capacity - 1):
        raise ValueError(f"ring capacity must be a power of two >= 2, got {capacity}")
    return HEADER + capacity * record


class Ring:
    """One side's handle on a ring (the same object serves producer or consumer)."""

    __slots__ = ("_mv", "capacity", "data", "mask", "record", "words")

    def __init__(self, words: np.ndarray, capacity: int, record: int) -> None:
        self.words = words
        self.capacity = capacity
        self.mask = capacity - 1
        self.record = record
        self.data = words[HEADER:].reshape(capacity, record)
        self._mv = words.data  # per-item stores: cheaper than numpy item access

    @property
    def head(self) -> int:
        return self._mv[HEAD]

    @property
    def tail(self) -> int:
        return self._mv[TAIL]

    def pending(self) -> int:
        """Records published and not yet consumed, clamped to [0, capacity]."""
        n = self._mv[HEAD] - self._mv[TAIL]
        return 0 if n < 0 else min(n, self.capacity)

    def free(self) -> int:
        return self.capacity - self.pending()

    # -- producer -------------------------------------------------------------------
    def push(self, *words: int) -> bool:
        """Publish one record (its `record` words); False if the ring is full."""
        mv = self._mv
        head = mv[HEAD]
        if head - mv[TAIL] >= self.capacity:
            return False
        i = HEADER + (head & self.mask) * self.record
        for w in words:
            mv[i] = w
            i += 1
        mv[HEAD] = head + 1
        return True

    def push_records(self, recs: np.ndarray) -> int:
        """Publish as many rows of recs (n x record) as fit, with one head store; returns
        the count published."""
        head = self._mv[HEAD]
        n = min(len(recs), self.capacity - (head - self._mv[TAIL]))
        if n <= 0:
            return 0
        i = head & self.mask
        first = min(n, self.capacity - i)
        self.data[i : i + first] = recs[:first]
        if first < n:
            self.data[: n - first] = recs[first:n]
        self._mv[HEAD] = head + n
        return n

    # -- consumer -------------------------------------------------------------------
    def peek(self, limit: int, out: np.ndarray) -> tuple[int, int]:
        """Copy up to `limit` unconsumed records into out (rows); returns (first sequence
        number, count). Does not consume: call ``consume`` once they are handled."""
        tail = self._mv[TAIL]
        n = min(self.pending(), limit, len(out))
        if n == 0:
            return tail, 0
        i = tail & self.mask
        first = min(n, self.capacity - i)
        out[:first] = self.data[i : i + first]
        if first < n:
            out[first:n] = self.data[: n - first]
        return tail, n

    def corrupt(self) -> bool:
        """True if head is not within [tail, tail + capacity]: the producer wrote garbage
        over it. The consumer then skips to head (``consume(head - tail)``)."""
        n = self._mv[HEAD] - self._mv[TAIL]
        return n < 0 or n > self.capacity

    def skip_to_head(self) -> None:
        self._mv[TAIL] = self._mv[HEAD]

    def consume(self, n: int) -> None:
        self._mv[TAIL] = self._mv[TAIL] + n

    def record_at(self, seq: int) -> np.ndarray:
        return self.data[seq & self.mask]
