"""A job worker process: runs the jobs its pool sends, one at a time, in order, and sends
each outcome back before it starts the next.

Runs in its own process, role ``job`` (``main`` here, from service/processes/main.py), forked by a
zygote (service/processes/zygote.py: its service's, or its Executor's own), never in the caller's
process. It imports only the functions its jobs name (pickled by reference), from the
embedding process's path less ``''`` (tasks.service_path), never the embedding program's
main module, except on demand: a job whose function (or an argument's class) lives in
``__main__`` has the main script loaded here once, as module ``__shmwheel_main__`` (so its
``if __name__ == "__main__":`` block does not run), or its module imported by name for
``python -m``; a program without a file (``python -``, ``-c``) has no main module to load,
and such a job fails with a clear error.

Ground rules (the pool relies on each):

* **One outcome frame per job, written before the next job starts.** A worker that dies
  can have finished only jobs whose frames are already in its result pipe; the pool
  reads those to the end, so the job it was running is the first one without a frame,
  and every job after it never started.
* **``slot`` says what runs.** Word ``RUNNING`` holds the job's id from just before the
  job starts until its frame is written (-1 otherwise); ``STOP`` holds the id of a job
  the pool wants stopped. Only this process writes ``RUNNING``, only the pool ``STOP``.
* **The time limit is this process's interval timer** (``ITIMER_REAL``, armed at the
  attempt's start): at the limit the kernel sends SIGALRM, whose handler raises
  ``JobTimeout`` inside the job (the soft stop: its ``finally`` blocks run). The C-level
  signal handler also writes the signal's number to the wake-up pipe at once, even while
  the job is stuck in C code, so the pool learns of it and arms the hard stop (kill after
  the grace) in its wheel. SIGUSR1 is the pool's stop request (``Job.stop()``), handled
  the same way. Both handlers raise only while a job's function is on the stack
  (``_armed``).
"""

from __future__ import annotations

import importlib
import io
import mmap
import os
import pickle
import signal
import sys
import traceback
from types import ModuleType
from typing import Any

from ...errors import JobTimeout

RUNNING, STOP, SLOT_WORDS = 0, 1, 2
NO_ARGS = b""  # a job's arguments when it has none
MAX_FNS = 1024  # functions a worker keeps resolved

# outcome kinds of a frame: (id, kind, value)
OK, RAISED, TIMED_OUT, STOPPED, REFUSED = 0, 1, 2, 3, 4

MAX_TEXT = 4032  # a traceback is cut to its last MAX_TEXT characters
MAIN_ALIAS = "__shmwheel_main__"  # the embedding program's main script, loaded in a worker


class SoftStop(JobTimeout):
    """What the job sees at its time limit: a ``JobTimeout``, raised by the SIGALRM
    handler (this subclass tells it apart from a JobTimeout the job raised itself)."""


class StopRequested(BaseException):
    """Raised inside a job that ``Job.stop()`` stops. A BaseException, so that a job's
    ``except Exception`` does not swallow it (its ``finally`` blocks still run)."""


_armed = False  # True only while a job's function is on the stack
_limit = 0.0


def _on_alarm(_signum: int, _frame: Any) -> None:
    if _armed:
        raise SoftStop(f"the job passed its time limit of {_limit:g} s", id=-1)


def _on_stop(_signum: int, _frame: Any) -> None:
    if _armed:
        raise StopRequested()


