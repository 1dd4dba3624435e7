"""Load producer for a shmwheel service, using only the public client API.

Schedules ``count`` timers at a target rate with random delays and payloads of a chosen
size, cancels a fraction of them, and reports what happened::

    python -m shmwheel.examples.producer --standalone --count 20000 --cancel-fraction 0.1
    python -m shmwheel.examples.producer --service NAME --rate 5000 --count 100000 \
        --delay-ms 50,500

``--standalone`` starts its own ``TimerService`` (tasks ``noop``, ``log``, ``fail`` from
``shmwheel.examples.tasks``), waits (bounded) until every timer has fired or been
cancelled, prints the service's ``stats()`` and stops it. ``--service NAME`` attaches to
a running service with ``shmwheel.connect(NAME)`` and prints only the producer's own
figures. It runs from
any directory once shmwheel is installed.

``run(client, ...)`` is the same load as a function, for use from other programs.

The load lives in ``producer_load`` (``run``, ``wait_settled``) and the command line in
``producer_cli`` (``main``, ``parser``); this module gathers them under its old name.
"""

from __future__ import annotations

import sys

from .producer_cli import STANDALONE_TASKS, main, parser
from .producer_load import (
    FULL_BACKOFF_S,
    MAX_PAYLOAD,
    SLICE_S,
    check_args,
    make_delays,
    make_payload,
    run,
    wait_settled,
)

__all__ = [
    "FULL_BACKOFF_S",
    "MAX_PAYLOAD",
    "SLICE_S",
    "STANDALONE_TASKS",
    "check_args",
    "main",
    "make_delays",
    "make_payload",
    "parser",
    "run",
    "wait_settled",
]

if __name__ == "__main__":
    sys.exit(main())
