"""What a new user meets, said plainly: a taken service name says who holds it, a
subcommand's unknown option prints that subcommand's usage (one line), non-positive
intervals are refused, ``status --json`` keeps arrays on one line, ids read in hex, and
executors printing at once never mix inside a line. (The docs' examples run in
test_doc_examples.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import MINE

import shmwheel
from shmwheel.cli.observe import compact_json

ROOT = Path(__file__).resolve().parent.parent
TASKS = {"noop": "shmwheel.examples.tasks:noop"}


def test_a_taken_name_says_the_holder_runs_and_its_owner_pid():
    name = f"{MINE}taken"
    with shmwheel.TimerService(name, tasks=TASKS, executors=1, capacity=1000):
        second = shmwheel.TimerService(name, tasks=TASKS, executors=1, capacity=1000)
        with pytest.raises(shmwheel.ShmwheelError) as e:
            second.start()
    msg = str(e.value)
    assert "exists already" in msg and "is running" in msg, msg
    assert f"owner pid {os.getpid()}" in msg, msg


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["status", "orders", "--bogus"], "usage: shmwheel status"),
        (["top", "orders", "--bogus"], "usage: shmwheel top"),
        (["ls", "--bogus"], "usage: shmwheel ls"),
        (["journal", "check", "/tmp", "--bogus"], "usage: shmwheel journal check"),
    ],
)
def test_an_unknown_option_prints_its_subcommands_usage(cli, args, usage):
    code, _, err = cli(*args)
    assert code == 2 and len(err.splitlines()) == 1 and f"({usage} " in err, err
    assert "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize(
    "args",
    [
        ["status", "orders", "--sample", "-1"],
        ["status", "orders", "--sample", "inf"],
        ["top", "orders", "--interval", "0"],
        ["top", "orders", "--interval", "-0.5"],
        ["top", "orders", "--interval", "nan"],
    ],
)
def test_negative_samples_and_non_positive_intervals_are_refused(cli, args):
    code, _, err = cli(*args)
    assert code == 2 and "give a number of seconds" in err, err
    assert f"usage: shmwheel {args[0]}" in err, err


def test_compact_json_keeps_flat_arrays_on_one_line_and_stays_json():
    value = {"a": [1, 2, 3], "b": {"c": [], "d": [{"e": 1}, [4, 5]]}, "f": "x", "g": {}}
    text = compact_json(value)
    assert json.loads(text) == value
    assert '"a": [1, 2, 3]' in text and '"e": 1' in text
    assert text.splitlines()[1] == '  "a": [1, 2, 3],'


def test_status_json_puts_the_histogram_on_one_line(cli):
    with shmwheel.TimerService(f"{MINE}json", tasks=TASKS, executors=1, capacity=1000) as svc:
        code, out, err = cli("status", svc.name, "--json", "--sample", "0.05")
    assert code == 0, err
    st = json.loads(out)
    lists = [v for v in _walk(st) if isinstance(v, list) and len(v) >= 64]
    assert lists, "no long array in the status (the lateness histogram)"
    assert len(out.splitlines()) < 200, f"{len(out.splitlines())} lines"


def _walk(value: object):
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def test_handle_reprs_show_ids_in_hex():
    with (
        shmwheel.TimerService(f"{MINE}hex", tasks=TASKS, executors=1, capacity=1000) as svc,
        svc.client() as c,
    ):
        h = c.schedule("noop", delay_ms=60_000)
        assert f"id={h.id:#x}" in repr(h), repr(h)
        assert h.cancel()


def test_a_call_that_does_not_fit_schedule_names_schedule():
    with (
        shmwheel.TimerService(f"{MINE}sig", tasks=TASKS, executors=1, capacity=1000) as svc,
        svc.client() as c,
    ):
        with pytest.raises(TypeError, match=r"^schedule\(\) takes") as e:
            c.schedule("noop", None, 5)  # a delay given by position
        assert "_schedule" not in str(e.value)


def test_executors_printing_at_once_never_mix_inside_a_line():
    # two executors, eight tasks due at once, each printing 300 lines in parts, with
    # PYTHONUNBUFFERED=1 (the case that mixed): every line must come out whole
    lines, tasks = 300, 8
    driver = textwrap.dedent(
        f"""
        import time
        import shmwheel

        with shmwheel.TimerService(
            {MINE + "lines"!r}, tasks={{"chat": "line_tasks:chatter"}}, executors=2
        ) as svc, svc.client() as c:
            hs = [c.schedule("chat", {{"tag": f"t{{n}}", "lines": {lines}}}, delay_ms=200)
                  for n in range({tasks})]
            print([h.result(timeout=30) for h in hs], flush=True)
        """
    )
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        SHMWHEEL_LOG_LEVEL="WARNING",
    )
    r = subprocess.run(
        [sys.executable, "-c", driver],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.splitlines()
    assert out[-1] == repr(["ok"] * tasks), out[-3:]
    chat = out[:-1]
    good_out = re.compile(r"<t\d+ \d+ x{100}>")
    bad = [line for line in chat if not good_out.fullmatch(line)]
    assert not bad, f"{len(bad)} mixed stdout lines, e.g. {bad[:3]}"
    assert len(chat) == lines * tasks
    good_err = re.compile(r"<t\d+ \d+ err>")
    err = [line for line in r.stderr.splitlines() if line.startswith("<t")]
    bad = [line for line in r.stderr.splitlines() if "<t" in line and not good_err.fullmatch(line)]
    assert not bad, f"{len(bad)} mixed stderr lines, e.g. {bad[:3]}"
    assert len(err) == lines * tasks
