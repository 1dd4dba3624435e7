"""Reading back what `python -m shmwheel.bench` prints (used by tests/test_bench_report.py on
the recorded run's figures and by tests/test_bench.py on a real --quick run): the tables'
rows (``printed_figures``), each figure checked against its workload's median and each
peer's comparison against the two figures (``check_tables``), the lines over the width
(``longest_lines``)."""

import re

from shmwheel.bench.workload import Workload

WIDTH = 100
LOWER_IS_BETTER = {"B", "ms", "us", "us/op"}  # written here, not taken from the report
SCALE = {"/s": 1, "k/s": 1e3, "M/s": 1e6, "G/s": 1e9, "B": 1, "MB": 1e6, "x": 1, "": 1}
SCALE |= {"ms": 1, "us": 1, "us/op": 1}
_HEADING = re.compile(
    r"^(?P<label>\S.*): (?P<what>operations per second|bytes|milliseconds|microseconds"
    r"|microseconds per operation), (?P<better>higher|lower) is better$"
)
_ROW = re.compile(
    r"^(?P<indent> {2,})(?P<vs>vs )?(?P<name>\S.*?) {2,}"
    r"(?P<num>-?[\d,]*\.?\d+)(?P<x>x)?(?: (?P<unit>[kMG]?/s|B|MB|ms|us|us/op))?"
    r"(?:  (?P<tail>.+))?$"
)
_COMPARE = re.compile(r"^(?P<times>[\d,.]+)x (?P<word>\w+)(?: \[\d+\])*$")


def longest_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


def printed_figures(text: str) -> dict[str, list[dict]]:
    """{table heading's label: [row, ...]} read back from the printed tables: each row's
    figure name (a wrapped name joined), its number, unit, whether it is a peer's ("vs"),
    and the comparison printed after it."""
    tables: dict[str, list[dict]] = {}
    rows: list[dict] | None = None
    pending, pending_vs, in_notes = "", False, False
    for line in text.splitlines():
        m = _HEADING.match(line)
        if m:
            rows = tables.setdefault(m["label"], [])
            pending, pending_vs, in_notes = "", False, False
            continue
        if rows is None:
            continue
        if not line.startswith("  "):  # a blank line ends the table
            rows = None
            continue
        if re.match(r"^  \[\d+\] ", line):  # the notes under the table
            in_notes = True
        if in_notes:
            continue
        r = _ROW.match(line)
        if r:
            rows.append(
                {
                    "name": (pending + r["name"]).strip(),
                    "num": r["num"],
                    "unit": "x" if r["x"] else r["unit"] or "",
                    "vs": bool(r["vs"]) or pending_vs,
                    "tail": r["tail"] or "",
                }
            )
            pending, pending_vs = "", False
        elif len(line) - len(line.lstrip()) >= 4:  # a wrapped name, continued below
            # (what the table is about, and "further figures:", are indented 2)
            pending_vs = pending_vs or line.lstrip().startswith("vs ")
            pending += line.strip().removeprefix("vs ") + " "
    return tables


def _decimals(num: str) -> int:
    return len(num.split(".")[1]) if "." in num else 0


def close(row: dict, value: float) -> bool:
    """The printed number is `value` rounded as printed (to its last digit)."""
    shown = float(row["num"].replace(",", "")) * SCALE[row["unit"]]
    tol = 0.5 * 10 ** -_decimals(row["num"]) * SCALE[row["unit"]]
    # a multiple over 100 is printed to 3 significant digits
    if row["unit"] == "x" and abs(value) >= 100:
        tol = max(tol, abs(value) * 0.005)
    return abs(shown - value) <= tol * 1.0001 + 1e-12


def check_tables(text: str, selected: list[Workload]) -> None:
    """Every figure of every selected workload is printed, in its table, with its median;
    nothing else is; each peer's comparison says the right multiple and direction."""
    tables = printed_figures(text)
    assert set(tables) == {w.label for w in selected}, "a table is missing or unknown"
    for w in selected:
        med = w.median()
        rows = tables[w.label]
        assert {r["name"] for r in rows} == set(med), w.key
        last_mine = None
        for r in rows:
            assert close(r, med[r["name"]]), (w.key, r, med[r["name"]])
            if not r["vs"]:
                last_mine = r["name"]
                continue
            assert (last_mine, r["name"]) in w.rows, (w.key, r)
            a, b = med[last_mine], med[r["name"]]
            c = _COMPARE.match(r["tail"])
            assert c, (w.key, r)
            lower = w.unit in LOWER_IS_BETTER
            ahead = (a < b) if lower else (a > b)
            word = c["word"]
            good = {"faster", "smaller", "lower"}
            assert (word in good) == ahead or a == b, (w.key, r, a, b)
            multiple = max(a, b) / min(a, b)
            shown = float(c["times"].replace(",", ""))
            assert abs(shown - multiple) <= max(0.006 * multiple, 0.006), (w.key, r, multiple)
