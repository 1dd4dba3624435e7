"""``shmwheel run``: a TimerService in the foreground until SIGTERM or SIGINT.

The process is the service's supervisor (the embedding process of docs/operating.md):
it starts the coordinator, the reaper and the executors, restarts whichever dies, and on
SIGTERM, SIGINT or SIGHUP stops them all and unlinks every name it created, then exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
import tomllib
from pathlib import Path
from types import FrameType
from typing import Any

from .command import add_command
from .observe import CommandError, Refused, service_name

log = logging.getLogger("shmwheel.cli")

EPILOG = """\
examples:
  shmwheel run --tasks expire=myapp.tasks:expire
  shmwheel run --name orders --capacity 100000 --executors 4 \\
      --tasks expire=myapp.tasks:expire retry=myapp.tasks:retry
  shmwheel run --config orders.toml --log-level DEBUG
  shmwheel run --name orders --journal /var/lib/shmwheel/orders --tasks ...
  shmwheel run --name orders --metrics-port 9464 --tasks ...   # Prometheus /metrics

  then, from any process of the same user:  shmwheel.connect("orders")

a config file (TOML) holds the same options, and more of TimerService's; flags override it,
--tasks adds to (or replaces by name) its [tasks] table; a relative journal path is taken
from the config file's directory:

  name = "orders"
  capacity = 100000
  executors = 4
  journal = "journal"            # journal_fsync, journal_on_damage, ... too
  log_level = "INFO"
  [tasks]
  expire = "myapp.tasks:expire"

task modules are imported from PYTHONPATH and the current directory, unless another user
can write it (e.g. /tmp): then not, with a warning (docs/operating.md, "Trust").
The first line on stdout names the service; logs go to stderr.
Exit status: 0 after a clean stop, 1 if the service cannot start, 2 for bad arguments.
"""

# option -> accepted types (TimerService checks the values themselves)
OPTIONS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "capacity": (int,),
    "executors": (int,),
    "journal": (str,),
    "log_level": (str,),
    "tasks": (dict,),
    "tick_ms": (int,),
    "wheel_size": (int,),
    "max_clients": (int,),
    "ring_capacity": (int,),
    "dispatch_capacity": (int,),
    "arena_bytes": (int,),
    "journal_fsync": (str,),
    "journal_fsync_ms": (int,),
    "journal_segment_bytes": (int,),
    "journal_keep_hours": (int, float),
    "journal_jobs_bytes": (int,),
    "journal_on_damage": (str,),
}
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def task_arg(text: str) -> tuple[str, str]:
    """argparse type for ``NAME=module:function``."""
    name, eq, spec = text.partition("=")
    module, colon, func = spec.partition(":")
    if not (eq and name and colon and module and func):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=module:function")
    return name, spec


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``run`` subcommand to `sub`."""
    p = add_command(
        sub,
        "run",
        common,
        help="run a service in the foreground",
        description=(
            "Start a timer service and keep it running until SIGTERM "
            "or SIGINT (Ctrl-C), then stop it cleanly: no process and no shared "
            "memory is left behind."
        ),
        epilog=EPILOG,
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        action="extend",
        type=task_arg,
        default=[],
        metavar="NAME=module:function",
        help="tasks executors may run, by name",
    )
    p.add_argument("--name", type=service_name, help="service name (default: s<pid>-<hex>)")
    p.add_argument("--capacity", type=int, help="timer slots (default 1,000,000)")
    p.add_argument("--executors", type=int, help="executor processes (default nproc - 1)")
    p.add_argument("--journal", metavar="DIR", help="journal directory (docs/journal.md)")
    p.add_argument(
        "--journal-on-damage",
        choices=("refuse", "salvage"),
        help="a damaged journal: refuse to start (the default; `shmwheel journal repair`), "
        "or salvage what its intact records prove and move the damaged segments to "
        "DIR/damaged/",
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML file of options")
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long stopping may take before processes are killed (default 10)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics while the service runs "
        "(0: a free port, logged); needs prometheus_client (pip install 'shmwheel[metrics]')",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the IPv4 address --metrics-port listens on (default 127.0.0.1)",
    )
    p.set_defaults(execute=execute, default_log_level="INFO")


