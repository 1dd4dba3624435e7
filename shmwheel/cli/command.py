"""How each command declares its parser: the options every command shares (``common``),
its one-line help, its description filled to 70 columns and its epilog kept as written
(the examples)."""

from __future__ import annotations

import argparse
from textwrap import fill
from typing import Any


def add_command(
    sub: Any,
    name: str,
    common: argparse.ArgumentParser,
    help: str,
    description: str,
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """Add the command `name` to the subparsers `sub` and return its parser."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        parents=[common],
        help=help,
        description=fill(description),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser
