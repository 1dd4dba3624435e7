"""Attaching to a running service: ``claim_ring(name)`` maps its segment and claims a free
producer ring for this process. ``connect`` (client.py) makes a ``Client`` on it; this
module imports no client module, so the client's module, which unpickled handles import
(``client_for``), can import it.
"""

from __future__ import annotations

import os

import numpy as np

from ...errors import ShmwheelError
from ...segment import layout as L
from ...segment import shm


def claim_ring(name: str) -> tuple[L.ServiceMemory, int]:
    """The segment of the running service `name` (same user), and a producer ring claimed
    in it for this process. ShmwheelError if the segment is damaged (LayoutError, from
    ``attach`` or a missing semaphore), its owner process is gone, the service is stopping
    or every ring is in use; the segment is closed again then."""
    L.check_architecture()
    mem = L.ServiceMemory.attach(name)
    try:
        owner = int(mem.header[L.W_OWNER])
        if not shm.pid_alive(owner):
            raise ShmwheelError(
                f"service {name!r} is not running: the owner process its segment names "
                f"(pid {owner}) is gone; `shmwheel clean` removes what a dead service left"
            )
        if mem.header[L.W_STOPPING]:
            raise ShmwheelError(f"service {name!r} is stopping")
        mem.semaphore("coordinator")  # opened now, so close() can ring it after a stop
        pid = os.getpid()
        with mem.locked():
            free = np.flatnonzero(mem.ring_table[:, L.RT_STATE] == L.RING_FREE)
            if len(free) == 0:
                raise ShmwheelError(
                    f"all {mem.config.max_clients} client rings of service "
                    f"{name!r} are in use: close clients or raise max_clients"
                )
            ring = int(free[0])
            mem.ring_table[ring, L.RT_PID] = pid
            mem.ring_table[ring, L.RT_STATE] = L.RING_CLAIMED
        return mem, ring
    except BaseException:
        mem.close()
        raise
