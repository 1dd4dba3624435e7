"""Entry point of every service process: ``main([_, ROLE, SERVICE, INDEX])`` with ROLE one
of coordinator, reaper, executor, or ``main([_, "job", POOL, INDEX, MAX_BYTES, MAIN, TASKS,
RESULTS, WAKE, SLOT])``, a job worker (jobs/worker.py ``main``: its pool passes the four
descriptors). The supervisor starts one process through ``python -c``
after ignoring SIGINT and SIGTERM (so neither a Ctrl-C nor a group's SIGTERM kills a
process that is still importing; process.py then catches SIGTERM), the fork server,
``main([_, "zygote", SERVICE, FD, *FLAGS])`` (zygote.py), which forks every role
already imported and returns into this function in each; by hand,
``python -m shmwheel.service.processes.main ROLE SERVICE [INDEX]``.

Each process logs through ``logging.getLogger("shmwheel.<role>")``. Unless the
environment variable ``SHMWHEEL_LOG_LEVEL`` says otherwise (the supervisor passes its own
``shmwheel`` logger's level), records of level INFO and above go to stderr with the
service name, role and pid in front. An executor's stdout and stderr write whole lines
(``lines.LineWriter``), so that executors printing at once never mix inside a line.
"""

from __future__ import annotations

import os
import signal
import sys


def _configure_logging(role: str, service: str) -> None:
    import logging  # here: a job pool's own zygote never needs it

    level = os.environ.get("SHMWHEEL_LOG_LEVEL", "INFO")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s shmwheel[{service}] {role} {os.getpid()} %(levelname)s: %(message)s"
        )
    )
    root = logging.getLogger("shmwheel")
    root.addHandler(handler)
    root.setLevel(level if level.isdigit() is False else int(level))
    root.propagate = False


def main(argv: list[str]) -> None:
    if len(argv) >= 4 and argv[1] == "zygote":
        from .zygote import finish, serve

        # returns in each role the zygote forks, with that role's argv
        role_argv = serve(argv[2], int(argv[3]), argv[4:])
        if role_argv[1] == "executor":  # tasks run here: the interpreter's own exit
            return main(role_argv)  # (finalizers flush what a task left open)
        if role_argv[1] == "job":  # exits as a multiprocessing child does: atexit, flush
            from ..jobs.worker import main as job_main

            finish(lambda: job_main(role_argv))
        finish(lambda: main(role_argv))
    if len(argv) < 3 or argv[1] not in ("coordinator", "reaper", "executor"):
        raise SystemExit(
            "usage: python -m shmwheel.service.processes.main "
            "{coordinator|reaper|executor} SERVICE [INDEX]"
        )
    role, service = argv[1], argv[2]
    index = int(argv[3]) if len(argv) > 3 else 0
    if role == "executor":  # tasks print here: each line reaches the shared fd whole
        from .lines import whole_lines

        whole_lines()
    _configure_logging(role if role != "executor" else f"exec{index}", service)
    if role == "coordinator":
        from .coordinator import main as run
    elif role == "reaper":
        from .reaper import main as run
    else:
        from .executor import main as run
    run(service, index)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # from the first moment: the supervisor
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # decides when service processes stop
    main(sys.argv)
