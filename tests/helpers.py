"""What the test modules share, in one place (no test module imports another):

- waiting: ``wait_for`` and ``settle``, the one bounded poll (never a bare sleep);
  ``repeat_until``, an action repeated until a condition holds (a test driving a clock);
  ``sleep_until_ms``, a wait for a time on the service's clock;
- services: this run's service processes and /dev/shm files, a module-kept service, the
  ``shmwheel run`` command in the background, a process embedding a service, a formatted
  segment with no processes, and the processes a test checks for (``alive``, an
  Executor's ``pool_processes``); a Python user nobody can run (``nobody_python``);
- the service tests' task log (``TASKS`` = shmwheel.examples.tasks): reading it and the
  once-and-never-early check; a journal writer's chain of segments; the version 2
  journal fixture, copied;
- what the task modules (tests/*_tasks.py, job_fns.py) share: one O_APPEND write of a
  line, a file written whole (``write_whole``), JSON lines, the monotonic clock in ms, a
  memory-mapped count shared by every process of a test; and the racers' skeleton
  (``racing`` starts k racer processes, ``racer_client`` is each one's connection,
  ``share`` its items and times).

Task modules import this module in the service's executors too (the supervisor hands its
children the sys.path that has tests/ on it), so it imports nothing heavy at module level.
It is imported as ``helpers`` everywhere (never ``tests.helpers``): ``KEPT`` must be one set.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from shmwheel.segment.clock import now_ms  # the service's clock (one definition)

ROOT = Path(__file__).resolve().parent.parent
SHM = Path("/dev/shm")

# -- waiting -------------------------------------------------------------------------------


def settle(pred: Callable[[], Any], timeout: float, pause: float = 0.01) -> Any:
    """Call `pred` every `pause` s until it returns something true, for at most `timeout`
    s; returns its last value (false when the time ran out)."""
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if time.monotonic() > deadline:
            return value
        time.sleep(pause)
    return value


def wait_for(
    pred: Callable[[], Any],
    timeout: float = 20.0,
    what: str | Callable[[], str] = "condition",
    pause: float = 0.01,
) -> Any:
    """``settle(pred, timeout, pause)``, then AssertionError if `pred` never held: the
    message names `what` (a string, or a callable giving the message when time ran out,
    to show the state that was waited on). Returns `pred`'s true value."""
    value = settle(pred, timeout, pause)
    if not value:
        said = what() if callable(what) else what
        raise AssertionError(f"timed out after {timeout} s waiting for {said}")
    return value


def repeat_until(action: Callable[[], Any], done: Callable[[], Any], timeout: float) -> bool:
    """Call `action` over and over (no pause) until `done()` is true, for at most `timeout`
    s; returns whether `done()` held. For a test that drives the clock it waits on."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        action()
    return True


def sleep_until_ms(t: int | float) -> None:
    """Return once the service's clock (``now_ms``, monotonic ms) has reached `t`: sleeps
    until 1 ms before, then polls every 0.2 ms, so a racer acts within a fraction of a ms
    of its time without spinning while it waits long."""
    while (left := t - now_ms()) > 0:
        time.sleep(max(left - 1, 0.2) / 1000)


# -- services ------------------------------------------------------------------------------

# services started in this process are named "s<pid>-<hex>"; others (a bench running
# beside the tests) are not this suite's business
MINE = f"s{os.getpid()}-"

# services a module-scoped fixture keeps across its tests (module_service): the check
# after each test leaves their processes and segments alone until the fixture ends
KEPT: set[str] = set()


def service_processes(prefix: str = MINE) -> list[psutil.Process]:
    """Live service processes whose service name starts with `prefix` (less KEPT ones)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any("shmwheel.service.processes.main" in a for a in cmd[:3]) and any(
            a.startswith(prefix) and a not in KEPT for a in cmd[3:]
        ):
            found.append(p)
    return found


