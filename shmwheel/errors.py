"""The exceptions shmwheel raises at its API boundary: every public error is defined here
and importable from ``shmwheel`` (an older import path,
``shmwheel.journal.JournalInUse``, is the same class)."""


class ShmwheelError(Exception):
    """Base class of shmwheel's own errors."""


class Full(ShmwheelError):
    """No room for another timer: cancel some, or create the timer with a larger capacity.

    ``accepted`` is None, or, when a ``schedule_many`` batch was cut short because its
    producer ring stayed full, the handles of the part that was accepted (and will run)."""

    accepted: object = None


class LayoutError(ShmwheelError):
    """A wheel array or segment whose header does not match this code's layout."""


class SharedMemoryFull(ShmwheelError):
    """/dev/shm has no room for a service's shared memory. ``start()`` reserves every byte
    of its segment, and each semaphore's page, when it makes them (``posix_fallocate``),
    so a full /dev/shm is this error at ``start()``, naming the bytes needed and the bytes
    /dev/shm has free, and never a SIGBUS later; nothing of the failed start is left
    behind. ``needed`` and ``free`` are those byte counts."""

    def __init__(self, message: str, needed: int, free: int) -> None:
        super().__init__(message)
        self.needed, self.free = needed, free


class JournalError(ShmwheelError):
    """The journal cannot keep new timers durable now (its disk is full, read-only or
    failing): ``schedule``, ``schedule_many`` and ``watch`` refuse until writes succeed
    again. Timers already accepted still run, exactly once and never early."""


class JournalInUse(ShmwheelError):
    """``start()`` (or ``shmwheel journal repair``) found the journal directory claimed:
    another live service, or a salvage, is writing it (the message names which)."""


class RecoveryError(ShmwheelError):
    """``start()`` refuses a journal it cannot recover into this service: damaged or
    incomplete segments (``TimerService(journal_on_damage="salvage")`` or ``shmwheel
    journal repair`` recovers what the intact records prove), or a configuration that
    cannot hold what the journal has pending."""


class UntrustedPath(ShmwheelError):
    """A path shmwheel would read, write or delete is not safe to use: it belongs to another
    user, group or others can write it, or it is not the kind of file expected (a
    journal directory, its ``LOCK`` or a segment file at ``start()``, salvage, ``shmwheel
    journal check`` / ``repair``). Nothing in it was read, re-armed or deleted. ``path``,
    ``uid`` (its owner) and ``mode`` (its permission bits) say what was found; the message
    names the owner by user name too (docs/operating.md, "Trust")."""

    def __init__(self, message: str, *, path: str, uid: int, mode: int) -> None:
        super().__init__(message)
        self.path, self.uid, self.mode = path, uid, mode

    def __reduce__(self) -> tuple[object, ...]:
        """Pickles with its fields."""
        return (_untrusted_path, (str(self), self.path, self.uid, self.mode))


def _untrusted_path(message: str, path: str, uid: int, mode: int) -> UntrustedPath:
    return UntrustedPath(message, path=path, uid=uid, mode=mode)


class RemoteTraceback(Exception):
    """The formatted traceback of a task that raised in an executor process, as the
    ``__cause__`` of its ``TaskError`` (as ``ProcessPoolExecutor`` chains its
    ``_RemoteTraceback``): printing the TaskError's traceback shows it."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


class TaskError(ShmwheelError):
    """The task of a timer or operation raised in its executor: what ``exception()``
    returns for the outcome ``"error"`` (and for an operation whose ``on_complete`` /
    ``on_expire`` task raised). ``result()`` still returns the outcome string.

    ``type_name`` (``"ValueError"``, or ``"module.Class"`` outside the builtins),
    ``message`` (``str()`` of the exception) and ``traceback`` (its formatted traceback,
    ending with the ``Type: message`` line, also the text of ``__cause__``, a
    ``RemoteTraceback``) are as the executor recorded them, cut to at most 256, 1,024 and
    4,032 bytes together (the traceback keeps its end). ``id`` is the timer's, ``run`` the
    run that raised (1 for a one-shot timer), ``task`` the task's name. When the record is
    no longer known (each executor keeps its last 64 failures), ``type_name``,
    ``message`` and ``traceback`` are None and ``str()`` says why; never another run's or
    another timer's."""

    def __init__(
        self,
        text: str,
        *,
        id: int,
        run: int | None = None,
        task: str | None = None,
        type_name: str | None = None,
        message: str | None = None,
        traceback: str | None = None,
    ) -> None:
        super().__init__(text)
        self.id, self.run, self.task = id, run, task
        self.type_name, self.message, self.traceback = type_name, message, traceback
        if traceback is not None:
            self.__cause__ = RemoteTraceback(traceback)

    def __reduce__(self) -> tuple[object, ...]:
        """Pickles with its fields (sent back from a pool worker, say); the cause is
        rebuilt from the traceback text."""
        fields = {
            "id": self.id,
            "run": self.run,
            "task": self.task,
            "type_name": self.type_name,
            "message": self.message,
            "traceback": self.traceback,
        }
        extra = {k: v for k, v in self.__dict__.items() if k not in fields and k != "__cause__"}
        return (_task_error, (type(self), str(self), fields, extra))


def _task_error(
    cls: type[TaskError], text: str, fields: dict[str, object], extra: dict[str, object]
) -> TaskError:
    error = cls(text, **fields)  # type: ignore[arg-type]
    error.__dict__.update(extra)
    return error


class JobTimeout(TaskError):
    """A job's attempt passed its time limit and was stopped (``Job.result()`` raises it
    for the last attempt; inside the job it is raised at the limit, the soft stop).

    Deliberately **not** a ``TimeoutError``: that is what a caller's own wait raises
    (``result(timeout=...)``), so ``except TimeoutError`` never hides a job that overran.
    ``limit`` is the attempt's time limit in seconds; ``killed`` is True when the job did
    not end at the soft stop and its worker was killed after the grace."""

    limit: float | None = None
    killed: bool = False
