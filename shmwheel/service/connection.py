"""Attaching to a running service: ``connect(name)`` claims a producer ring and gives a
``Client`` (client.py) on it; ``client_for`` gives the process's client of a service for
handles unpickled here.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ShmwheelError
from ..segment import layout as L
from .client import Client, _live_clients


def client_for(name: str, instance: int) -> Client:
    """An open client of service `name` in this process, for handles unpickled here
    (handles.py, ``_restore``): one made here already if any, else one connected now and
    kept for the process's later handles. ShmwheelError if the running service is another
    instance than `instance` (the handle's timer is not in it)."""
    pid = os.getpid()
    for c in list(_live_clients):
        mine = not c._closed and not c._forked and c._pid == pid
        if mine and c.name == name and c._instance == instance:
            return c
    client = connect(name)
    if client._instance != instance:
        client.close()
        raise ShmwheelError(
            f"a handle of service {name!r} arrived from another instance of it (stopped "
            f"and started again since): its timer is not in the running service"
        )
    _kept.append(client)
    return client


_kept: list[Client] = []  # the clients client_for connected (open until the process exits)


def connect(name: str) -> Client:
    """Attach to the running service `name` (same user) and claim a producer ring."""
    L.check_architecture()
    mem = L.ServiceMemory.attach(name)
    try:
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
        return Client(mem, ring)
    except BaseException:
        mem.close()
        raise
