"""``shmwheel top NAME``: a live view of a running service, redrawn every second with
rich: rates from successive readings, pending and in flight, lateness percentiles, ring
fill, the health of each process and the job workers' figures. ``q`` (or Ctrl-C) quits."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .command import add_command
from .observe import (
    CommandError,
    ProcessHealth,
    attach,
    fmt_bytes,
    fmt_ms,
    fmt_opt,
    gone_reason,
    job_reader,
    jobs_lines,
    positive_seconds,
    service_name,
    snapshot,
)

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

log = logging.getLogger("shmwheel.cli")

EPILOG = """\
examples:
  shmwheel top orders                  redraw every second; q or Ctrl-C quits
  shmwheel top orders --interval 0.5

rates are per second, from the change between two readings. Ring fill is what each
client's producer ring and each executor's dispatch ring holds, of its capacity.
Exit status: 0 on q or Ctrl-C, 1 when the service is not there or stops meanwhile.
"""

RATES = ("scheduled", "fired", "completed", "cancelled", "task_errors", "crashed")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``top`` subcommand to `sub`."""
    p = add_command(
        sub,
        "top",
        common,
        help="live view of a running service",
        description=(
            "A live terminal view of a running service: rates, "
            "pending, lateness, ring fill and process health."
        ),
        epilog=EPILOG,
    )
    p.add_argument("name", type=service_name, metavar="NAME", help="the service's name")
    p.add_argument(
        "--interval",
        type=positive_seconds,
        default=1.0,
        metavar="SECONDS",
        help="seconds between redraws (default 1)",
    )
    p.set_defaults(execute=execute, default_log_level="WARNING")


@contextlib.contextmanager
def keys() -> Iterator[int | None]:
    """stdin in cbreak mode (keys arrive one at a time, Ctrl-C still interrupts); yields
    its fd, or None when stdin is not a terminal."""
    fd = sys.stdin.fileno() if sys.stdin is not None else -1
    if fd < 0 or not os.isatty(fd):
        yield None
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def wait_for_quit(fd: int | None, seconds: float) -> bool:
    """Wait up to `seconds` for a key; True when it was q."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        if fd is None:
            time.sleep(left)
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            data = os.read(fd, 64)
            if not data or b"q" in data.lower():  # EOF too: nobody can press q any more
                return True


def rates(prev: dict[str, Any] | None, cur: dict[str, Any]) -> dict[str, float | None]:
    """Per-second change of the counters between two readings (None before the second)."""
    if prev is None:
        return {k: None for k in RATES}
    dt = max(1e-6, cur["time"] - prev["time"])
    return {k: (cur[k] - prev[k]) / dt for k in RATES}


def render(st: dict[str, Any], rate: dict[str, float | None], interval: float) -> RenderableType:
    """One screen of the view."""
    from rich import box
    from rich.columns import Columns
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    style: dict[str, Any] = {"box": box.SIMPLE_HEAD, "show_edge": False}
    cfg = st["config"]
    title = Text.assemble(
        ("shmwheel top ", "bold"),
        (st["service"], "bold cyan"),
        f"  supervisor pid {st['owner_pid']}  capacity {cfg['capacity']:,}"
        f"  {cfg['executors']} executors  {st['clients']} clients"
        f"  every {interval:g} s, q quits",
    )
    timers = Table(title="timers", title_justify="left", **style)
    timers.add_column("counter")
    timers.add_column("total", justify="right")
    timers.add_column("per s", justify="right")
    timers.add_row("pending", f"{st['pending']:,}", "")
    timers.add_row("in flight", f"{st['in_flight']:,}", "")
    for k in RATES:
        r = rate[k]
        timers.add_row(k.replace("_", " "), f"{st[k]:,}", "…" if r is None else f"{r:,.1f}")
    late = Table(title="lateness", title_justify="left", **style)
    late.add_column("pct")
    late.add_column("ms", justify="right")
    for k, v in st["lateness_ms"].items():
        late.add_row(k, fmt_ms(v))
    late.add_row("runs", f"{st['lateness_samples']:,}")
    rings = Table(title="ring fill", title_justify="left", **style)
    rings.add_column("ring")
    rings.add_column("pending/capacity", justify="right")
    rings.add_column("fill", justify="right")
    for r in st["rings"]["producer"]:
        rings.add_row(
            f"client #{r['ring']} pid {r['pid']}",
            f"{r['pending']}/{r['capacity']}",
            f"{100 * r['pending'] / r['capacity']:.0f}%",
        )
    for r in st["rings"]["dispatch"]:
        rings.add_row(
            f"dispatch exec{r['executor']}",
            f"{r['pending']}/{r['capacity']}",
            f"{100 * r['pending'] / r['capacity']:.0f}%",
        )
    procs = Table(title="processes", title_justify="left", **style)
    procs.add_column("role", no_wrap=True)
    procs.add_column("pid", justify="right")
    procs.add_column("alive")
    procs.add_column("cpu%", justify="right")
    procs.add_column("rss", justify="right", no_wrap=True)
    procs.add_column("restarts", justify="right")
    for role, p in st["processes"].items():
        procs.add_row(
            role,
            str(p["pid"]),
            "yes" if p["alive"] else "[bold red]NO[/]",
            fmt_opt(p["cpu_percent"], ".1f"),
            fmt_bytes(p["rss_bytes"]),
            fmt_opt(p["restarts"]),
        )
    counts = Table.grid(padding=(0, 3))
    counts.add_row(timers, late)
    # side by side as far as the terminal is wide, else one under the other
    parts: list[RenderableType] = [title, Columns([counts, procs, rings], padding=(1, 3))]
    pool = st.get("jobs")
    if pool:
        parts.append(Text("jobs  " + "\n      ".join(jobs_lines(pool))))
    j = st.get("journal")
    if j:
        parts.append(
            Text(
                f"journal {j['directory']}: {fmt_bytes(j['disk_bytes'])} on disk, "
                f"{j['segments']} segment(s), fsync {j['fsync']}, epoch {j['epoch']}"
            )
        )
    return Group(*parts)


def execute(args: argparse.Namespace) -> int:
    """Run the view until q or Ctrl-C (0), or until the service goes away (1)."""
    from rich.console import Console
    from rich.live import Live

    if args.interval <= 0:
        raise CommandError("--interval must be > 0", 2)
    mem = attach(args.name)
    jobs = job_reader(mem)
    health = ProcessHealth()
    console = Console()
    prev: dict[str, Any] | None = None
    try:
        with (
            keys() as fd,
            Live(
                console=console, screen=console.is_terminal, auto_refresh=False, transient=False
            ) as live,
        ):
            while True:
                gone = gone_reason(mem)
                if gone is not None:
                    raise CommandError(gone)
                st = snapshot(mem, health, jobs)
                live.update(render(st, rates(prev, st), args.interval), refresh=True)
                prev = st
                if wait_for_quit(fd, args.interval):
                    return 0
    except KeyboardInterrupt:
        return 0
    finally:
        jobs.close()
        mem.close()
