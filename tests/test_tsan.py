"""The native core's cross-process protocols, checked rather than assumed (tests/tsan/).

The C harness in tests/tsan/ plays every protocol the service's processes play against one
another (ring publish/consume, a dispatch record's claim vs its take-over, schedule vs
link, cancel vs fire, reset vs fire and cancel, arena blocks, watch vs complete, the
outcome notify, crash repair) with threads standing in for processes, over the core's own
C files, and checks each protocol's functional invariant (tests/tsan/README.md). It is
built twice with the system gcc:

- with ``-fsanitize=thread``: ThreadSanitizer reports any data race of the C11 model
  (the run exits 66), whatever the hardware would have made of it;
- plain ``-O2``: the same checks at full speed, where this machine's own reordering (x86's
  store buffer) can show.

Each planted ordering bug below must then be caught, which shows the harness sees what it
claims to see. The whole module takes about 30 s on 2 cores.
"""

from __future__ import annotations

import concurrent.futures
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

# run alone: whether a planted race is caught depends on how the threads interleave
pytestmark = [pytest.mark.exclusive, pytest.mark.system]

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "tsan"
NATIVE = ROOT / "shmwheel" / "native"
# the core's Python-free files the harness links (the code under test: none is stubbed)
CORE = (
    "wheel.c",
    "wheel_entries.c",
    "states.c",
    "slots.c",
    "slots_repair.c",
    "arena.c",
    "slots_journal.c",
    "purgatory.c",
    "waiters.c",
    "journal_encode.c",
    "slot_record.c",
)
# SHMWHEEL_DEBUG: slot_move traps on a state-word move contract.h's table does not allow
CFLAGS = [
    "-std=c11",
    "-g",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-fno-strict-aliasing",
    "-DSHMWHEEL_DEBUG",
]
TSAN_FLAGS = ["-fsanitize=thread", "-O1", "-Wno-tsan"]  # TSan ignores fences: it says so
PLAIN = ["-O2", "-pthread"]
TSAN_EXIT = 66
# TSAN_HARNESS_LIMIT_S: a scenario still running after that long is stuck; it says where
RUN_ENV = {"TSAN_OPTIONS": f"halt_on_error=1 exitcode={TSAN_EXIT}"}

# scenario -> (operations per client under TSan, counts the run must show, as regexes of
# its summary line: a run that exercised nothing proves nothing)
SCENARIOS: dict[str, tuple[int, tuple[str, ...]]] = {
    "ring": (20000, (r"(\d+) records",)),
    "claim": (20000, (r"(\d+) ran by their executor", r"(\d+) taken")),
    "schedule": (1500, (r"(\d+) ran",)),
    "cancel": (1500, (r"(\d+) ran", r"(\d+) cancelled")),
    "reset": (1500, (r"(\d+) ran", r"(\d+) cancelled", r"(\d+) resets won")),
    "arena": (1500, (r"(\d+) ran", r"(\d+) cancelled")),
    "watch": (1500, (r"(\d+) completed", r"(\d+) cancelled")),
    "notify": (1500, (r"(\d+) waited in", r"(\d+) refused", r"(\d+) cancelled")),
    "repair": (1500, (r"(\d+) repairs", r"(\d+) resets won", r"(\d+) cancelled")),
}
SEEDS = (1, 2)


def _sources(native: Path) -> list[Path]:
    return sorted(HARNESS.glob("*.c")) + [native / f for f in CORE]


