"""The whole-service crash harness: SIGKILL a journaled service and everything around it,
cycle after cycle, then restart it cleanly and audit every timer.

Shared by tests/test_journal_crash.py (3 cycles) and bench/journal_crash.py (50 or more).
This module runs it (``Config``, ``run``) and reports (``summary``); the driver is
tests/journal_crash_driver.py, the audit tests/journal_crash_audit.py.

Each cycle runs a DRIVER, a child process in a new session: the embedding process, which
starts a journaled service and schedules and cancels timers. The harness SIGKILLs the
driver's whole process group (the driver and every service process) 0.3-1.5 s after the
driver is up (or, for a fraction of the cycles, at a random moment while it starts), and
waits until each of those processes is gone. After the last cycle a FINAL driver starts a
service on the same journal, schedules nothing and runs what is left until nothing is
left to fire, then stops cleanly. Then ``analyse`` checks the invariants against the
drivers' logs and the journal.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from journal_crash_audit import Logs, analyse, read_logs
from journal_crash_driver import driver_main, now_ns, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DRIVER = HERE / "journal_crash_driver.py"  # run as a script, one per cycle


@dataclass
class Config:
    cycles: int = 3
    seed: int = 1
    kill_after_s: tuple[float, float] = (0.3, 1.5)
    startup_kill_fraction: float = 0.0  # cycles killed at a random moment of the start
    startup_kill_s: tuple[float, float] = (0.05, 2.0)
    executors: tuple[int, ...] = (1, 2)
    max_repeats: int = 4
    ready_timeout_s: float = 60.0
    final_timeout_s: float = 90.0
    workdir: str | None = None  # None: a new temporary directory
    keep: bool = False  # keep the workdir afterwards
    progress: bool = False  # a line per cycle on stderr
    # the journal's retention: kept whole by default, so the audit can check that it
    # holds every event; with keep_hours 0 (and small segments) the services delete what
    # no timer needs while the cycles run, and the audit checks the timers, not the files
    keep_hours: float = 1e6
    segment_bytes: int = 64 << 20


@dataclass
class CycleInfo:
    cycle: int
    name: str
    pgid: int = 0
    executors: int = 1
    ready: bool = False
    startup_kill: bool = False
    up_s: float = 0.0  # from spawn to the kill
    ready_s: float = 0.0  # from spawn to the service being up
    killed_procs: int = 0  # processes of the group at the kill
    exited_before_kill: int | None = None
    recovery: dict[str, Any] | None = None
    shm_after_kill: bool = False  # its segment was in /dev/shm once its processes were gone
    salvage_log: str = ""  # what the next start said about salvaging it


@dataclass
class Result:
    config: Config
    workdir: str
    cycles: list[CycleInfo] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    final_rc: int | None = None
    final_pid: int = 0
    seconds: float = 0.0
    counts: dict[str, Any] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    leaks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


# -- processes --------------------------------------------------------------------------
_PR_SET_CHILD_SUBREAPER = 36


def _set_subreaper(on: bool) -> bool:
    """Become the reaper of our orphans (the service processes of a killed driver), so they
    are reaped here instead of staying zombies (this machine's init does not reap)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (not zombie) processes of process group `pgid`; zombies that are our children
    are reaped on the way."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) != pgid:
                continue
            if p.status() == psutil.STATUS_ZOMBIE:
                _reap(p.pid)
                continue
            out.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return out


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not ours: the zombie belongs to another reaper


def kill_group(pgid: int, proc: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> int:
    """SIGKILL every process of the group, until none is left; returns how many processes
    the group had at the first kill."""
    first = len(group_members(pgid))
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # pragma: no cover - a pgid reused by another user
            return first
        if proc is not None:
            try:
                proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        left = group_members(pgid)
        if not left and (proc is None or proc.poll() is not None):
            return first
        if time.monotonic() > deadline:
            raise RuntimeError(f"process group {pgid} still has {left} after {timeout} s")
        time.sleep(0.02)


def _spawn_driver(
    cfg: Config,
    work: str,
    journal: str,
    cycle: int,
    name: str,
    seed: int,
    executors: int,
    carry: dict[str, Any],
    final: bool,
    prev_name: str = "",
) -> subprocess.Popen[bytes]:
    carry_path = os.path.join(work, f"carry-{cycle}.json")
    write_json(carry_path, carry)
    argv = [
        sys.executable,
        str(DRIVER),
        "--workdir",
        work,
        "--journal",
        journal,
        "--cycle",
        str(cycle),
        "--name",
        name,
        "--seed",
        str(seed),
        "--executors",
        str(executors),
        "--carry",
        carry_path,
        "--max-repeats",
        str(cfg.max_repeats),
        "--prev-name",
        prev_name,
        "--keep-hours",
        str(cfg.keep_hours),
        "--segment-bytes",
        str(cfg.segment_bytes),
    ]
    if final:
        argv += ["--final", "--max-seconds", str(cfg.final_timeout_s - 15)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(HERE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.setdefault("SHMWHEEL_LOG_LEVEL", "WARNING")
    with open(os.path.join(work, f"driver-{cycle}.log"), "wb") as out:
        return subprocess.Popen(
            argv,
            cwd=str(ROOT),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def carry_for(lg: Logs, final: bool, last_kill_ms: int) -> dict[str, Any]:
    """What the next driver may cancel by id: one-shots not yet due and repeating timers,
    none with a cancel attempted already; for the final driver, how long to wait."""
    t = now_ns() // 1_000_000
    attempted = set(lg.cancel_calls)
    oneshots = [
        [a["id"], a["deadline_ms"]]
        for a in lg.accepted.values()
        if a["kind"] == "o" and a["id"] not in attempted and a["deadline_ms"] > t + 50
    ]
    repeats = [
        a["id"] for a in lg.accepted.values() if a["kind"] == "r" and a["id"] not in attempted
    ]
    if final:  # every repeating timer known, cancelled or not, gets a (harmless) cancel
        repeats = sorted({a["id"] for a in lg.accepted.values() if a["kind"] == "r"})
    latest = max([a["deadline_ms"] for a in lg.accepted.values()] + [0])
    # a schedule in doubt at a kill is due at most 3 s after that kill
    return {
        "oneshots": oneshots,
        "repeats": repeats,
        "wait_until_ms": max(latest, last_kill_ms + 3000) + 500,
    }


# -- the run -----------------------------------------------------------------------------------
def run(cfg: Config) -> Result:
    """Run the cycles and the final phase, then analyse. Whatever happens, every process
    group started is killed and reaped, and the workdir removed (unless cfg.keep)."""
    t0 = time.monotonic()
    work = cfg.workdir or tempfile.mkdtemp(prefix="shmwheel-jcrash-")
    os.makedirs(work, exist_ok=True)
    journal = os.path.join(work, "journal")
    res = Result(cfg, work)
    rng = random.Random(cfg.seed)
    prefix = f"s{os.getpid()}-jc"
    subreaper = _set_subreaper(True)
    running: dict[int, subprocess.Popen[bytes]] = {}
    try:
        last_kill_ms = 0
        prev_name = ""
        for cycle in range(1, cfg.cycles + 1):
            name = f"{prefix}{cycle}-{rng.getrandbits(24):06x}"
            info = CycleInfo(cycle, name, executors=rng.choice(cfg.executors))
            info.startup_kill = rng.random() < cfg.startup_kill_fraction
            kill_in = rng.uniform(*(cfg.startup_kill_s if info.startup_kill else cfg.kill_after_s))
            carry = carry_for(read_logs(work), False, last_kill_ms)
            t_spawn = time.monotonic()
            proc = _spawn_driver(
                cfg,
                work,
                journal,
                cycle,
                name,
                rng.getrandbits(32),
                info.executors,
                carry,
                final=False,
                prev_name=prev_name,
            )
            info.pgid = proc.pid
            running[proc.pid] = proc
            marker = os.path.join(work, f"recovery-{cycle}.json")
            if info.startup_kill:
                kill_at = t_spawn + kill_in
                while time.monotonic() < kill_at and proc.poll() is None:
                    time.sleep(0.005)
            else:
                ready_by = t_spawn + cfg.ready_timeout_s
                while (
                    not os.path.exists(marker)
                    and proc.poll() is None
                    and time.monotonic() < ready_by
                ):
                    time.sleep(0.01)
                info.ready_s = time.monotonic() - t_spawn
                time.sleep(kill_in)
            info.exited_before_kill = proc.poll()
            info.ready = os.path.exists(marker)
            info.up_s = time.monotonic() - t_spawn
            info.killed_procs = kill_group(proc.pid, proc)
            last_kill_ms = now_ns() // 1_000_000
            info.shm_after_kill = os.path.exists(f"/dev/shm/shmwheel.{name}")
            prev_name = name
            del running[proc.pid]
            if info.ready:
                with open(marker) as f:
                    info.recovery = json.load(f)["recovery"]
            if info.exited_before_kill is not None:
                res.notes.append(
                    f"cycle {cycle}: the driver exited with code "
                    f"{info.exited_before_kill} before the kill (see "
                    f"driver-{cycle}.log)"
                )
            res.cycles.append(info)
            if cfg.progress:
                rec = info.recovery or {}
                print(
                    f"cycle {cycle:3d}: {'startup kill' if info.startup_kill else 'kill'} "
                    f"after {info.up_s:.2f} s (up after {info.ready_s:.2f} s), "
                    f"{info.killed_procs} processes, executors {info.executors}, recovered "
                    f"{rec.get('recovered', '-')}, salvaged {rec.get('salvaged', '-')}",
                    file=sys.stderr,
                    flush=True,
                )
        # the final phase: a clean start on the same journal
        final_cycle = cfg.cycles + 1
        name = f"{prefix}final-{rng.getrandbits(24):06x}"
        carry = carry_for(read_logs(work), True, last_kill_ms)
        proc = _spawn_driver(
            cfg,
            work,
            journal,
            final_cycle,
            name,
            rng.getrandbits(32),
            1,
            carry,
            final=True,
            prev_name=prev_name,
        )
        running[proc.pid] = proc
        res.final_pid = proc.pid
        try:
            res.final_rc = proc.wait(cfg.final_timeout_s)
        except subprocess.TimeoutExpired:
            res.notes.append(f"the final driver did not finish in {cfg.final_timeout_s} s")
        kill_group(proc.pid, proc)  # nothing should be left; if anything is, it goes
        del running[proc.pid]
        fpath = os.path.join(work, "final.json")
        if os.path.exists(fpath):
            with open(fpath) as f:
                res.final = json.load(f)
        res.leaks = leaks(prefix, [c.pgid for c in res.cycles] + [proc.pid])
        analyse(res, work, journal, prefix)
    finally:
        for pgid, p in list(running.items()):
            try:
                kill_group(pgid, p)
            except Exception as e:  # noqa: BLE001 - report it, clean up the rest
                res.notes.append(f"cleanup of process group {pgid}: {e}")
        _cleanup_shm(prefix)
        if subreaper:
            _set_subreaper(False)
        res.seconds = time.monotonic() - t0
        if not cfg.keep:
            shutil.rmtree(work, ignore_errors=True)
    return res


def _shm_files(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").iterdir() if "shmwheel." + prefix in p.name)


def _cleanup_shm(prefix: str) -> None:
    """After a failure only: remove what a killed service of ours left in /dev/shm (the
    checks have already looked; on success there is nothing)."""
    for name in _shm_files(prefix):
        try:
            os.unlink(os.path.join("/dev/shm", name))
        except OSError:
            pass


def leaks(prefix: str, pgids: list[int]) -> dict[str, list[str]]:
    procs = []
    for pgid in pgids:
        procs += [
            f"{p.pid} (group {pgid}): {' '.join(p.cmdline()[:6])}" for p in group_members(pgid)
        ]
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any("shmwheel.service.processes.main" in a for a in cmd[:3]) and any(
            a.startswith(prefix) for a in cmd[3:]
        ):
            procs.append(f"{p.pid}: {' '.join(cmd[3:])}")
    return {"processes": sorted(set(procs)), "shm": _shm_files(prefix)}


# -- the summary -----------------------------------------------------------------------------
def summary(res: Result) -> str:
    cfg = res.config
    out = [
        (
            f"whole-service crash test: {cfg.cycles} cycles, seed {cfg.seed}, "
            f"{res.seconds:.1f} s in all ({'PASS' if res.ok else 'FAIL'})"
        ),
        (
            f"kill {cfg.kill_after_s[0]}-{cfg.kill_after_s[1]} s after the service is up; "
            f"{cfg.startup_kill_fraction:.0%} of the cycles killed at a random moment of "
            f"their start ({cfg.startup_kill_s[0]}-{cfg.startup_kill_s[1]} s after spawn); "
            f"executors {'/'.join(map(str, cfg.executors))}"
        ),
    ]
    out.append("")
    for k, v in res.counts.items():
        if k in ("journal reject details", "duplicate details", "segment fate"):
            continue
        out.append(f"  {k}: {v}")
    out.append("")
    out.append("invariants:")
    for n in [
        "1. nothing lost",
        "2. cancelled never runs",
        "3. never early",
        "4. ids preserved",
        "5. duplicates only in the crash window",
        "6. repeating timers resume and stop when cancelled",
        "7. nothing left behind",
        "J. the journal is complete",
        "final phase clean",
    ]:
        key = n.split(" ")[0]
        bad = sum(len(v) for k, v in res.violations.items() if k.startswith(key))
        out.append(f"  {n}: {'ok' if not bad else f'{bad} VIOLATIONS'}")
    if res.violations:
        out.append("")
        out.append("violations:")
        for k, v in res.violations.items():
            out.append(f"  {k}: {len(v)}")
            for line in v[:15]:
                out.append(f"    - {line}")
            if len(v) > 15:
                out.append(f"    ... {len(v) - 15} more")
    out.append("")
    out.append("per cycle (recovery = TimerService.recovery printed by the driver):")
    for ci in res.cycles:
        r = ci.recovery
        rec = (
            "not up at the kill"
            if r is None
            else f"epoch {r.get('epoch')} recovered {r.get('recovered')} salvaged "
            f"{r.get('salvaged')} seen {r.get('timers_seen')} records "
            f"{r.get('records_read')} segments {r.get('segments_read')} rejects "
            f"{r.get('rejects')} in {r.get('seconds', 0):.3f} s"
        )
        out.append(
            f"  {ci.cycle:3d} {'S' if ci.startup_kill else ' '} exec {ci.executors} "
            f"up {ci.ready_s:5.2f} s killed at {ci.up_s:5.2f} s "
            f"({ci.killed_procs} procs): {rec}"
        )
        out.append(f"        {res.counts.get('segment fate', {}).get(ci.cycle, '')}")
    fin = res.final
    if fin:
        r = fin.get("recovery", {})
        s = fin.get("stats", {})
        out.append(
            f"  final: epoch {r.get('epoch')} recovered {r.get('recovered')} salvaged "
            f"{r.get('salvaged')} rejects {r.get('rejects')}; then fired {s.get('fired')} "
            f"completed {s.get('completed')} errors {s.get('task_errors')} crashed "
            f"{s.get('crashed')} early {s.get('early')} pending {s.get('pending')}; "
            f"repeating timers cancelled at the end {fin.get('repeats_cancelled')}"
        )
    dups = res.counts.get("duplicate details") or []
    if dups:
        out.append("")
        out.append(f"duplicates inside the crash window ({len(dups)}):")
        out += [f"  {d}" for d in dups[:30]]
        if len(dups) > 30:
            out.append(f"  ... {len(dups) - 30} more")
    rej = res.counts.get("journal reject details") or []
    if rej:
        out.append("")
        out.append(f"journal rejects ({len(rej)}):")
        for r in rej[:60]:
            out.append(f"  {r}")
        if len(rej) > 60:
            out.append(f"  ... {len(rej) - 60} more")
    if res.notes:
        out.append("")
        out.append("notes:")
        out += [f"  {n}" for n in res.notes]
    if cfg.keep:
        out.append(f"workdir kept: {res.workdir}")
    return "\n".join(out)


if __name__ == "__main__":
    # the driver's former entry point, kept: `python tests/journal_crash_harness.py driver ...`
    if len(sys.argv) > 1 and sys.argv[1] == "driver":
        sys.exit(driver_main(sys.argv[2:]))
    sys.exit(
        "usage: journal_crash_harness.py driver ... (run bench/journal_crash.py or "
        "tests/test_journal_crash.py)"
    )
