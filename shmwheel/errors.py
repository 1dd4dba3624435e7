"""The exceptions shmwheel raises at its API boundary."""


class ShmwheelError(Exception):
    """Base class of shmwheel's own errors."""


class Full(ShmwheelError):
    """No room for another timer: cancel some, or create the timer with a larger capacity."""


class LayoutError(ShmwheelError):
    """A wheel array or segment whose header does not match this code's layout."""
