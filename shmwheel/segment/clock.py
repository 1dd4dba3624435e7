"""The clock of every deadline in the segment: monotonic milliseconds, the same in every
process of the machine. Its own module, free of numpy, so that what needs only the clock
(a job pool's manager and wheel) does not import the segment's encodings."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Monotonic milliseconds (``time.monotonic_ns() // 1_000_000``)."""
    return time.monotonic_ns() // 1_000_000
