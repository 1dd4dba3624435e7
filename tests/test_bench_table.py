"""The bench's table of workloads as data (shmwheel/bench/table/workloads.toml): how its
text is filled in (``fill``: an entry naming a list stands for one entry per value, the
list named first varying slowest; naming an empty list, none), that the Redis peer's rows
appear only when it runs, and that the data file ships in the wheel (package data)."""

import tomllib
from fnmatch import fnmatch
from pathlib import Path

from shmwheel.bench.table import fill
from shmwheel.bench.table.registry import REDIS_KEYS, workloads

ROOT = Path(__file__).resolve().parent.parent


def test_an_entry_naming_two_lists_stands_for_every_pair_first_named_slowest():
    names = {"S": "shmwheel", "k": [1, 2], "peer": ["heap", "asyncio"]}
    assert fill.expand([["{S} {k}", "{peer} {k}"], "plain"], names) == [
        ["shmwheel 1", "heap 1"],
        ["shmwheel 1", "asyncio 1"],
        ["shmwheel 2", "heap 2"],
        ["shmwheel 2", "asyncio 2"],
        "plain",
    ]


def test_an_entry_naming_an_empty_list_is_left_out():
    names = {"redis": [], "k": [1]}
    assert fill.expand(["{redis} ZADD", "{k} producers"], names) == ["1 producers"]
    assert fill.expand(["{redis} ZADD"], {"redis": ["redis"]}) == ["redis ZADD"]


def test_a_workloads_lists_name_earlier_ones_and_the_measuring_modules_constants():
    class Module:
        QS = ("p50", "max")

    own = fill.with_lists(
        {"q": "{lease.QS}", "peer": ["heap", "{redis} claim"], "who": ["us", "{peer}"]},
        {"lease": Module, "redis": []},
    )
    assert (own["q"], own["peer"], own["who"]) == (["p50", "max"], ["heap"], ["us", "heap"])
    goal = {"figure": "{q}: {who}", "target": 2.0}
    assert fill.expand([goal], own)[1] == {"figure": "p50: heap", "target": 2.0}


def test_the_redis_peers_rows_and_notes_appear_only_when_it_runs():
    def redis_texts(ws):
        return {w.key for w in ws for text in [*(x for r in w.rows for x in r), *w.notes]
                if text.startswith("redis") or ": redis" in text}  # fmt: skip

    assert redis_texts(workloads(redis=False)) == set()
    assert redis_texts(workloads(redis=True)) == REDIS_KEYS


def test_the_table_ships_in_the_wheel():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["shmwheel"]
    data = ROOT / "shmwheel" / "bench" / "table" / "workloads.toml"
    assert data.exists()
    shipped = str(data.relative_to(ROOT / "shmwheel"))
    assert any(fnmatch(shipped, p) for p in patterns), patterns
