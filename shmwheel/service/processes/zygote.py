"""The zygote's side of the fork server (the protocol and the supervisor's side:
service/forkserver.py): its loop, which forks each role already imported, and how a forked
coordinator or reaper exits. Run by ``main.main([_, "zygote", SERVICE, FD, *FLAGS])``
(FLAGS: forkserver.ForkServer's "journal", "jobs", "jobs_only");
imported by nothing else, so the role modules it imports are no import of the supervisor's.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ..forkserver import LIVENESS_S, MAX_FDS, MAX_REQUEST
from .lines import exit_now

PR_SET_NAME = 15  # <linux/prctl.h>
# a name is at most 15 bytes: shmwheel-ROLE (an executor's and a job worker's with its index)
SHORT = {"coordinator": "coord", "executor": "exec"}


def serve(service: str, fd: int, flags: Sequence[str]) -> list[str]:
    """The zygote's loop (module doc). Returns only in a forked child: the argv of its role
    for ``main.main``; the zygote itself exits from here. `flags`: "journal" (the service
    has one: its modules are imported here too, as the roles import them only then),
    "jobs" (it has job workers: their module too), "jobs_only" (an Executor's own pool:
    the job worker's module and nothing of the service's roles)."""
    if "jobs_only" not in flags:
        from . import coordinator, executor, lines, process, reaper  # noqa: F401  once
    if "journal" in flags:
        from ...journal.write import retention, writer  # noqa: F401
    if "jobs" in flags or "jobs_only" in flags:
        from ..jobs import worker  # noqa: F401

    # what every role shares stays out of the collector's (and copy-on-write's) way; no
    # collection first: the imports leave no garbage cycles (measured: 0), and it costs
    # 5-9 ms of the start. The collector, off during the imports (forkserver.CODE), is on
    # again for the zygote and every role it forks.
    gc.freeze()
    gc.enable()
    _set_name("zygote")
    parent = os.getppid()
    sock = socket.socket(fileno=fd)
    children: dict[int, int] = {}  # pidfd -> pid
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while True:
        events = poller.poll(LIVENESS_S * 1000)
        if os.getppid() != parent:
            os._exit(0)
        for ready, _ in events:
            if ready == sock.fileno():
                argv = _request(sock, children, poller)
                if argv is not None:
                    return argv
            else:
                _reap(sock, children.pop(ready), ready, poller)


def finish(run: Callable[[], object]) -> NoReturn:
    """Run a forked role to its end and exit as the interpreter would (non-daemon threads
    joined, atexit handlers run, exit code from SystemExit, a traceback and 1 for an
    exception, stdio flushed), less the interpreter's finalization: the role's heap is
    shared copy-on-write with the zygote, and tearing every object down would copy it all
    (40-90 ms per process, measured, on a stop())."""
    code = 0
    try:
        run()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            sys.stderr.write(f"{e.code}\n")
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        for name, module in (("_shutdown", threading), ("_run_exitfuncs", atexit)):
            getattr(module, name)()
    finally:
        exit_now(code)


def _request(
    sock: socket.socket, children: dict[int, int], poller: select.poll
) -> list[str] | None:
    try:
        data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, MAX_FDS)
    except OSError:
        data, fds = b"", []
    if not data:
        os._exit(0)  # the supervisor is gone or closed us
    try:
        req = json.loads(data)
        pid = os.fork()
    except Exception as e:  # a bad request or no fork: the supervisor raises it
        _send(sock, {"error": f"cannot start {data[:80]!r}: {e}"})
        for f in fds:
            os.close(f)
        return None
    if pid == 0:  # the role: keep the passed descriptors, none of the zygote's
        sock.close()
        for pidfd in children:
            os.close(pidfd)
        if req.get("session"):
            os.setsid()
        os.environ.clear()
        os.environ.update(req["env"])
        argv = req["argv"] + ([str(f) for f in fds] if req.get("fd_args") else [])
        numbered = argv[0] in ("executor", "job")
        _set_name(SHORT.get(argv[0], argv[0]) + (argv[2] if numbered else ""))
        return ["", *argv]
    for f in fds:
        os.close(f)
    pidfd = os.pidfd_open(pid)
    children[pidfd] = pid
    poller.register(pidfd, select.POLLIN)
    _send(sock, {"pid": pid})
    return None


def _set_name(role: str) -> None:
    """The process's name (``/proc/PID/comm``: ``ps -o comm``, top, psutil's name()):
    ``shmwheel-ROLE``, since every forked role shows its zygote's command line. ctypes is
    imported by numpy already (not by a jobs_only zygote: a few ms there)."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, f"shmwheel-{role}"[:15].encode(), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the name stays python's
        pass


def _reap(sock: socket.socket, pid: int, pidfd: int, poller: select.poll) -> None:
    poller.unregister(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        os._exit(0)  # the supervisor is gone
