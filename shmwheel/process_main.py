"""Entry point of every service process: ``python -m shmwheel.process_main ROLE SERVICE
[INDEX]`` with ROLE one of coordinator, reaper, executor. (A separate module, so that
running a role never re-imports a module the package has already loaded.)"""

from __future__ import annotations

import signal
import sys


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] not in ("coordinator", "reaper", "executor"):
        raise SystemExit("usage: python -m shmwheel.process_main "
                         "{coordinator|reaper|executor} SERVICE [INDEX]")
    role, service = argv[1], argv[2]
    index = int(argv[3]) if len(argv) > 3 else 0
    if role == "coordinator":
        from .coordinator import main as run
    elif role == "reaper":
        from .reaper import main as run
    else:
        from .executor import main as run
    run(service, index)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # from the first moment: the supervisor
    main(sys.argv)                                # decides when service processes stop
