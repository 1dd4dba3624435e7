"""Every ```python block of README.md and docs/*.md runs: a doc that drifts from the code
fails here, not in a new user's hands.

Each block is run as a program of its own, saved as a file as the quick start tells a reader
to (``python example.py``: a block that starts processes by spawning them needs its
``if __name__ == "__main__":`` guard then, and ``python -c`` would not show it), from the
repository root, with the root on PYTHONPATH, with a timeout, several at a time (most of
their time is spent waiting on a service's timers). A block runs when it
exits 0; one that starts a timer or a service must print something (a demo that shows
nothing shows nothing works), and none may leave a segment of its own behind in /dev/shm.

A block that cannot run here is marked in the Markdown itself, on the line right before
its fence, so that a reader sees why:

    <!-- not run: needs a journal directory and a Spark session -->

Such blocks are few (API signatures, fragments with placeholders, a Spark job on someone's
data), and their number is checked: MAX_NOT_RUN below."""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
MAX_NOT_RUN = 6  # raise it only with a reason a reader of the docs would accept
TIMEOUT_S = 60
PARALLEL = 4


@dataclass(frozen=True)
class Block:
    """One fenced ```python block: where it is, its code, and why it is not run (or None)."""

    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def extract(path: Path) -> list[Block]:
    """The ```python blocks of the Markdown file `path`, in order."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                i += 1
            m = NOT_RUN.match(lines[start - 1].strip()) if start else None
            code = "\n".join(lines[start + 1 : i]) + "\n"
            blocks.append(Block(path, start + 1, code, m["reason"] if m else None))
        i += 1
    return blocks


BLOCKS = [b for path in DOCS for b in extract(path)]
RUN = [b for b in BLOCKS if b.not_run is None]


@dataclass(frozen=True)
class Result:
    """What running a block gave."""

    pid: int
    returncode: int
    stdout: str
    stderr: str


def run_block(block: Block) -> Result:
    """The block as a program of its own, run from a file: its pid, exit status and output."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory(prefix="shmwheel-doc-") as tmp:
        script = Path(tmp) / "example.py"
        script.write_text(block.code)
        with subprocess.Popen(
            [sys.executable, str(script)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as p:
            try:
                out, err = p.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                err += f"\ntimed out after {TIMEOUT_S} s"
            return Result(p.pid, p.returncode, out, err)


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    """Every runnable block's result, run PARALLEL at a time."""
    with cf.ThreadPoolExecutor(PARALLEL) as pool:
        return dict(zip([b.where for b in RUN], pool.map(run_block, RUN), strict=True))


def test_the_docs_have_python_examples_and_few_are_not_run():
    assert len(RUN) >= 10, [b.where for b in RUN]
    skipped = [(b.where, b.not_run) for b in BLOCKS if b.not_run is not None]
    assert len(skipped) <= MAX_NOT_RUN, skipped
    assert all(reason for _, reason in skipped), f"a not-run mark without a reason: {skipped}"


def test_every_not_run_mark_is_right_before_a_python_block():
    for path in DOCS:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if NOT_RUN.match(line.strip()):
                nxt = lines[n + 1].strip() if n + 1 < len(lines) else ""
                assert nxt == "```python", f"{path.name}:{n + 1}: a mark before {nxt!r}"


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_example_runs(block: Block, results: dict[str, Result]):
    r = results[block.where]
    assert r.returncode == 0, f"{block.where} exited {r.returncode}:\n{r.stderr[-3000:]}"
    if "TimerService(" in block.code or "SystemTimer(" in block.code:  # a demo shows something
        assert r.stdout.strip(), f"{block.where} printed nothing (stderr: {r.stderr[-2000:]})"


def test_examples_leave_nothing_in_dev_shm(results: dict[str, Result]):
    # a service's generated name is s<pid>-<hex>, the pid of the process that made it
    prefixes = {f"shmwheel.s{r.pid}-": where for where, r in results.items()}
    left = [
        (prefixes[pre], p.name)
        for p in Path("/dev/shm").iterdir()
        for pre in prefixes
        if p.name.removeprefix("sem.").startswith(pre)
    ]
    assert not left, f"segments or semaphores left by examples: {left}"