def shm_files(prefix: str = MINE) -> set[str]:
    """This run's segments and semaphores in /dev/shm (less KEPT services')."""
    return {
        p.name
        for p in SHM.iterdir()
        if "shmwheel." + prefix in p.name and not any(f"shmwheel.{k}" in p.name for k in KEPT)
    }


def module_service(svc: Any) -> Iterator[Any]:
    """A generator for a module-scoped fixture: `svc` started, kept across the module's
    tests, stopped at its end (then the usual check applies to it)."""
    with svc:
        KEPT.add(svc.name)
        try:
            yield svc
        finally:
            KEPT.discard(svc.name)


def stop_all(*services: Any) -> None:
    """Stop each service a test started (None: it was never started); a stop of a stopped
    service does nothing."""
    for svc in services:
        if svc is not None:
            svc.stop()


def fake_service(name: str, owner_pid: int, journal: Path | None = None) -> Path:
    """A formatted service segment with no processes (small), owned by `owner_pid`."""
    from shmwheel import TimerService
    from shmwheel.segment import layout as L
    from shmwheel.segment import shm

    cfg = TimerService(
        name,
        tasks=TASKS,
        capacity=64,
        executors=1,
        max_clients=1,
        ring_capacity=16,
        dispatch_capacity=16,
        arena_bytes=4096,
        watch_capacity=16,
        journal=journal,
    ).config
    L.ServiceMemory.create(name, cfg, owner_pid, 0).close()
    return SHM / (shm.PREFIX + name)


# the environment of a `python -m shmwheel` child: COLUMNS / LINES (set in xdist's
# workers) would override a pty's size in `top`
CLI_ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
CLI_ENV.update(PYTHONPATH=str(ROOT), TERM="xterm-256color")


def embedding_process(
    name: str | None = None, capacity: int = 1000, new_session: bool = True
) -> tuple[subprocess.Popen[str], str]:
    """A child process that starts a service (named `name`, or by default), prints its
    name and sleeps 120 s, as a user's program embedding one: the test then kills it.
    Returns the process and the service's name."""
    named = f"{name!r}, " if name else ""
    code = (
        "import time, shmwheel\n"
        f"svc = shmwheel.TimerService({named}tasks={{'boom': 'shmwheel.examples.tasks:fail'}}, "
        f"capacity={capacity}, executors=1).start()\n"
        "print(svc.name, flush=True)\n"
        "time.sleep(120)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=CLI_ENV,
        start_new_session=new_session,
    )
    assert p.stdout is not None
    return p, p.stdout.readline().strip()


def start_run(args: list[str], log_path: Path) -> tuple[subprocess.Popen[str], str]:
    """`python -m shmwheel run ARGS` in the background; returns it and its first line."""
    with log_path.open("w") as err:
        p = subprocess.Popen(
            [sys.executable, "-m", "shmwheel", "run", *args],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=CLI_ENV,
            cwd=ROOT,
        )
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], 30)
    if not ready:
        p.kill()
        p.wait()
        raise AssertionError(f"`run` printed nothing in 30 s: {log_path.read_text()}")
    line = p.stdout.readline()
    assert line, f"`run` exited with {p.wait()}: {log_path.read_text()}"
    return p, line


def stop_run(p: subprocess.Popen[str], name: str, sig: int, log_path: Path) -> None:
    """Signal `run`, check it exits 0 and leaves no process and nothing in /dev/shm."""
    from shmwheel.segment import shm

    p.send_signal(sig)
    try:
        rc = p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert rc == 0, f"`run` exited {rc}: {log_path.read_text()}"
    assert not service_processes(name), "service processes left behind"
    assert not shm.service_files(name), "segment or semaphores left in /dev/shm"
    assert "stopped" in log_path.read_text()


# what a Python user nobody runs must do: import the dependencies and start itself
_NOBODY_PROBE = (
    "import subprocess, sys; import numpy, msgpack, posix_ipc, psutil; "
    "subprocess.run([sys.executable, '-c', 'import numpy'], check=True)"
)