def load_config(path: Path) -> dict[str, Any]:
    """The options in a TOML config file, checked by name and type (CommandError, exit 2)."""
    try:
        with path.open("rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise CommandError(f"cannot read config {path}: {e.strerror or e}", 2) from None
    except tomllib.TOMLDecodeError as e:
        raise CommandError(f"config {path} is not valid TOML: {e}", 2) from None
    config: dict[str, Any] = {}
    for key, value in raw.items():
        option = key.replace("-", "_")
        types = OPTIONS.get(option)
        if types is None:
            raise CommandError(
                f"config {path}: unknown option {key!r} (known: {', '.join(sorted(OPTIONS))})", 2
            )
        if isinstance(value, bool) or not isinstance(value, types):
            raise CommandError(
                f"config {path}: {key} must be a "
                f"{' or '.join(t.__name__ for t in types)}, got {value!r}",
                2,
            )
        config[option] = value
    tasks = config.get("tasks", {})
    for name, spec in tasks.items():
        if not isinstance(spec, str) or ":" not in spec:
            raise CommandError(
                f'config {path}: tasks.{name} must be "module:function", got {spec!r}', 2
            )
    if "name" in config:
        try:
            service_name(config["name"])
        except argparse.ArgumentTypeError as e:
            raise CommandError(f"config {path}: {e}", 2) from None
    if "journal" in config:
        config["journal"] = str((path.parent / config["journal"]).absolute())
    return config


def options(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """TimerService's keyword arguments from the config file and the flags (flags win),
    and the log level either of them asked for (None: the default)."""
    config = load_config(args.config) if args.config is not None else {}
    tasks = dict(config.pop("tasks", {}))
    tasks.update(args.tasks)
    if not tasks:
        raise CommandError(
            "no tasks: give --tasks NAME=module:function ... or a [tasks] table in --config", 2
        )
    for flag in ("name", "capacity", "executors", "journal", "journal_on_damage"):
        value = getattr(args, flag)
        if value is not None:
            config[flag] = value
    file_level = config.pop("log_level", None)
    level = args.log_level or file_level
    if level is not None and level.upper() not in LEVELS:
        raise CommandError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}", 2)
    config["tasks"] = tasks
    return config, None if level is None else level.upper()


class _Stopper:
    """Signal handlers that ask the service to stop. The first signal sets a flag (the
    main loop polls it: nothing is raised inside the library); a second one during
    start() raises KeyboardInterrupt, which start() cleans up after."""

    def __init__(self) -> None:
        self.signum = 0
        self.starting = False
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        for s in STOP_SIGNALS:
            self._old[s] = signal.signal(s, self._handle)

    def restore(self) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum and self.starting:
            raise KeyboardInterrupt
        if self.signum:
            log.warning("%s again: already stopping", signal.Signals(signum).name)
        self.signum = self.signum or signum


def _search_cwd() -> None:
    """Put the working directory on the path (task modules from it, like `python -m`),
    unless another user can write it: the service processes, maybe root's, would import
    what that user put there."""
    cwd = os.getcwd()
    if cwd in sys.path or "" in sys.path:
        return
    from ..segment import trust

    if trust.judge(cwd, os.stat(cwd), trust.DIRECTORY, root_ok=True) is None:
        sys.path.insert(0, cwd)
        return
    log.warning(
        "not importing task modules from the working directory %s: other users can "
        "write it; put their directory on PYTHONPATH if they are there",
        cwd,
    )


def execute(args: argparse.Namespace) -> int:
    """Run the service until a stop signal; 0 after a clean stop."""
    from .. import TimerService

    opts, level = options(args)
    if level is not None:
        logging.getLogger().setLevel(level)  # main() restores it after the command
        os.environ["SHMWHEEL_LOG_LEVEL"] = level  # the service processes log at it too
    _search_cwd()
    name = opts.pop("name", None)
    try:
        svc = TimerService(name, **opts)
    except (ValueError, TypeError) as e:
        raise CommandError(str(e), 2) from None
    metrics = _serve_metrics(svc, args.metrics_host, args.metrics_port)
    try:
        return _run(svc, args.stop_timeout)
    finally:
        if metrics is not None:
            metrics.close()


def _serve_metrics(svc: Any, host: str, port: int | None) -> Any:
    """The metrics server of --metrics-port (None without it); bound before the service
    starts, so a port in use or a missing prometheus_client starts nothing (exit 1)."""
    if port is None:
        return None
    if not 0 <= port <= 65535:
        raise CommandError(f"--metrics-port must be 0 to 65535, got {port}", 2)
    try:
        from ..metrics import serve
    except ImportError as e:
        raise CommandError(str(e)) from None
    try:
        server = serve(svc, host, port)
    except OSError as e:
        raise CommandError(f"cannot serve metrics on {host}:{port}: {e}") from None
    log.info("service %s: Prometheus metrics on %s", svc.name, server.url)
    return server


def _run(svc: Any, stop_timeout: float) -> int:
    """Start `svc` and serve it until a stop signal; 0 after a clean stop."""
    from ..errors import ShmwheelError

    stopper = _Stopper()
    stopper.install()
    try:
        stopper.starting = True
        try:
            svc.start()
        except KeyboardInterrupt:  # start() stopped what it had started; stop() covers
            svc.stop(stop_timeout)  # a signal that came just after it returned
            log.warning("interrupted while starting: service %s was not started", svc.name)
            return 128 + (stopper.signum or signal.SIGINT)
        except (ShmwheelError, OSError) as e:  # a refusal (a journal or name in use, a
            # path not safe or not permitted, a damaged journal, no room): one line, exit 2
            raise Refused(f"cannot start service {svc.name}: {e}") from None
        except RuntimeError as e:  # its processes did not come up
            raise CommandError(f"cannot start service {svc.name}: {e}") from None
        finally:
            stopper.starting = False
        try:
            _serve(svc, stopper, stop_timeout)
        finally:
            svc.stop(stop_timeout)  # idempotent: a no-op after _serve's own stop
    finally:
        stopper.restore()
    return 0


def _serve(svc: Any, stopper: _Stopper, stop_timeout: float) -> None:
    cfg = svc.config
    print(f"service {svc.name} running; connect with shmwheel.connect({svc.name!r})", flush=True)
    log.info(
        "service %s started: capacity %d, %d executors, tasks %s%s",
        svc.name,
        cfg.capacity,
        cfg.executors,
        ", ".join(f"{n}={s}" for n, s in cfg.tasks),
        f", journal {svc.journal.directory}" if svc.journal else "",
    )
    rec = svc.recovery
    if rec.get("recovered") or rec.get("salvaged"):
        log.info(
            "service %s: re-armed %d timers from its journal (%d salvaged from a dead "
            "service's memory)",
            svc.name,
            rec.get("recovered", 0),
            rec.get("salvaged", 0),
        )
    while not stopper.signum:
        time.sleep(0.1)
    try:
        st = svc.stats()
    except Exception:  # the figures are only for the log line: stop regardless
        log.exception("service %s: cannot read its figures", svc.name)
        st = dict.fromkeys(("scheduled", "completed", "task_errors", "pending"), -1)
    log.info(
        "%s: stopping service %s (%d scheduled, %d completed, %d task errors; %d pending %s)",
        signal.Signals(stopper.signum).name,
        svc.name,
        st["scheduled"],
        st["completed"],
        st["task_errors"],
        st["pending"],
        "kept in the journal" if svc.journal else "dropped",
    )
    svc.stop(stop_timeout)
    log.info("service %s stopped", svc.name)
