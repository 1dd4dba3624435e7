"""How an outcome reaches a client that waits for it: the futures side of ``TimerHandle``
and ``Operation``.

Nothing here runs until a client first asks about an outcome (``done()``, ``result()``,
``add_done_callback()``, ``await``): a client that never asks pays nothing, and its
schedule path is untouched. Waiting for a handle claims an entry for it in the service's
waiter table (shmwheel/native/waiters.c; the design is purgatory.c's): the process that
frees the slot writes the outcome into that entry and pushes (handle, outcome code) on
this client's outcome ring, ringing its bell, a futex word in the ring's header. One
listener thread per client sleeps on that bell (no polling of the service), resolves an
``Outcome`` (a ``concurrent.futures.Future`` that may carry a ``TaskError``: service/tracebacks.py)
per handle asked about and empties its entry; ``add_done_callback`` and ``await``
(``asyncio.wait_for`` / ``wrap_future``) build on that future. An outcome that reached an
entry is never lost: if the ring was full, the listener finds it in the entry when it
rechecks (at once after a drop, and every RECHECK_S in any case). A table with no room
for a handle (both of its buckets full) refuses the ask with ``Full``: nothing waits then.

A handle asked about after its use ended learns the outcome from the freed slot (its
payload word keeps it until the slot is reserved again), or "no longer known".
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ... import _native as N
from ...errors import Full, ShmwheelError
from ...segment import contract as C
from ...segment import layout as L
from ...segment.ring import Ring
from .. import tracebacks
from ..tracebacks import Outcome

log = logging.getLogger("shmwheel.outcomes")

RECHECK_S = 1.0  # the listener's sleep between rechecks of every waiter
# the header's W_STOPPING word once every service process has ended (supervisor/supervisor.py,
# _teardown; 1 while they are asked to end): what is undecided then is "stopped"
STOPPED = 2
_TASK_OUTCOMES = {
    C.OUTCOME_OK: "ok",
    C.OUTCOME_ERROR: "error",
    C.OUTCOME_CRASHED: "crashed",
    C.OC_CANCELLED: "cancelled",
}


def describe(code: int, operation: bool) -> str:
    """The string ``result()`` returns for an outcome code (contract.h's OC_*)."""
    if code & C.OC_COMPLETED:
        return "completed"
    if code & C.OC_EXPIRED:
        return "expired"
    if operation and code & C.OC_TASK_MASK != C.OC_CANCELLED:
        return "expired"  # cannot happen: an operation's code carries its kind
    return _TASK_OUTCOMES.get(code & C.OC_TASK_MASK, f"unknown outcome {code}")


def mark_stopped(mem: L.ServiceMemory) -> None:
    """Every service process has ended (supervisor/supervisor.py, _teardown): mark the header
    (W_STOPPING = STOPPED) and ring every client's outcome bell, so the handles still
    undecided become "stopped" at once in every client that waits."""
    mem.header[L.W_STOPPING] = STOPPED
    for ring in mem.outq:
        try:
            N.outq_ring(ring.words)
        except Exception:  # that client rechecks within RECHECK_S
            log.debug("outcome bell not rung", exc_info=True)


class _Waiter:
    """One handle this client waits for: its future, its kind, its waiter-table entry."""

    __slots__ = ("future", "operation", "entry")

    def __init__(self, future: Outcome, operation: bool) -> None:
        self.future, self.operation = future, operation
        self.entry = -1  # known once outcome_watch returns


class Outcomes:
    """One client's waiters: a future per handle asked about, resolved by the listener."""

    def __init__(self, mem: L.ServiceMemory, ring: int) -> None:
        self._mem = mem
        self._ring = ring
        self._words = mem.outq[ring].words
        self._lock = threading.Lock()
        self._waiting: dict[int, _Waiter] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self._buf = np.empty((256, C.OUTQ_RECORD), np.int64)
        self._dropped = int(self._words[C.OUTQ_DROPPED])

    # -- asking -----------------------------------------------------------------------
    def state(self, h: int) -> tuple[int, int]:
        """(state word, outcome word) of h: its slot's state word, and its outcome if it
        ended and is known (from its entry if this client waits for it), else 0."""
        w = self._waiting.get(h)
        gs, out = self._tables().outcome_state(h, -1 if w is None else w.entry)
        return int(gs), int(out)

    def known(self, h: int, operation: bool) -> str | None:
        """The outcome of h if it is decided now, else None (still to come)."""
        stopped = self._stopped()  # before the words: if set, the words are final
        gs, out = self.state(h)
        return self._decided(h, gs, out, operation, stopped)

    def settle(self, h: int) -> None:
        """Resolve h's future now if the words say it is decided (its notification may
        still be on the way to the listener)."""
        stopped = self._stopped()
        gs, out = self.state(h)
        self._settle_if_decided(h, gs, out, stopped)

    def _stopped(self) -> bool:
        return int(self._mem.header[L.W_STOPPING]) == STOPPED

    def future(self, h: int, operation: bool) -> Outcome:
        """The future of handle h's outcome (one per handle in this client). Full when the
        waiter table has no room for h (it is not decided yet, and nothing waits)."""
        with self._lock:
            if self._closed:
                raise ShmwheelError("this client is closed; its handles cannot wait")
            entry = self._waiting.get(h)
            if entry is not None:
                return entry.future
            fut = Outcome()
            waiter = self._waiting[h] = _Waiter(fut, operation)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._listen, name=f"shmwheel-outcomes-{self._ring}", daemon=True
                )
                self._thread.start()
        stopped = self._stopped()
        gs, out, e = self._tables().outcome_watch(h, self._ring)  # from now on we are told
        with self._lock:
            mine = self._waiting.get(h) is waiter
            if mine and e >= 0:
                waiter.entry = e
        if e >= 0 and not mine:  # decided meanwhile (the listener was told first)
            self._tables().waiter_release(h, e)
        if self._settle_if_decided(h, gs, out, stopped) or e != -2:
            return fut
        with self._lock:  # live, and no room to wait for it: nothing waits
            if self._waiting.get(h) is waiter:
                del self._waiting[h]
        if fut.done():
            return fut
        raise self._full(h)

    def _full(self, h: int) -> Full:
        cfg = self._mem.config
        return Full(
            f"cannot wait for {h:#x}: the waiter table of service {self._mem.service!r} has no "
            f"room for it (about {cfg.waiter_capacity} handles awaited at once across its "
            f"clients; this one's buckets are full). Wait for fewer handles at once, or start "
            f"the service with a larger waiter_capacity"
        )

    # -- the listener -----------------------------------------------------------------
    def _listen(self) -> None:
        """Sleep on the bell; resolve what the ring brings; recheck every waiter from its
        entry and its slot after a drop, when the service stopped, and every RECHECK_S
        (a use ended without an outcome, a reclaimed client's timer, is only found so)."""
        ring = self._mem.outq[self._ring]
        last = time.monotonic()
        while not self._closed:
            try:
                more = N.outq_wait(self._words, RECHECK_S)
                if self._closed:
                    return
                got = self._drain(ring)
                dropped = int(self._words[C.OUTQ_DROPPED])
                now = time.monotonic()
                if (
                    dropped != self._dropped
                    or not (more or got)
                    or self._stopped()
                    or (now - last >= RECHECK_S)
                ):
                    self._dropped, last = dropped, now
                    self._recheck()
            except Exception:
                if self._closed:  # the views went away under us: the client is closing
                    return
                log.exception("outcome listener of ring %d", self._ring)
                threading.Event().wait(RECHECK_S)

    def _drain(self, ring: Ring) -> int:
        total = 0
        while True:
            _, n = ring.peek(self._buf)
            if n < 0:  # a corrupt head: skip to it, and recheck everyone
                ring.consume(0)
                self._recheck()
                return total
            if n == 0:
                return total
            handles = self._buf[:n, C.OQ_HANDLE].tolist()
            codes = self._buf[:n, C.OQ_CODE].tolist()
            ring.consume(n)
            total += n
            for h, code in zip(handles, codes, strict=True):
                self._resolve(h, code)

    def _recheck(self) -> None:
        with self._lock:
            handles = list(self._waiting)
        stopped = self._stopped()
        for h in handles:
            gs, out = self.state(h)
            self._settle_if_decided(h, gs, out, stopped)

    # -- deciding ---------------------------------------------------------------------
    def _decided(
        self, h: int, gs: int, out: int, operation: bool, stopped: bool = False
    ) -> str | None:
        """The outcome the words give h; None if undecided, "" if gone. `stopped` (read
        before the words): the service's processes have all ended, so what is undecided now
        stays so in this run: "stopped" (a journal re-arms it at the next start)."""
        gen = C.handle_gen(h)
        if C.gs_gen(gs) == gen:
            if C.gs_state(gs) == C.ST_CANCELLED:
                return "cancelled"  # won by a cancel: it never runs
            return "stopped" if stopped else None
        if out and C.out_gen(out) == gen and C.out_code(out) != C.OC_NONE:
            return describe(C.out_code(out), operation)
        return ""  # ended without an outcome, or its slot was reserved again: not known

    def _settle_if_decided(self, h: int, gs: int, out: int, stopped: bool = False) -> bool:
        """Resolve h's future if the words decide it; whether they did."""
        with self._lock:
            entry = self._waiting.get(h)
        if entry is None:
            return False
        what = self._decided(h, gs, out, entry.operation, stopped)
        if what is None:
            return False
        if what == "":
            self._fail(h)
        else:  # the code, if the outcome is this use's (a task that raised: its error)
            self._finish(h, what, C.out_code(out) if C.out_gen(out) == C.handle_gen(h) else 0)
        return True

    def _resolve(self, h: int, code: int) -> None:
        with self._lock:
            entry = self._waiting.get(h)
        if entry is not None:
            self._finish(h, describe(code, entry.operation), code)

    def _pop(self, h: int) -> Outcome | None:
        """Stop waiting for h: its future if it was still to be resolved (its entry is
        emptied; one thread wins)."""
        with self._lock:
            waiter = self._waiting.pop(h, None)
        if waiter is None:
            return None
        if waiter.entry >= 0:
            self._tables().waiter_release(h, waiter.entry)
        return None if waiter.future.done() else waiter.future

    def _finish(self, h: int, what: str, code: int = 0) -> None:
        fut = self._pop(h)
        if fut is not None:
            if code & C.OC_TASK_MASK == C.OUTCOME_ERROR:  # read before anyone is woken
                fut.task_error = tracebacks.task_error(self._mem, h)
            fut.set_result(what)

    def _fail(self, h: int) -> None:
        fut = self._pop(h)
        if fut is not None:
            fut.set_exception(
                ShmwheelError(
                    f"the outcome of {h:#x} is no longer known: it ended before anyone "
                    f"asked, and its slot has been reserved again since (ask with result(), "
                    f"add_done_callback() or await before it ends)"
                )
            )

    def _tables(self) -> N.Tables:
        return self._mem.bind_tables()

    def close(self) -> None:
        """Stop the listener, empty this client's entries and drop the views (before the
        client unmaps the segment); waiters still open get an error."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, {}
            thread = self._thread
        for h, waiter in waiting.items():
            # what the words already decide (a cancel this client won: "cancelled") is
            # still its outcome, whatever the client does next
            gs, out = self._tables().outcome_state(h, waiter.entry)
            what = self._decided(h, int(gs), int(out), waiter.operation)
            if waiter.entry >= 0:
                self._tables().waiter_release(h, waiter.entry)
            if waiter.future.done():
                continue
            if what and C.out_code(int(out)) & C.OC_TASK_MASK != C.OUTCOME_ERROR:
                waiter.future.set_result(what)
            else:
                waiter.future.set_exception(
                    ShmwheelError("the client was closed before the outcome")
                )
        if thread is not None and thread is not threading.current_thread():
            N.outq_ring(self._words)
            thread.join()
