"""Whole-line output for executor processes.

Every executor inherits the embedding process's stdout and stderr, so several processes
write to one pipe or terminal. Python's own streams may split a line across several
``write`` calls (``print`` writes the text, then the newline; with PYTHONUNBUFFERED=1
each reaches the descriptor at once), and two executors printing at the same time then
interleave in the middle of a line. ``LineWriter`` holds text until it ends a line and
hands every complete line (or run of lines) to the descriptor in one ``os.write``; a pipe
or a terminal takes a write of up to PIPE_BUF (4096) bytes whole, and an O_APPEND file
any size.
"""

from __future__ import annotations

import io
import os
import sys
from typing import NoReturn

MAX_HELD = 1 << 16  # a line longer than this is written in parts


class LineWriter(io.TextIOBase):
    """A text stream over file descriptor `fd` that writes whole lines, each batch of
    complete lines with one ``os.write``. An unfinished line is held until its newline,
    ``close()`` or MAX_HELD characters; ``flush()`` writes only complete lines."""

    def __init__(self, fd: int, encoding: str = "utf-8", errors: str = "backslashreplace") -> None:
        super().__init__()
        self._fd = fd
        self._encoding = encoding
        self._errors = errors
        self._held = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    @property
    def errors(self) -> str:  # type: ignore[override]
        return self._errors

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        """Hold `text`; write what now ends in a newline."""
        self._held += text
        cut = self._held.rfind("\n") + 1
        if cut == 0 and len(self._held) >= MAX_HELD:
            cut = len(self._held)
        if cut:
            out, self._held = self._held[:cut], self._held[cut:]
            self._write_all(out.encode(self._encoding, self._errors))
        return len(text)

    def flush(self) -> None:
        """Nothing to do: complete lines are written at once, a partial one waits."""

    def close(self) -> None:
        if not self.closed and self._held:
            held, self._held = self._held, ""
            self._write_all(held.encode(self._encoding, self._errors))
        super().close()

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._fd, view)
            except InterruptedError:
                continue
            except OSError:  # a closed pipe or a full disk: output is lost, not the task
                return
            view = view[n:]


def whole_lines() -> None:
    """Replace sys.stdout and sys.stderr (when they are real descriptors) by LineWriters;
    the original objects stay in sys.__stdout__ / sys.__stderr__."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        stream.flush()
        setattr(sys, name, LineWriter(fd, getattr(stream, "encoding", None) or "utf-8"))


def exit_now(code: int) -> NoReturn:
    """End this process with `code` at once (``os._exit``), its standard streams flushed
    first (whole lines: LineWriter): no interpreter teardown (a forked role's heap is
    shared copy-on-write with its zygote), no waiting for what a task left behind."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
