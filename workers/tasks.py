"""The sample tasks now live in the package, ``shmwheel.examples.tasks`` (importable after
``pip install`` from any directory); this name stays for the repository's tests and older
commands (``workers.tasks:append_line`` resolves to the same function)."""

from shmwheel.examples.tasks import *  # noqa: F403
