"""Tasks of tests/test_descendants.py (and test_journal_readonly.py): each run leaves a file
in $DESC_RUNS named by the timer's id and the running process, holding its deadline and
the time it started (both monotonic ms), so a test counts the runs of each timer
(``runs``) and checks none ran early (``assert_each_ran_once_none_early``)."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from helpers import now_ms, write_whole

import shmwheel

TASKS = {
    "record": "descendant_tasks:record",
    "spawn": "descendant_tasks:spawn_child",
    "fork": "descendant_tasks:fork_and_return",
}


def runs(directory: Path) -> list[tuple[int, int, int, str]]:
    """(timer id, pid, deadline_ms, start ms) of every run the tasks recorded."""
    out = []
    for p in directory.glob("run.*"):
        _, tid, pid, _kind = p.name.split(".")
        deadline, started = map(int, p.read_text().split())
        out.append((int(tid), int(pid), deadline, started))
    return out


def assert_each_ran_once_none_early(directory: Path, ids: list[int]) -> None:
    """Each timer of `ids` ran once, none before its deadline, and no other timer ran."""
    got = runs(directory)
    counts = Counter(r[0] for r in got)
    twice = {i: n for i, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} timers ran more than once, e.g. {list(twice.items())[:5]}"
    missing = set(ids) - set(counts)
    assert not missing, f"{len(missing)} accepted timers never ran, e.g. {sorted(missing)[:5]}"
    assert set(counts) <= set(ids), f"runs of timers never accepted: {set(counts) - set(ids)}"
    early = [r for r in got if r[3] < r[2]]
    assert not early, f"{len(early)} ran before their deadline, e.g. {early[:5]}"


def _mark(kind: str) -> None:
    ctx = shmwheel.context()
    started = now_ms()
    name = f"run.{ctx.id}.{os.getpid()}.{kind}"
    write_whole(Path(os.environ["DESC_RUNS"], name), f"{ctx.deadline_ms} {started}\n")


def _note_child(pid: int, kind: str) -> None:
    write_whole(Path(os.environ["DESC_RUNS"], f"child.{pid}"), kind + "\n")


def record(payload: Any) -> None:
    """A plain run, `payload` ms long; a file ``done.ID.PID`` says it ran to its end."""
    _mark("record")
    if payload:
        time.sleep(payload / 1000)
    ctx = shmwheel.context()
    open(os.path.join(os.environ["DESC_RUNS"], f"done.{ctx.id}.{os.getpid()}"), "w").close()


def spawn_child(payload: Any) -> None:
    """Start a multiprocessing child (fork, not a daemon) that sleeps 30 s, and return.
    The child's pid goes to a file, for the test to check and kill."""
    _mark("spawn")
    p = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    p.start()
    _note_child(p.pid, "mp")


def fork_and_return(payload: Any) -> None:
    """fork(); both the task and its copy return (the copy into the executor's loop)."""
    _mark("fork")
    pid = os.fork()
    if pid == 0:
        _note_child(os.getpid(), "fork")
    return None
