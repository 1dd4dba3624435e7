"""The exceptions shmwheel raises at its API boundary."""


class ShmwheelError(Exception):
    """Base class of shmwheel's own errors."""


class Full(ShmwheelError):
    """No room for another timer: cancel some, or create the timer with a larger capacity.

    ``accepted`` is None, or, when a ``schedule_many`` batch was cut short because its
    producer ring stayed full, the handles of the part that was accepted (and will run)."""

    accepted: object = None


class LayoutError(ShmwheelError):
    """A wheel array or segment whose header does not match this code's layout."""
