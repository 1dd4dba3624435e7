"""The expiry task and the holder processes of tests/test_lease.py.

``expired`` runs in the service's executors: one JSON line per run (the timer's id, the
deadline its run carried, when it started, ``shmwheel.context().holder``) to
payload["path"], in one O_APPEND write. ``hold`` is a spawned holder: it beats the lease it
was handed (pickled) until told to stop, then releases it or simply stops, and reports
every beat. ``crash_driver`` is the embedding process of the whole-service SIGKILL test.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from helpers import append_json, wait_for, write_whole

import shmwheel
import shmwheel.journal


def expired(payload: dict[str, Any]) -> None:
    """A lease's on_expire task: one line (id, deadline_ms, run_ns, holder, key)."""
    ctx = shmwheel.context()
    start = time.monotonic_ns()
    row = {"id": ctx.id, "deadline_ms": ctx.deadline_ms, "run_ns": start, "holder": ctx.holder}
    append_json(payload["path"], {**row, "key": ctx.key})


def hold(
    ready: Any,
    handed: Any,
    out: str,
    beat_ms: float,
    long: Any,
    stop: Any,
    then: str,
    after: Any,
) -> None:
    """A holder (a spawned process): say `ready` (its imports done), take the lease
    handed over (pickled) on the queue `handed`, beat it every `beat_ms` until `stop` is
    set; set `long` once its beats have spanned 1.5 times the ttl. Then `then`: "release"
    (release it), "beat" (beat on until `after`, then release), or "stop" (beat no more;
    once `after` is set, beat once more, late). Writes every call to `out`: rows (what,
    called_ns, returned_ns, returned, deadline_ms after it)."""
    import shmwheel.service.caller.client  # noqa: F401  (what unpickling the lease needs, loaded)

    ready.set()
    lease: shmwheel.Lease = handed.get(timeout=60)
    rows: list[tuple[str, int, int, bool, int]] = []

    def call(what: str, fn: Any) -> None:
        t0 = time.monotonic_ns()
        r = bool(fn())
        rows.append((what, t0, time.monotonic_ns(), r, lease.deadline_ms))

    first = time.monotonic_ns()
    try:
        while not stop.is_set():
            call("beat", lease.beat)
            if not long.is_set() and time.monotonic_ns() - first > 1.5 * lease.ttl_ms * 1e6:
                long.set()
            stop.wait(beat_ms / 1000)
        if then == "release":
            call("release", lease.release)
        elif then == "beat":
            while not after.is_set():
                call("beat", lease.beat)
                after.wait(beat_ms / 1000)
            call("release", lease.release)
        else:
            if not after.wait(60):
                raise RuntimeError("no 'after' signal")
            call("late beat", lease.beat)
    finally:
        Path(out).write_text(json.dumps({"holder": lease.holder, "rows": rows}))


def _journaled(directory: str, kept: int, deadline: int, gone: int) -> bool:
    last, cancelled = None, False
    for r in shmwheel.journal.records(directory):
        if r["kind"] == "scheduled" and r["id"] == kept:
            last = r["deadline_ms"]
        cancelled |= r["kind"] == "cancelled" and r["id"] == gone
    return last == deadline and cancelled


def crash_driver(workdir: str, name: str, journal: str) -> None:
    """The embedding process of the whole-service SIGKILL test (run as a script in a new
    session): a journaled service; lease "kept", beaten three times, and lease "gone",
    released; their ids and the last beat's deadline to ready.json; then it waits to be
    killed."""
    w = Path(workdir)
    tasks = {"expired": "lease_tasks:expired"}
    svc = shmwheel.TimerService(name, tasks=tasks, capacity=64, executors=1, journal=journal)
    svc.start()
    c = svc.client()
    payload = {"path": str(w / "expired.jsonl")}
    kept = c.lease(3000, on_expire="expired", payload=payload, holder="kept")
    gone = c.lease(3000, on_expire="expired", payload=payload, holder="gone")
    for _ in range(3):
        assert kept.beat()
    assert gone.release()
    wait_for(
        lambda: _journaled(journal, kept.id, kept.deadline_ms, gone.id),
        60,
        "the last beat and the release to reach the journal",
    )
    ready = {"kept": kept.id, "gone": gone.id, "deadline": kept.deadline_ms}
    write_whole(w / "ready.json", json.dumps(ready))
    time.sleep(120)  # killed long before


if __name__ == "__main__":
    crash_driver(*sys.argv[1:4])
