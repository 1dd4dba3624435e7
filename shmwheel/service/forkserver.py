"""The supervisor's side of the fork server ("zygote"; its own side:
service/processes/zygote.py) that starts a service's processes: one process per service,
started once by ``start()``, that imports numpy and the service layer once and then forks
the coordinator, the reaper and the executors, first and on every restart, already
imported (docs/operating.md, "How the processes start"). ``multiprocessing``'s forkserver
is the model: the embedding process is multithreaded, so it is never forked itself; the
zygote is single-threaded when it forks.

The protocol, over a ``SOCK_SEQPACKET`` socket pair (one message per request or report):

* supervisor -> zygote: a JSON request ``{"argv": [ROLE, SERVICE, INDEX?], "env": {...},
  "session": bool, "fd_args": bool}`` with the descriptors the role inherits attached
  (``SCM_RIGHTS``); a role keeps exactly those (with ``fd_args`` their numbers in the
  role's process are appended to its argv, in the order sent), takes ``env`` as its
  environment (the supervisor's as of this start, as a freshly executed process would:
  what a role reads when it starts, such as its log level, follows it; what the zygote's
  imports read is the zygote's), and starts
  its own session when ``session`` is set;
* zygote -> supervisor: ``{"pid": N}`` (or ``{"error": text}``) answering each request in
  order, and ``{"exit": PID, "code": C}`` when a child exits (a ``Popen`` return code).

A job pool (jobs/manager.py) forks its workers the same way, role ``job``: from its
service's zygote, or, for an ``Executor`` without a service, from a zygote of its own that
imports only the job worker's module (``jobs_only``: no numpy, no service role), so that
it starts in a few tens of ms.

The zygote exits when its socket reaches end of file (the supervisor closed it, or died)
or its parent changes (the embedding process died while a process forked from it keeps the
socket open). It never kills its children: they exit by the service's own rules
(``process.ServiceProcess.running``: once the zygote is gone their parent has changed, so
a dead owner makes them orphans).

Every role is a child of the zygote, not of the supervisor: ``RoleProcess`` stands in for
the ``subprocess.Popen`` the supervisor used to hold (``pid``, ``poll``, ``wait``,
``kill``), its return code reported by the zygote, its liveness also known through a
pidfd should the zygote itself die.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

LIVENESS_S = 0.05  # how often the zygote checks that its parent is alive
MAX_FDS = 16  # descriptors one request may pass
MAX_REQUEST = 1 << 20  # bytes of one request (its environment)
# what the zygote runs: SIGINT ignored before anything is imported (a Ctrl-C meant for
# the embedding program must not kill a service process), -P: nothing in front of
# sys.path (the path is PYTHONPATH, tasks.service_path). One "-Pc" keeps the code at
# argv[2] and "shmwheel.service.processes.main" in it, where tools look for service
# processes. The collector is off while the zygote imports (zygote.serve turns it on
# again): its 48 passes over the growing heap took 10-25 ms of the start (measured with
# gc.callbacks), for a few hundred cyclic objects, which now stay, frozen with the rest.
CODE = (
    "import gc; gc.disable(); import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); import sys; "
    "from shmwheel.service.processes.main import main; main(sys.argv)"
)
# library thread pools the roles do not use (issue 33): one thread unless the embedding
# environment asks for more
ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# one fork request: the role's argv, its environment, the descriptors it inherits
Request = tuple[Sequence[str], Mapping[str, str], Sequence[int]]


def zygote_env(path: Sequence[str], log_level: str) -> dict[str, str]:
    """The environment of the zygote, hence of every role it forks."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path)
    env.setdefault("SHMWHEEL_LOG_LEVEL", log_level)
    for name in ONE_THREAD:
        env.setdefault(name, "1")
    return env


