"""How an outcome reaches a client that waits for it: the futures side of ``TimerHandle``
and ``Operation``.

Nothing here runs until a client first asks about an outcome (``done()``, ``result()``,
``add_done_callback()``, ``await``): a client that never asks pays nothing, and its
schedule path is untouched. Asking about a handle stores the client's ring in the slot's
notify word (shmwheel/native/purgatory.c); the process that frees the slot then pushes
(handle, outcome code) on this client's outcome ring and rings its bell, a futex word in
the ring's header. One listener thread per client sleeps on that bell (no polling of the
service) and resolves a ``concurrent.futures.Future`` per handle asked about;
``add_done_callback`` and ``await`` (``asyncio.wrap_future``) build on that future.

A slot's outcome is also kept in its out word until the slot is used again, which is how a
handle asked about after its end learns the outcome. The listener rechecks its waiters
every RECHECK_S in case a notification went elsewhere (another process asked about the
same handle last: a slot's notify word names one client) or its ring overflowed.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from .. import _native as N
from ..errors import ShmwheelError
from ..segment import contract as C
from ..segment import layout as L
from ..segment.ring import Ring
from . import tracebacks
from .tracebacks import Outcome

log = logging.getLogger("shmwheel.outcomes")

RECHECK_S = 1.0  # the listener's sleep between rechecks of every waiter
# the header's W_STOPPING word once every service process has ended (supervisor.py,
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
    """Every service process has ended (supervisor.py, _teardown): mark the header
    (W_STOPPING = STOPPED) and ring every client's outcome bell, so the handles still
    undecided become "stopped" at once in every client that waits."""
    mem.header[L.W_STOPPING] = STOPPED
    for ring in mem.outq:
        try:
            N.outq_ring(ring.words)
        except Exception:  # that client rechecks within RECHECK_S
            log.debug("outcome bell not rung", exc_info=True)


class Outcomes:
    """One client's waiters: a future per handle asked about, resolved by the listener."""

    def __init__(self, mem: L.ServiceMemory, ring: int) -> None:
        self._mem = mem
        self._ring = ring
        self._words = mem.outq[ring].words
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[Outcome, bool]] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self._buf = np.empty((256, C.OUTQ_RECORD), np.int64)
        self._dropped = int(self._words[C.OUTQ_DROPPED])

    # -- asking -----------------------------------------------------------------------
    def state(self, h: int) -> tuple[int, int]:
        """(state word, out word) of the slot h names, without asking to be told."""
        gs, out = self._tables().outcome_watch(h, -1)
        return int(gs), int(out)

    def known(self, h: int, operation: bool) -> str | None:
        """The outcome of h if it is decided now, else None (still to come)."""
        stopped = self._stopped()  # before the words: if set, the words are final
        gs, out = self.state(h)
        return self._decided(h, gs, out, operation, stopped)

    def settle(self, h: int) -> None:
        """Resolve h's future now if the slot's words say it is decided (its notification
        may still be on the way to the listener)."""
        stopped = self._stopped()
        gs, out = self.state(h)
        self._settle_if_decided(h, gs, out, stopped)

    def _stopped(self) -> bool:
        return int(self._mem.header[L.W_STOPPING]) == STOPPED

    def future(self, h: int, operation: bool) -> Outcome:
        """The future of handle h's outcome (one per handle in this client)."""
        with self._lock:
            if self._closed:
                raise ShmwheelError("this client is closed; its handles cannot wait")
            entry = self._waiting.get(h)
            if entry is not None:
                return entry[0]
            fut = Outcome()
            self._waiting[h] = (fut, operation)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._listen, name=f"shmwheel-outcomes-{self._ring}", daemon=True
                )
                self._thread.start()
        stopped = self._stopped()
        gs, out = self._tables().outcome_watch(h, self._ring)  # from now on we are told
        self._settle_if_decided(h, int(gs), int(out), stopped)
        return fut

    # -- the listener -----------------------------------------------------------------
    def _listen(self) -> None:
        """Sleep on the bell; resolve what the ring brings; every RECHECK_S without news
        (or after a drop) recheck every waiter from the slots' words."""
        ring = self._mem.outq[self._ring]
        while not self._closed:
            try:
                more = N.outq_wait(self._words, RECHECK_S)
                if self._closed:
                    return
                got = self._drain(ring)
                dropped = int(self._words[C.OUTQ_DROPPED])
                if dropped != self._dropped or not (more or got) or self._stopped():
                    self._dropped = dropped
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
        """The outcome the slot's words give h; None if undecided, "" if gone. `stopped`
        (read before the words): the service's processes have all ended, so what is
        undecided now stays so in this run: "stopped" (a journal re-arms it at the next
        start)."""
        gen = C.handle_gen(h)
        if C.gs_gen(gs) == gen:
            if C.gs_state(gs) == C.ST_CANCELLED:
                return "cancelled"  # won by a cancel: it never runs
            return "stopped" if stopped else None
        if C.out_gen(out) == gen:
            return describe(C.out_code(out), operation)
        return ""  # ended, and its slot has been used again since: the outcome is gone

    def _settle_if_decided(self, h: int, gs: int, out: int, stopped: bool = False) -> None:
        with self._lock:
            entry = self._waiting.get(h)
        if entry is None:
            return
        what = self._decided(h, gs, out, entry[1], stopped)
        if what is None:
            return
        if what == "":
            self._fail(h)
        else:  # the code, if the out word is this use's (a task that raised: its error)
            self._finish(h, what, C.out_code(out) if C.out_gen(out) == C.handle_gen(h) else 0)

    def _resolve(self, h: int, code: int) -> None:
        with self._lock:
            entry = self._waiting.get(h)
        if entry is not None:
            self._finish(h, describe(code, entry[1]), code)

    def _finish(self, h: int, what: str, code: int = 0) -> None:
        with self._lock:
            entry = self._waiting.pop(h, None)
        if entry is not None and not entry[0].done():
            if code & C.OC_TASK_MASK == C.OUTCOME_ERROR:  # read before anyone is woken
                entry[0].task_error = tracebacks.task_error(self._mem, h)
            entry[0].set_result(what)

    def _fail(self, h: int) -> None:
        with self._lock:
            entry = self._waiting.pop(h, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(
                ShmwheelError(
                    f"the outcome of {h:#x} is no longer known: it ended before anyone "
                    f"asked, and its slot has been used again since (ask with result(), "
                    f"add_done_callback() or await before it ends)"
                )
            )

    def _tables(self) -> N.Tables:
        return self._mem.bind_tables()

    def close(self) -> None:
        """Stop the listener and drop the views (before the client unmaps the segment);
        waiters still open get an error."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, {}
            thread = self._thread
        for fut, _ in waiting.values():
            if not fut.done():
                fut.set_exception(ShmwheelError("the client was closed before the outcome"))
        if thread is not None and thread is not threading.current_thread():
            N.outq_ring(self._words)
            thread.join()
