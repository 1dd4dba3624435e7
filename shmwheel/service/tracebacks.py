"""A failed task's exception, from its executor to the handles that ask: the executor
side (``record``: the texts, cut to the record's limits, written by shmwheel/native/errlog.c
before the outcome "error" is published) and the client side (``task_error``: the
``TaskError`` that ``exception()`` returns, read when the outcome reaches the client).

The records live in the segment's "errors" region (errlog.h, "task error records"): a
log per executor that keeps its last ``RECORDS`` failures. A client looks for the newest
whole record of the handle's id in every log; one that is gone, damaged, or (for a
repeating timer) perhaps not the last run's, gives a TaskError without texts whose message
says which, never another timer's or another run's record.
"""

from __future__ import annotations

import concurrent.futures
import logging
import traceback

from .. import _native as N
from ..errors import TaskError
from ..segment import layout as L
from ..wheel import constants as K

log = logging.getLogger("shmwheel.executor")

RECORDS = K.ERR_RECORDS  # failures kept per executor
TYPE_MAX, MESSAGE_MAX, TEXT_MAX = K.ER_TYPE_MAX, K.ER_MESSAGE_MAX, K.ER_TEXT_BYTES


class Outcome(concurrent.futures.Future[str]):
    """A handle's internal future: its outcome string and, for a task that raised, the
    TaskError read when the outcome arrived (before the future is resolved)."""

    task_error: TaskError | None = None


# -- the executor's side ----------------------------------------------------------------
def type_name(exc: BaseException) -> str:
    """``ValueError`` for a builtin, ``module.Qual.Name`` for any other exception type."""
    t = type(exc)
    mod = getattr(t, "__module__", None)
    return t.__qualname__ if mod in (None, "builtins") else f"{mod}.{t.__qualname__}"


def _head(text: str, limit: int) -> bytes:
    """`text` as UTF-8 in at most `limit` bytes: cut at the end, with a mark."""
    b = text.encode("utf-8", "backslashreplace")
    if len(b) <= limit:
        return b
    mark = f" [... {len(b)} bytes, cut]".encode()
    return b[: limit - len(mark)].decode("utf-8", "ignore").encode() + mark


def _tail(text: str, limit: int) -> bytes:
    """`text` as UTF-8 in at most `limit` bytes: cut at the start (a traceback's end, the
    innermost frames and the exception line, is what matters), with a mark."""
    b = text.encode("utf-8", "backslashreplace")
    if len(b) <= limit:
        return b
    mark = f"[... a traceback of {len(b)} bytes, its start cut ...]\n".encode()
    return mark + b[len(b) - (limit - len(mark)) :].decode("utf-8", "ignore").encode()


def texts(exc: BaseException) -> tuple[bytes, bytes, bytes]:
    """(type name, message, traceback) of `exc` as the record keeps them: UTF-8, each
    within its limit (TYPE_MAX, MESSAGE_MAX, and TEXT_MAX for the three)."""
    try:
        message = str(exc)
    except Exception as e:  # a broken __str__ must not lose the record
        message = f"<str() of the exception raised {type(e).__name__}>"
    try:
        tb = "".join(traceback.format_exception(exc))
    except Exception as e:
        tb = f"<the traceback could not be formatted: {type(e).__name__}>\n"
    t = _head(type_name(exc), TYPE_MAX)
    m = _head(message, MESSAGE_MAX)
    return t, m, _tail(tb, TEXT_MAX - len(t) - len(m))


def record(
    mem: L.ServiceMemory,
    index: int,
    handle: int,
    task: int,
    exc: BaseException,
    run: int,
    flags: int,
) -> None:
    """Executor `index` writes the error record of `handle`'s run `run` (called before the
    outcome is published). A failure here is logged, never raised: the outcome goes on."""
    try:
        N.errlog_write(mem.errors, index, handle, run, task, flags, *texts(exc))
    except Exception:
        log.exception("the error record of timer %#x could not be written", handle)


# -- the client's side ------------------------------------------------------------------
def task_error(mem: L.ServiceMemory, h: int) -> TaskError:
    """The TaskError of handle `h`, whose outcome says its task raised: from its record if
    one is found whole, else one that says why not."""
    try:
        found = N.errlog_find(mem.errors, h)
    except Exception as e:  # the client closed under us
        return TaskError(
            f"timer {h:#x}'s task raised; its error record could not be read: {e}", id=h
        )
    verdict, x, k = found[:3]
    if verdict == K.ERRLOG_FOUND:
        run, tid, _, t, m, tb = found[3:]
        names = mem.task_names
        task = names[tid] if 0 <= tid < len(names) else None
        type_s, msg_s = t.decode("utf-8", "replace"), m.decode("utf-8", "replace")
        return TaskError(
            f"{type_s}: {msg_s} (task {task!r}, timer {h:#x}, run {run})",
            id=h,
            run=run,
            task=task,
            type_name=type_s,
            message=msg_s,
            traceback=tb.decode("utf-8", "replace"),
        )
    lost = f"timer {h:#x}'s task raised, but its exception is no longer known: "
    see = " (the executor's log has the traceback)"
    if verdict == K.ERRLOG_DAMAGED:
        why = (
            f"the error record naming it (executor {x}, record {k}) does not check out: its "
            f"lengths or checksum are wrong, so the region was written by something else"
        )
    elif verdict == K.ERRLOG_STALE:
        why = (
            f"it is a repeating timer, the newest record of it left is run {found[3]}'s, "
            f"and records of later failures have been overwritten since (each executor "
            f"keeps its last {RECORDS}), so that may not be the run that ended it"
        )
    else:
        why = (
            f"each executor keeps the records of its last {RECORDS} failed tasks, and "
            f"later failures overwrote this one before this process read it"
        )
    return TaskError(lost + why + see, id=h)