def nobody_python(env: dict[str, str]) -> tuple[list[str], str]:
    """(command prefix, what it is): a Python of this version that user nobody can run.
    This venv's interpreter may not be one (a pyenv Python under /root, mode 0700): then
    the system's python3.X of the same minor version, with this venv's site-packages on
    PYTHONPATH for the dependencies."""
    import shutil

    import pytest

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root, but setpriv (util-linux) is missing: cannot switch user")
    switch = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    tried = []
    for python in (sys.executable, shutil.which(minor, path="/usr/local/bin:/usr/bin")):
        if python is None:
            continue
        # it must also start itself, as the supervisor does (setpriv may exec a binary
        # that the user then cannot exec again, and that cannot find its own stdlib)
        probe = subprocess.run(
            switch + [python, "-c", _NOBODY_PROBE],
            env=env,
            capture_output=True,
            text=True,
            cwd="/",
            timeout=60,
            check=False,
        )
        if probe.returncode == 0:
            return switch + [python], python
        tried.append(f"{python}: {probe.stderr.strip()[-300:]}")
    pytest.fail("no Python that user nobody can run with the dependencies:\n" + "\n".join(tried))


def alive(pids: set[int]) -> list[int]:
    """The pids of `pids` that name a process that has not exited."""
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def pool_processes(ex: Any) -> set[int]:
    """The pids of an Executor's own pool: its zygote and its job workers now."""
    mgr = ex._pool._mgr
    pids = {w.proc.pid for w in mgr.workers if w.proc is not None}
    return pids | ({mgr._zygote.proc.pid} if mgr._zygote is not None else set())


# -- the service tests' task log -----------------------------------------------------------

TASKS = {
    "record": "shmwheel.examples.tasks:append_line",
    "boom": "shmwheel.examples.tasks:fail",
    "slow": "shmwheel.examples.tasks:sleep_ms",
}


