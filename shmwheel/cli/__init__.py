"""The ``shmwheel`` command (also ``python -m shmwheel``): run a service in the foreground,
read its figures once (``status``) or live (``top``), list this user's services (``ls``),
remove what dead ones left (``clean``), and check or repair a journal directory
(``journal check``, ``journal repair``). One module per command: ``run``, ``status``,
``top``, ``segments`` (ls and clean), ``journal``; ``observe`` reads a running service.

Exit status: 0 on success, 1 when a service is not there (or stopped while watched), or a
journal check's verdict is "damaged"; 2 for every refusal: bad arguments, or a service,
path or journal the command will not use (missing, not a directory, not safe, damaged, in
use, not permitted). A refusal is one line on stderr, never a traceback: `_execute` is the
one place a CommandError, ShmwheelError or OSError becomes that line. Diagnostics go to
stderr through ``logging``; a command's own output goes to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from .. import __version__
from . import journal, run, segments, status, top
from .observe import CommandError, Refused

log = logging.getLogger("shmwheel.cli")

EPILOG = """\
examples:
  shmwheel run --name orders --tasks expire=myapp.tasks:expire
  shmwheel status orders
  shmwheel top orders
  shmwheel ls
  shmwheel clean --dry-run
  shmwheel journal check /var/lib/shmwheel/orders

`shmwheel COMMAND --help` tells more; docs/operating.md, "Command line", tells all.
"""

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def one_line(text: str) -> str:
    """`text` with its runs of whitespace (newlines included) made one space."""
    return " ".join(text.split())


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error is one line on stderr (the message, then the
    usage) and exit status 2; its subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} ({usage(self.format_usage)})\n")


def usage(format_usage: Callable[[], str]) -> str:
    """A parser's usage message on one line."""
    return one_line(format_usage())


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = Parser(
        prog="shmwheel",
        description="Run and watch shmwheel timer services.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shmwheel {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        metavar="LEVEL",
        help="logging level on stderr: DEBUG, INFO, WARNING, ERROR "
        "(default INFO for run, clean and journal repair, WARNING otherwise)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (run, status, top, segments, journal):
        module.register(sub, common)
    for command in sub.choices.values():  # a usage error found later prints its usage
        command.set_defaults(usage=command.format_usage)
        _set_error_parser(command)
    return parser


def _set_error_parser(parser: argparse.ArgumentParser) -> None:
    """Record `parser` (and, below it, each nested subcommand's) as the one whose usage an
    unknown argument prints: the innermost parser that parsed wins."""
    parser.set_defaults(error_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for nested in action.choices.values():
                _set_error_parser(nested)


@contextlib.contextmanager
def command_logging(level: str, command: str) -> Iterator[None]:
    """Log records of `level` and above to stderr (``run`` with timestamps) while a command
    runs; afterwards the root logger is as it was. `main()` may be called in-process (an
    embedding program, a test): its handler must not outlive the call, bound to a stderr
    that may be closed by then."""
    fmt = (
        "%(asctime)s %(name)s %(levelname)s: %(message)s"
        if command == "run"
        else f"shmwheel {command}: %(levelname)s: %(message)s"
    )
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    saved = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default sys.argv[1:]), run the command, return its exit status."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # `status NAME --bogus`: the usage of `status`, not of shmwheel
        args.error_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    with command_logging(args.log_level or args.default_log_level, args.command):
        return _execute(args)


def _execute(args: argparse.Namespace) -> int:
    """Run the parsed command. The one place a failure becomes one line on stderr and an
    exit status: a CommandError its own (a usage error's line ends with the usage); a
    ShmwheelError or OSError that no command turned into one is a refusal (2)."""
    from ..errors import ShmwheelError

    try:
        code: int = args.execute(args)
    except CommandError as e:
        line = one_line(str(e))
        if e.status == 2 and not isinstance(e, Refused):  # a usage error, like argparse's
            line = f"{line} ({usage(args.usage)})"
        log.error("%s", line)
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `shmwheel status NAME --json | head`: the reader left
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit's flush does not fail too
        return 1
    except (ShmwheelError, OSError) as e:
        log.error("%s", one_line(_describe(e)))
        return 2
    return code


def _describe(e: BaseException) -> str:
    """An error as its line: an OSError's strerror and file name, another's message."""
    if isinstance(e, OSError) and e.strerror:
        where = f": {e.filename}" if e.filename else ""
        return f"{e.strerror}{where}"
    return str(e) or type(e).__name__


__all__ = ["CommandError", "build_parser", "main"]