def _error_info(e: BaseException) -> tuple[str, str, str, bytes | None]:
    """(type name, message, traceback text, the pickled exception or None)."""
    cls = type(e)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    text = "".join(traceback.format_exception(e))[-MAX_TEXT:]
    blob: bytes | None = None
    try:
        pickled = pickle.dumps(e)
        pickle.loads(pickled)  # an exception that pickles but cannot be rebuilt: as text
        blob = pickled
    except Exception:
        pass
    return name, str(e)[:1024], text, blob


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], limit: float) -> tuple[int, Any]:
    """Run one job; its (kind, value). A soft stop that lands after the function returned
    but before it was disarmed counts as the stop (the attempt did reach its limit)."""
    global _armed, _limit
    try:
        try:
            if limit > 0:
                _limit = limit
                signal.setitimer(signal.ITIMER_REAL, limit)
            _armed = True
            value = fn(*args, **kwargs)
            _armed = False
            return OK, value
        except BaseException as e:
            _armed = False
            return _classify(e)
    except BaseException as e:  # the stop's handler ran between the job's end and _armed
        _armed = False
        return _classify(e)
    finally:
        if limit > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _classify(e: BaseException) -> tuple[int, Any]:
    if isinstance(e, StopRequested):
        return STOPPED, None
    if isinstance(e, SoftStop):
        return TIMED_OUT, "".join(traceback.format_exception(e))[-MAX_TEXT:]
    return RAISED, _error_info(e)


_tasks: dict[str, Any] = {}


def run_task(spec: str, blob: bytes) -> Any:
    """A registered task as a job (``Client.submit``): ``fn(payload)``, the function
    resolved from the service's registry (never from the client), the payload msgpack."""
    fn = _tasks.get(spec)
    if fn is None:
        from ..tasks import resolve

        fn = _tasks[spec] = resolve(spec)
    import msgpack

    return fn(msgpack.unpackb(blob, raw=False))


class Slot:
    """The words a worker shares with its pool (RUNNING, STOP), in a memfd: memory that no
    full /dev/shm can take away, reserved whole when it is made (never a SIGBUS), passed to
    the worker as a descriptor when the worker is started."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is None:
            fd = os.memfd_create("shmwheel-job-slot", os.MFD_CLOEXEC)
            try:
                os.posix_fallocate(fd, 0, mmap.PAGESIZE)
            except BaseException:
                os.close(fd)
                raise
        self.fd = fd
        self._map = mmap.mmap(fd, mmap.PAGESIZE)
        self.words = memoryview(self._map).cast("q")

    def __getitem__(self, i: int) -> int:
        return int(self.words[i])

    def __setitem__(self, i: int, value: int) -> None:
        self.words[i] = value

    def close(self) -> None:
        self.words.release()
        self._map.close()
        os.close(self.fd)


def main_spec() -> str:
    """In the pool's process: where a worker finds the embedding program's ``__main__``:
    "file:PATH", "module:NAME" (``python -m``), or "-" (none: ``python -``, ``-c``, a
    REPL). A main script's classes come back from workers as ``__shmwheel_main__``'s,
    which this process then knows as its ``__main__``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":
        return f"module:{spec.name}"
    path = getattr(main, "__file__", None)
    if main is not None and isinstance(path, str) and os.path.isfile(path):
        sys.modules.setdefault(MAIN_ALIAS, main)
        return f"file:{os.path.abspath(path)}"
    return "-"


_main_spec = "-"
_main: ModuleType | None = None
_loading_main = False


def loading_main() -> bool:
    """True while this worker runs the embedding program's main script (to find a job's
    function): a pool started then would start workers without end (manager.py refuses)."""
    return _loading_main


def _main_module() -> ModuleType:
    """The embedding program's main module, loaded here once (the module doc)."""
    global _main, _loading_main
    if _main is not None:
        return _main
    kind, _, where = _main_spec.partition(":")
    if kind not in ("file", "module"):
        raise ModuleNotFoundError(
            "the job's function (or an argument) is defined in the main module of a program "
            "that has no file (python -, python -c, a REPL): a job worker cannot import it; "
            "define it in a module on the path"
        )
    _loading_main = True
    try:
        if kind == "module":
            module = importlib.import_module(where)
        else:
            from importlib.util import module_from_spec, spec_from_file_location

            spec = spec_from_file_location(MAIN_ALIAS, where)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load the main script {where}")
            module = module_from_spec(spec)
            sys.modules[MAIN_ALIAS] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[MAIN_ALIAS]
                raise
    finally:
        _loading_main = False
    _main = module
    return module