def read_log(path: Path) -> list[tuple[str, int, int, int, int, str]]:
    """Rows (tag, id, deadline_ms, run_ns, attempt, key) of shmwheel.examples.tasks.append_line."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        hid, deadline, run_ns, attempt, tag, key = line.split(" ")
        rows.append((tag, int(hid), int(deadline), int(run_ns), int(attempt), key))
    return rows


def assert_once_never_early(rows: list[tuple[Any, ...]], tags: list[str]) -> None:
    """Every tag of `tags` ran, once, not before its deadline, and nothing else ran."""
    counts = Counter(r[0] for r in rows)
    assert set(counts) == set(tags), (
        f"missing {len(set(tags) - set(counts))}, unexpected {len(set(counts) - set(tags))}"
    )
    twice = [t for t, c in counts.items() if c > 1]
    assert not twice, f"{len(twice)} timers ran twice, e.g. {twice[:3]}"
    early = [r for r in rows if r[3] < r[2] * 1_000_000]
    assert not early, f"{len(early)} timers ran before their deadline, e.g. {early[:3]}"


# -- journals ------------------------------------------------------------------------------


def read_ids(directory: Path) -> tuple[list[int], list[Any]]:
    """The ids of the CANCELLED records of every segment, in file order, and the segments."""
    from shmwheel.journal import format as F
    from shmwheel.journal import reader

    segs = [reader.read_segment(p) for p in F.segment_files(directory)]
    return [r[1] for s in segs for r in s.records], segs


def copy_v2_journal(to: Path) -> Path:
    """The journal written in format version 2 (tests/fixtures/journal-v2) copied to `to`,
    a directory a service trusts (0700, files 0600)."""
    import shutil

    fixture = Path(__file__).parent / "fixtures" / "journal-v2"
    shutil.copytree(fixture, to, ignore=shutil.ignore_patterns("*.md", "*.py"))
    to.chmod(0o700)
    for p in to.iterdir():
        p.chmod(0o600)
    return to


def assert_chain(segs: list[Any]) -> None:
    """One writer's segments (journal.reader.Segment): no rejects, each names the one
    before, each but the last ends naming the next, the last ends closed."""
    names = [os.path.basename(s.path) for s in segs]
    for i, s in enumerate(segs):
        assert not s.rejects, s.rejects
        assert s.header is not None and s.header["prev"] == (names[i - 1] if i else "")
        assert s.end is not None and s.end["next"] == (names[i + 1] if i + 1 < len(segs) else "")


# -- what the task modules share -----------------------------------------------------------


def append_line(path: str | Path, line: str) -> None:
    """Append `line` (with its newline) to `path` in one O_APPEND write: lines written by
    many processes at once never mix."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def write_whole(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that a reader finds all of it or no file: written to the
    sibling ``tmp.<name>`` first, then renamed."""
    path = Path(path)
    tmp = path.with_name("tmp." + path.name)
    tmp.write_text(text)
    tmp.rename(path)


def append_json(path: str | Path, row: dict[str, Any]) -> None:
    """`row` as one JSON line, in one O_APPEND write."""
    append_line(path, json.dumps(row) + "\n")


def read_json_lines(path: str | Path) -> list[dict[str, Any]]:
    """The rows append_json wrote to `path` (none if it does not exist)."""
    p = Path(path)
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


_shared: dict[tuple[str, Any], Any] = {}  # (path, dtype) -> its memmap, opened once a process


def shared_array(env: str, dtype: Any) -> Any:
    """The numpy memmap of the file named by $`env` (a test made it; executors inherit
    the variable), opened once per process and shared by every process of the test."""
    key = (os.environ[env], dtype)
    m = _shared.get(key)
    if m is None:
        import numpy as np

        m = _shared[key] = np.memmap(key[0], dtype=dtype, mode="r+")
    return m


# -- racers: k spawned processes acting on a service's timers at jittered times ------------


def share(deadlines: Any, k: int, j: int, jitter_ms: int, seed: int) -> tuple[Any, Any]:
    """Racer j of k's items (i = j, j + k, ...) and the time to act on each: its deadline
    plus a random offset in [-jitter_ms, +jitter_ms]; both sorted by that time."""
    import numpy as np

    mine = np.arange(j, len(deadlines), k)
    rng = np.random.default_rng(seed + j)
    at = deadlines[mine] + rng.integers(-jitter_ms, jitter_ms + 1, len(mine))
    order = np.argsort(at, kind="stable")
    return mine[order], at[order]


@contextmanager
def racing(
    target: Callable[..., None], name: str, workdir: str, k: int, jitter_ms: int, who: str
) -> Iterator[Callable[[], None]]:
    """Spawn k racers ``target(name, workdir, k, j, jitter_ms, ready, go)`` and wait until
    each has connected; yields ``release()``, which lets them go, waits for them and
    asserts that each exited 0. Racers still alive at the end are killed."""
    import multiprocessing as mp

    spawn = mp.get_context("spawn")
    ready = [spawn.Event() for _ in range(k)]
    go = spawn.Event()
    procs = [
        spawn.Process(target=target, args=(name, workdir, k, j, jitter_ms, ready[j], go))
        for j in range(k)
    ]
    for p in procs:
        p.start()

    def release() -> None:
        go.set()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * k, f"a {who} failed"

    try:
        for e, p in zip(ready, procs, strict=True):
            wait_for(lambda e=e, p=p: e.is_set() or not p.is_alive(), 60, f"a {who} to connect")
            assert e.is_set(), f"a {who} died before it connected"
        yield release
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


@contextmanager
def racer_client(name: str, ready: Any, go: Any) -> Iterator[Any]:
    """A racer's connection to service `name`: connected, `ready` set, then the `go`
    signal awaited (60 s at most, else RuntimeError); closed at the end."""
    import shmwheel

    with shmwheel.connect(name) as client:
        ready.set()
        if not go.wait(60):
            raise RuntimeError("no go signal")
        yield client
