"""The coordinator's reclaim of a client that is gone (slots_repair.c, slot_reclaim): what
it journals names the client by its pid, as every record of a client's ring does."""

from __future__ import annotations

import msgpack
import numpy as np
from local_segment import QuietClient, local_memory, small_config

from shmwheel import _native as N
from shmwheel.journal import format as F
from shmwheel.segment import contract as C
from shmwheel.segment import layout as L


def journaled(buf: N.JournalBuffer) -> list[dict]:
    """The records of a journal buffer (frames: length, CRC, msgpack body)."""
    data, out = bytes(memoryview(buf)), []
    while data:
        size = int.from_bytes(data[:4], "little")
        out.append(F.as_dict(msgpack.unpackb(data[F.FRAME_BYTES : F.FRAME_BYTES + size])))
        data = data[F.FRAME_BYTES + size :]
    return out


def test_the_reclaim_of_a_dead_reset_journals_its_clients_pid():
    """A client died holding a reset: the coordinator's reclaim puts the timer back and
    journals it (SCHEDULED, flag reset) with the dead client's pid as its producer, the
    ring table's RT_PID (docs/journal.md), not its ring's index."""
    mem = local_memory("reclaim-pid", small_config(max_clients=3), clients=0)
    ring, pid = 2, 424242
    mem.ring_table[ring, L.RT_STATE] = L.RING_CLAIMED
    mem.ring_table[ring, L.RT_PID] = pid
    c = QuietClient(mem, ring)
    tables = mem.bind_tables()
    buf = N.JournalBuffer()
    try:
        t0 = int(mem.wheel[C.H_NOW])
        h = c.schedule("record", None, deadline_ms=t0 + 3)
        recs = np.empty((8, C.PRODUCER_RECORD), np.int64)
        _, n = mem.producer[ring].peek(recs)
        with mem.locked():
            tables.link_records(recs, n, ring, np.zeros(C.LINK_RESULT_WORDS, np.int64))
        mem.producer[ring].consume(n)
        code, _held = tables._reset_hold(h.id, t0 + 2, ring)  # and its process dies
        assert code == C.RESET_WON
        tables.set_journal(buf)
        with mem.locked():
            tables.reclaim(ring, int(mem.ring_table[ring, L.RT_PID]))
        tables.set_journal(None)
        (rec,) = [r for r in journaled(buf) if r["kind"] == "scheduled"]
        assert (rec["id"], rec["deadline_ms"], rec["producer"]) == (h.id, t0 + 2, pid)
        assert rec["flags"] & F.FLAG_RESET
    finally:
        c._release()
        c._closed = True
        mem.close()