class _MainUnpickler(pickle.Unpickler):
    """Unpickles what names ``__main__``: from the embedding program's main module."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__":
            module = _main_module().__name__
        return super().find_class(module, name)


def _loads(blob: bytes) -> Any:
    if b"__main__" in blob:
        return _MainUnpickler(io.BytesIO(blob)).load()
    return pickle.loads(blob)


def main(argv: list[str]) -> None:
    """The job role: ``["", "job", POOL, INDEX, MAX_BYTES, MAIN, TASKS, RESULTS, WAKE,
    SLOT]`` (service/processes/main.py), the last four descriptors this process inherited: the
    read end of its tasks pipe, the write ends of its result and wake-up pipes, its slot's
    memfd. MAIN is ``main_spec()`` of the pool's process."""
    global _main_spec
    _main_spec = argv[5]
    tasks, results, wake, slot = fds = [int(x) for x in argv[6:10]]
    for fd in fds:  # a job's own children do not hold its pipes open
        os.set_inheritable(fd, False)
    serve(tasks, results, wake, Slot(slot), int(argv[4]))


# The frames on the pipes are multiprocessing.Connection's (its send_bytes / recv_bytes, and
# workers.py's read_frames): a 4-byte big-endian signed length, or -1 and an 8-byte one.
# Written here on the raw descriptors, so that a worker need not import multiprocessing.
BIG = 0x7FFFFFFF


def _read(fd: int, n: int) -> bytes:
    """Exactly `n` bytes of `fd`; EOFError at its end."""
    chunks, left = [], n
    while left:
        data = os.read(fd, left)
        if not data:
            raise EOFError
        chunks.append(data)
        left -= len(data)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def recv_frame(fd: int) -> bytes:
    n = int.from_bytes(_read(fd, 4), "big", signed=True)
    if n == -1:
        n = int.from_bytes(_read(fd, 8), "big")
    return _read(fd, n)


def send_frame(fd: int, data: bytes) -> None:
    n = len(data)
    if n < 4092:  # one write, whole: a pipe writes up to PIPE_BUF (4096) bytes at once
        os.write(fd, n.to_bytes(4, "big") + data)
        return
    head = n.to_bytes(4, "big") if n < BIG else b"\xff\xff\xff\xff" + n.to_bytes(8, "big")
    view = memoryview(head + data if n < 65536 else head)
    while view:
        view = view[os.write(fd, view) :]
    if n >= 65536:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def serve(tasks: int, results: int, wake: int, slot: Slot, max_bytes: int) -> None:
    """The worker's loop: until the pool closes its end of `tasks` (descriptors: the read
    end of the tasks pipe, the write ends of the result and wake-up pipes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when a worker ends
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGUSR1, _on_stop)
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
    words = slot.words  # the slot's words, written directly: once per job each
    words[RUNNING] = -1
    loads, dumps = _loads, pickle.dumps
    fns: dict[bytes, Any] = {}  # pickled function -> the function, as imported here
    while True:
        try:
            batch = pickle.loads(recv_frame(tasks))
        except EOFError:
            return
        for job_id, limit, fn_blob, blob in batch:
            words[RUNNING] = job_id
            if words[STOP] == job_id:
                kind, value = STOPPED, None
            else:
                try:
                    fn = fns.get(fn_blob)
                    if fn is None:
                        if len(fns) > MAX_FNS:
                            fns.clear()
                        fn = fns[fn_blob] = loads(fn_blob)
                    args, kwargs = loads(blob) if blob else ((), {})
                except BaseException as e:
                    kind, value = RAISED, _error_info(e)
                else:
                    kind, value = _call(fn, args, kwargs, limit)
            try:
                frame = dumps((job_id, kind, value))
            except Exception as e:
                frame = dumps((job_id, REFUSED, f"its result cannot be pickled: {e!r}"))
            if len(frame) > max_bytes:
                frame = dumps(
                    (
                        job_id,
                        REFUSED,
                        f"its result of {len(frame)} bytes is over the bound of "
                        f"{max_bytes} bytes (Executor(max_message_bytes=...))",
                    )
                )
            try:
                send_frame(results, frame)
            except BrokenPipeError:
                return  # the pool is gone
            words[RUNNING] = -1
