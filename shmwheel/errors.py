"""The exceptions shmwheel raises at its API boundary: every public error is defined here
and importable from ``shmwheel`` (older import paths, ``shmwheel.journal.JournalInUse``
and ``shmwheel.journal.recovery.RecoveryError``, are the same classes)."""


class ShmwheelError(Exception):
    """Base class of shmwheel's own errors."""


class Full(ShmwheelError):
    """No room for another timer: cancel some, or create the timer with a larger capacity.

    ``accepted`` is None, or, when a ``schedule_many`` batch was cut short because its
    producer ring stayed full, the handles of the part that was accepted (and will run)."""

    accepted: object = None


class LayoutError(ShmwheelError):
    """A wheel array or segment whose header does not match this code's layout."""


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