def readable(fds: Sequence[int], timeout: float) -> bool:
    """Whether any of `fds` is readable (or closed) within `timeout` seconds: poll(2), not
    select(2), which refuses descriptors above 1023 (an embedding server may have more)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


class ForkServerError(RuntimeError):
    """The zygote is gone or refused a request (the supervisor turns it into a
    ShmwheelError naming the service)."""


class ForkServer:
    """One zygote process and its socket; thread-safe (the monitor thread restarts roles
    while ``stop()`` or ``stats()`` may poll them)."""

    def __init__(
        self,
        service: str,
        env: Mapping[str, str],
        journal: bool = False,
        jobs: bool = False,
        jobs_only: bool = False,
    ) -> None:
        """Start the zygote of `service`: it imports the roles (and with `journal` the
        journal's modules, with `jobs` the job worker's), or with `jobs_only` only the job
        worker's module (an Executor's own pool)."""
        import subprocess  # here: the zygote, which imports this module, never needs it

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-Pc", CODE, "zygote", service, str(theirs.fileno())]
        wants = (("journal", journal), ("jobs", jobs), ("jobs_only", jobs_only))
        flags = [flag for flag, on in wants if on]
        try:
            self.proc = subprocess.Popen(
                argv + flags,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock = mine
        self.exits: dict[int, int] = {}  # pid -> return code, reported not yet collected
        self.dead = False  # end of file seen: the zygote exited
        self._lock = threading.RLock()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], fds: Sequence[int] = (),
              session: bool = False, timeout: float = 60.0,
              fd_args: bool = False) -> RoleProcess:  # fmt: skip
        """Fork a role running ``main(["", *argv])`` (with `fd_args`, its descriptors'
        numbers appended) with environment `env`; waits for its pid (the first request
        also waits for the zygote's imports)."""
        got = self.spawn_all([(argv, env, fds)], timeout, session, fd_args)[0]
        if isinstance(got, ForkServerError):
            raise got
        return got

    def spawn_all(self, requests: Sequence[Request],
                  timeout: float = 60.0, session: bool = False,
                  fd_args: bool = False) -> list[RoleProcess | ForkServerError]:  # fmt: skip
        """``spawn`` each of `requests` (argv, env, fds), every request sent before the
        first answer is read, so that the zygote forks them back to back as soon as its
        imports are done; a request it could not answer gets its ForkServerError."""
        with self._lock:
            sent, failed = 0, ForkServerError("the zygote has exited")
            for argv, env, fds in requests:
                if self.dead:
                    break
                request = {"argv": list(argv), "env": dict(env), "session": session,
                           "fd_args": fd_args}  # fmt: skip
                try:
                    socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
                except OSError as e:
                    self.dead, failed = True, ForkServerError(f"the zygote is gone ({e})")
                    break
                sent += 1
            deadline = time.monotonic() + timeout
            out: list[RoleProcess | ForkServerError]
            out = [self._answer(deadline, timeout) for _ in range(sent)]
            return out + [failed] * (len(requests) - sent)

    def _answer(self, deadline: float, timeout: float) -> RoleProcess | ForkServerError:
        """The zygote's answer to the oldest request not yet answered."""
        while True:
            msg = self._receive(max(0.0, deadline - time.monotonic()))
            if msg is None:
                return ForkServerError(
                    f"the zygote exited with code {self._exit_code()} (see stderr)"
                    if self.dead
                    else f"the zygote did not answer within {timeout} s"
                )
            if "pid" in msg:
                return RoleProcess(self, int(msg["pid"]))
            if "error" in msg:
                return ForkServerError(str(msg["error"]))

    def _exit_code(self) -> int | None:
        """The zygote's exit code, once its socket has closed (None if it is still
        exiting a second later)."""
        import subprocess

        try:
            return self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            return None

    def _receive(self, timeout: float | None) -> dict[str, Any] | None:
        """One message (exit reports are filed on the way), None at end of file or when
        `timeout` passes. Caller holds the lock."""
        if self.dead:
            return None
        if timeout is not None and not readable([self.sock.fileno()], timeout):
            return None
        try:
            data = self.sock.recv(4096)
        except OSError:
            data = b""
        if not data:
            self.dead = True
            return None
        msg = json.loads(data)
        if "exit" in msg:
            self.exits[int(msg["exit"])] = int(msg["code"])
        return msg  # type: ignore[no-any-return]

    def drain(self) -> None:
        """File every exit report already sent."""
        with self._lock:
            while self._receive(0.0) is not None:
                pass

    def wait(self, timeout: float, wake_fd: int) -> None:
        """Sleep until the zygote reports something, `wake_fd` is readable, or `timeout`
        passes (the monitor thread's wait: a role's exit wakes it at once)."""
        readable([wake_fd] if self.dead else [self.sock.fileno(), wake_fd], timeout)

    def close(self, timeout: float) -> None:
        """End the zygote (its roles have exited or are left to their own rules)."""
        import subprocess

        with self._lock:
            self.dead = True
            self.sock.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def fork_roles(live: Callable[[], ForkServer], requests: Sequence[Request], timeout: float,
               fd_args: bool = False) -> list[RoleProcess | ForkServerError]:  # fmt: skip
    """``spawn_all`` from ``live()`` (the owner's zygote, a new one started if the last is
    known dead); what a zygote that died left unanswered goes once more to a new one (the
    supervisor's roles, a job pool's workers)."""
    server = live()
    out = server.spawn_all(requests, timeout, fd_args=fd_args)
    redo = [i for i, got in enumerate(out) if isinstance(got, ForkServerError)]
    if redo and server.dead:
        import logging  # here: a zygote, which imports this module, never needs it

        logging.getLogger("shmwheel").warning("a zygote exited (%s); starting a new one",
                                              out[redo[0]])  # fmt: skip
        again = live().spawn_all([requests[i] for i in redo], timeout, fd_args=fd_args)
        for i, got in zip(redo, again, strict=True):
            out[i] = got
    return out


def fork_role(
    live: Callable[[], ForkServer],
    argv: list[str],
    env: Mapping[str, str],
    fds: Sequence[int],
    timeout: float,
    fd_args: bool = False,
) -> RoleProcess:
    """One role (``fork_roles``); its ForkServerError raised."""
    got = fork_roles(live, [(argv, env, fds)], timeout, fd_args)[0]
    if isinstance(got, ForkServerError):
        raise got
    return got


class RoleProcess:
    """A role forked by the zygote: the part of ``subprocess.Popen`` the supervisor, the
    watchdog and the tools use. ``returncode`` is the zygote's report, or -1 when the
    zygote died before it could report (the process is gone, its code unknown)."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None
        # a pid the zygote has already reaped (reported on the socket, after the pid)
        # cannot be opened; reused within that instant it could, which is not guarded
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # already reaped: its report is on the socket
            self._pidfd = -1

    @property
    def pidfd(self) -> int:
        """A descriptor readable once the process has exited (poll/select), -1 if it had
        been reaped before this object was made (then ``poll()`` has its report)."""
        return self._pidfd

    def __repr__(self) -> str:
        return f"RoleProcess(pid={self.pid}, returncode={self.returncode})"

    def poll(self) -> int | None:
        if self.returncode is None:
            server = self.server
            server.drain()
            code = server.exits.pop(self.pid, None)
            if code is None and server.dead and self._gone(0.0):
                server.drain()
                code = server.exits.pop(self.pid, -1)
            if code is not None:
                self.returncode = code
        return self.returncode

    def _gone(self, timeout: float) -> bool:
        # the pidfd is closed only with this object (__del__): no thread polls a closed one
        return self._pidfd < 0 or readable([self._pidfd], timeout)

    def wait(self, timeout: float | None = None) -> int:
        """The return code once the process has exited; subprocess.TimeoutExpired after
        `timeout` seconds."""
        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                import subprocess  # the supervisor's side only

                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            step = LIVENESS_S if left is None else min(LIVENESS_S, left)
            server = self.server
            if server.dead:
                self._gone(step)
            else:
                readable([server.sock.fileno()], step)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self._pidfd >= 0:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        if getattr(self, "_pidfd", -1) >= 0:
            os.close(self._pidfd)