def _gcc(args: list[str]) -> None:
    r = subprocess.run(["gcc", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"gcc {' '.join(args)}\n{r.stderr}"


def _compile(native: Path, srcs: list[Path], objs: Path, flags: list[str],
             pool: concurrent.futures.Executor | None = None) -> dict[str, Path]:  # fmt: skip
    """Each of `srcs` compiled to an object under `objs` (the headers of `native`), on
    `pool` if given: its object by source file name."""
    objs.mkdir(exist_ok=True)
    out = {src.name: objs / (src.stem + ".o") for src in srcs}
    cmds = [[*CFLAGS, *flags, f"-I{native}", "-c", str(src), "-o", str(out[src.name])]
            for src in srcs]  # fmt: skip
    if pool is None:
        for cmd in cmds:
            _gcc(cmd)
    else:
        for job in [pool.submit(_gcc, cmd) for cmd in cmds]:
            job.result()
    return out


def _link(objs: dict[str, Path], out: Path, flags: list[str]) -> Path:
    _gcc([*flags, "-o", str(out), *(str(o) for o in objs.values()), "-lpthread"])
    return out


LAUNCH: list[str] = []


def _tsan_unavailable(tmp: Path) -> str | None:
    """Why gcc cannot build and run a ThreadSanitizer program here, or None if it can
    (then LAUNCH says how to start one)."""
    if shutil.which("gcc") is None:
        return "no gcc on PATH"
    src, exe = tmp / "probe.c", tmp / "probe"
    src.write_text("int main(void) { return 0; }\n")
    r = subprocess.run(
        ["gcc", "-fsanitize=thread", "-o", str(exe), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode != 0:
        return f"gcc -fsanitize=thread does not build: {r.stderr.strip()[:500]}"
    why = ""
    for launch in ([], ["setarch", platform.machine(), "-R"]):
        if launch and shutil.which("setarch") is None:
            break
        r = subprocess.run([*launch, str(exe)], capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            LAUNCH[:] = launch
            return None
        why += f" {' '.join(launch) or 'as is'}: {r.stderr.strip()[:300]}"
    return f"a ThreadSanitizer program does not run here ({why.strip()})"


def _run(
    exe: Path, scenario: str, n: int, seed: int, limit_s: int = 40
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **RUN_ENV, "TSAN_HARNESS_LIMIT_S": str(limit_s)}
    return subprocess.run(
        [*LAUNCH, str(exe), scenario, str(n), str(seed)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


# ---- planted bugs ------------------------------------------------------------------------
class Plant(NamedTuple):
    file: str  # in shmwheel/native
    old: str  # text that must be there exactly once
    new: str  # what the plant puts in its place
    scenario: str
    catches: str  # what the run's output says when it is caught
    build: str | int  # "tsan", or the plain build with this many operations per client


PLANTS: dict[str, Plant] = {
    # the client publishes SUBMITTED without release. Its submit record's ring still
    # orders the record for the coordinator; what loses its order is a slot reached through
    # the state word alone: a cancelled one the reaper retires from its bucket (relinked by
    # a repair), whose block owner it reads
    "submitted-relaxed": Plant(
        "slot_record.c",
        "slot_move(gs_word(mem, node), GS_MAKE(HANDLE_GEN(h), ST_RESERVED),\n"
        "              GS_MAKE(HANDLE_GEN(h), ST_SUBMITTED), TR_PUBLISH);",
        "relaxed_store(gs_word(mem, node), GS_MAKE(HANDLE_GEN(h), ST_SUBMITTED));",
        "repair",
        "ThreadSanitizer: data race",
        "tsan",
    ),
    # a ring's head published without release: the consumer reads records unordered
    "ring-head-relaxed": Plant(
        "ring.h",
        "if (n) ring_store_release(&r->w[RING_HEAD], head + n);",
        "if (n) relaxed_store(&r->w[RING_HEAD], head + n);",
        "ring",
        "ThreadSanitizer: data race",
        "tsan",
    ),
    # a ring's tail stored without release: the producer overwrites a record still read
    "ring-tail-relaxed": Plant(
        "ring.h",
        "ring_store_release(&r->w[RING_TAIL], relaxed_load(&r->w[RING_TAIL]) + n);",
        "relaxed_store(&r->w[RING_TAIL], relaxed_load(&r->w[RING_TAIL]) + n);",
        "ring",
        "ThreadSanitizer: data race",
        "tsan",
    ),
    # a dispatch record claimed without the CAS (a plain store of the claim): a stuck
    # executor that wakes runs a record the reaper took, which another executor runs too
    "claim-no-cas": Plant(
        "ring.h",
        "    return __atomic_compare_exchange_n(w, &seen, seen | (who << DR_CLAIM_SHIFT), 0,\n"
        "                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);",
        "    __atomic_store_n(w, seen | (who << DR_CLAIM_SHIFT), __ATOMIC_RELEASE);\n    return 1;",
        "claim",
        "ran twice",
        200000,
    ),
    # a freed slot's meta word rewritten with a plain store while a reset reads it
    "meta-plain-store": Plant(
        "slots.c",
        "relaxed_store(side_meta(s, slot), 0);\n    wheel_free_slot(mem, slot, tr);",
        "*side_meta(s, slot) = 0;\n    wheel_free_slot(mem, slot, tr);",
        "watch",
        "ThreadSanitizer: data race",
        "tsan",
    ),
    # the freer marks a waiter's entry done without release: the client's read of the
    # outcome in it is no longer ordered after the freer's write of it (an ordering bug)
    "done-relaxed": Plant(
        "waiters.c",
        "if (__atomic_compare_exchange_n(kw, &seen, want, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))",
        "if (__atomic_compare_exchange_n(kw, &seen, want, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))",
        "notify",
        "ThreadSanitizer: data race",
        "tsan",
    ),
    # a client empties its entry without release: its read of the outcome races the next
    # claimant's write of the value (the race this harness found in the first version)
    "release-relaxed": Plant(
        "waiters.c",
        "if (__atomic_compare_exchange_n(k, &seen, WK_EMPTY, 0, __ATOMIC_RELEASE,",
        "if (__atomic_compare_exchange_n(k, &seen, WK_EMPTY, 0, __ATOMIC_RELAXED,",
        "notify",
        "ThreadSanitizer: data race",
        "tsan",
    ),
    # the freer looks in the first of a handle's two buckets only: a waiter placed in the
    # second is never told (a functional failure: its entry is never done)
    "waiter-one-bucket": Plant(
        "waiters.c",
        "    for (int b = 0; b < 2; b++)\n        for (int k = 0; k < WAIT_WAYS; k++) {\n"
        "            i64 e = first[b] + k, *kw",
        "    for (int b = 0; b < 1; b++)\n        for (int k = 0; k < WAIT_WAYS; k++) {\n"
        "            i64 e = first[b] + k, *kw",
        "notify",
        "a lost outcome",
        "tsan",
    ),
    # the count of asks under way kept as a flag: one client's release zeroes it while
    # another still waits, whose handle's freer then skips the buckets (purgatory.c, 6)
    "waiting-flag": Plant(
        "waiters.c",
        "__atomic_fetch_sub(&s->waiters[WA_WAITING], 1, __ATOMIC_RELAXED);",
        "__atomic_store_n(&s->waiters[WA_WAITING], 0, __ATOMIC_RELAXED);",
        "notify",
        "a lost outcome",
        "tsan",
    ),
    # an operation's count is not zeroed as its block is stored: what the block held before
    # (the harness's clients leave a large count there) completes it short
    "count-not-zeroed": Plant(
        "purgatory.c",
        "        hdr[OPH_COUNT] = 0;",
        "",
        "watch",
        "completed with",
        "tsan",
    ),
    # gs_cas without acquire-release: a reset's put-back no longer orders the deadline it
    # wrote before the reaper's plain reads of it once it fires (slot_journal_fired)
    "cas-relaxed": Plant(
        "atomics.h",
        "won = __atomic_compare_exchange_n(w, &seen, want, 0, __ATOMIC_ACQ_REL,\n"
        "                                          __ATOMIC_ACQUIRE);",
        "won = __atomic_compare_exchange_n(w, &seen, want, 0, __ATOMIC_RELAXED,\n"
        "                                          __ATOMIC_RELAXED);",
        "reset",
        "ThreadSanitizer: data race",
        "tsan",
    ),
    # the cascade as it was before link_due: a timer a reset made due already is put in a
    # bucket behind the clock, and advance can spin on it forever holding the lock (a
    # liveness failure: the run's watchdog says STUCK). At full speed, hit in most runs.
    "cascade-behind-clock": Plant(
        "wheel.c",
        "link_due(mem, nd, node);   /* a reset made it due",
        "link_tail(nd, (k - 1) * nbuckets + fmodp(fdiv(r, tl), nbuckets), node);"
        " announce(mem, k - 1, fmodp(fdiv(r, tl), nbuckets), fdiv(r, tl) * tl);   /*",
        "reset",
        "STUCK",
        60000,
    ),
}


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The harness built with TSan and plain, and one build per planted bug (each object
    compiled once; two compilers at a time)."""
    tmp = tmp_path_factory.mktemp("tsan")
    why = _tsan_unavailable(tmp)
    if why is not None:
        pytest.skip(f"no ThreadSanitizer with this gcc ({why})")
    flags = {"tsan": TSAN_FLAGS, "plain": PLAIN}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        base = {kind: _compile(NATIVE, _sources(NATIVE), tmp / f"obj-{kind}", f, pool)
                for kind, f in flags.items()}  # fmt: skip

        def plant(name: str) -> Path:
            file, old, new, _, _, build = PLANTS[name]
            tree = tmp / f"plant-{name}"
            shutil.copytree(NATIVE, tree)
            text = (tree / file).read_text()
            assert text.count(old) == 1, f"plant {name}: its target text is not in {file} once"
            (tree / file).write_text(text.replace(old, new))
            kind = "tsan" if build == "tsan" else "plain"
            # a planted .c file is compiled alone, beside the others' objects; a planted
            # header may be in any file: all of them again
            srcs = [tree / file] if file.endswith(".c") else _sources(tree)
            objs = {**base[kind], **_compile(tree, srcs, tree / "obj", flags[kind])}
            return _link(objs, tmp / f"harness-{name}", flags[kind])

        plants = {name: pool.submit(plant, name) for name in PLANTS}
        out = {kind: _link(base[kind], tmp / f"harness-{kind}", f) for kind, f in flags.items()}
        out.update({name: job.result() for name, job in plants.items()})
    return out


def _summary(out: str, scenario: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith(f"{scenario}: ")]
    assert lines, f"no summary line:\n{out[-3000:]}"
    return lines[-1]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_protocol_is_race_free_and_holds(builds: dict[str, Path], scenario: str) -> None:
    n, shown = SCENARIOS[scenario]
    runs = [(builds["tsan"], n, seed) for seed in SEEDS] + [(builds["plain"], 10 * n, SEEDS[0])]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda r: _run(r[0], scenario, r[1], r[2]), runs))
    seen = {pattern: 0 for pattern in shown}
    lines = []
    for (exe, _, seed), r in zip(runs, results, strict=True):
        where = f"{exe.name} {scenario} seed {seed}"
        assert r.returncode != TSAN_EXIT, f"{where}: ThreadSanitizer reported:\n{r.stderr[-6000:]}"
        assert r.returncode == 0, f"{where}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
        line = _summary(r.stdout, scenario)
        assert "failures 0" in line, line
        lines.append(f"{where}: {line}")
        for pattern in shown:
            m = re.search(pattern, line)
            assert m, f"{where}: no {pattern!r} in {line}"
            seen[pattern] += int(m.group(1))
    # each path the scenario is there to exercise was taken in some run (which run takes a
    # timing-dependent one, a full table, say, depends on the interleaving)
    for pattern, count in seen.items():
        assert count > 0, f"no run shows {pattern!r}:\n" + "\n".join(lines)


@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_is_caught(builds: dict[str, Path], plant: str) -> None:
    """A run meets a bug only if its threads interleave so: up to twelve seeds, stopping
    at the first catch (six seeds once all missed the relaxed SUBMITTED store)."""
    scenario, catches, build = PLANTS[plant].scenario, PLANTS[plant].catches, PLANTS[plant].build
    n, limit = (SCENARIOS[scenario][0], 40) if build == "tsan" else (int(build), 4)
    outs = []
    for seed in range(1, 13):
        r = _run(builds[plant], scenario, n, seed, limit)
        outs.append(f"seed {seed}: exit {r.returncode}\n{(r.stdout + r.stderr)[-1500:]}")
        if r.returncode != 0 and catches in r.stdout + r.stderr:
            return
    pytest.fail(f"planted {plant} went unnoticed:\n" + "\n".join(outs))
