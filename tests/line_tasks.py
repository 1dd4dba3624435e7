"""A task for tests/test_user_messages.py: print many lines, each in several writes."""

from __future__ import annotations

import sys


def chatter(payload: dict[str, int | str]) -> None:
    """Print payload["lines"] lines tagged payload["tag"], each as three writes."""
    tag, lines = payload["tag"], int(payload["lines"])
    for i in range(lines):
        print(f"<{tag}", i, "x" * 100 + ">")  # print writes parts and the newline apart
        sys.stderr.write(f"<{tag} ")
        sys.stderr.write(f"{i} err>\n")
