"""How late does a plain 0.5 ms sleep wake up on this machine? (3 s, no shmwheel involved.)

    python bench/vm_jitter.py            # prints every oversleep above 1 ms: (time ms mod 1e5, ms)

Used in docs/performance.md to separate the machine's own scheduling stalls from the
service's lateness: run it alone, then beside a running (even fully stopped) service.
"""

from __future__ import annotations

import time


def oversleeps(seconds: float = 3.0, sleep_s: float = 0.0005, above_ms: float = 1.0) -> list:
    events = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic_ns()
        time.sleep(sleep_s)
        over = (time.monotonic_ns() - t) / 1e6 - sleep_s * 1000
        if over > above_ms:
            events.append((time.monotonic_ns() // 1_000_000 % 100_000, round(over, 2)))
    return events


if __name__ == "__main__":
    print(oversleeps())
