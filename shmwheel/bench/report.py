"""What the bench prints: the machine it ran on, one table per workload (what it measures,
shmwheel's figures, each peer's beside them and how shmwheel compares), the further
figures and notes, and the goal verdicts with what each goal is for. Every line fits
``WIDTH`` columns; every figure printed is one of the medians the JSON keeps.
"""

from __future__ import annotations

import os
import platform
import sysconfig
import textwrap
from typing import Any, NamedTuple

from .workload import Goal, Workload

WIDTH = 100  # no printed line is longer


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numpy

    cc = sysconfig.get_config_var("CC") or "cc"
    return {
        "cores": len(os.sched_getaffinity(0)),
        "cpu": model,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "native": f"C extension built with {cc.split()[0]}",
        "loadavg_start": os.getloadavg()[0],
    }


def wrap(text: str, indent: str = "", more: str = "") -> str:
    """`text` as lines of at most WIDTH columns: the first starting with `indent`, the
    others with `more` (default: `indent`). Paragraphs (lines of `text`) stay apart."""
    out = []
    for para in text.split("\n"):
        out += textwrap.wrap(
            para,
            WIDTH,
            initial_indent=indent,
            subsequent_indent=more or indent,
            break_on_hyphens=False,
        ) or [""]
    return "\n".join(out)


class Unit(NamedTuple):
    meaning: str  # what the numbers count
    better: str  # "higher" or "lower" is better
    ahead: str  # the word for shmwheel ahead of a peer ("2.41x faster")
    behind: str  # ... and behind it ("1.45x slower")


UNITS = {
    "ops/s": Unit("operations per second", "higher", "faster", "slower"),
    "B": Unit("bytes", "lower", "smaller", "larger"),
    "ms": Unit("milliseconds", "lower", "lower", "higher"),
    "us": Unit("microseconds", "lower", "lower", "higher"),
    "us/op": Unit("microseconds per operation", "lower", "lower", "higher"),
}
LOWER_IS_BETTER = tuple(k for k, u in UNITS.items() if u.better == "lower")

HOW_TO_READ = (
    "How to read: one table per workload. Its first line says what is measured and whether "
    'higher or lower is better. Each "shmwheel ..." line is a figure of shmwheel\'s; each '
    '"vs ..." line under it is a peer measured in the same run, and its last column says how '
    'shmwheel compares with that peer: "2.41x faster" means shmwheel\'s rate is 2.41 times '
    "the peer's, \"1.20x higher\" for a latency means shmwheel's is 1.20 times the peer's "
    "(worse, since lower is better). Figures are medians of the repetitions; [n] marks a note "
    "under the table; --json keeps every repetition."
)


def fmt(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value / 1e6:,.1f} MB" if value >= 1e6 else f"{value:,.0f} B"
    if unit == "us":
        return f"{value:,.0f} us"
    if unit == "us/op":
        return f"{value:,.2f} us/op"
    if unit == "ms":
        return f"{value:,.{0 if value >= 100 else 1 if value >= 10 else 3}f} ms"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {suffix}/s"
    return f"{value:.0f} /s"


def times(x: float) -> str:
    """A multiple, to about three significant digits, never in exponent form."""
    if x < 9.995:
        return f"{x:.2f}x"
    if x < 99.95:
        return f"{x:.1f}x"
    return f"{float(f'{x:.3g}'):,.0f}x"


def advantage(mine: float, theirs: float, unit: str) -> float | None:
    """How many times better shmwheel's figure is than the peer's (above 1: shmwheel is
    ahead), whichever way is better for `unit`; None if it cannot be said (a zero)."""
    top, bottom = (theirs, mine) if unit in LOWER_IS_BETTER else (mine, theirs)
    return top / bottom if bottom > 0 and top > 0 else None


def reads(adv: float | None, unit: str) -> str:
    """`advantage` in words: "2.41x faster", "1.45x slower", "3.40x smaller"."""
    u = UNITS.get(unit, UNITS["ops/s"])
    if adv is None:
        return "-"
    return f"{times(adv)} {u.ahead}" if adv >= 1 else f"{times(1 / adv)} {u.behind}"


_COUNTS = (
    "early",
    "completed",
    "shmwheel executors",
    "shmwheel modules",
    "redis timers",
    "timers",
    "pending",
)


def figure_text(w: Workload, key: str, value: float) -> str:
    """A further figure of `w` in its own unit: ratios as multiples, counts as counts."""
    if key.startswith("ratio"):
        return times(value)
    if key.endswith("(ms)"):  # a latency among rates: its own unit names it
        return f"{value:,.0f} ms" if value >= 100 else f"{value:.3f} ms"
    if key.endswith("CPU us per timer"):
        return f"{value:.3f} us"
    if key.startswith("journal") and "bytes" in key:
        return fmt(value, "B") if "per timer" not in key else f"{value:,.1f} B"
    if key.startswith(_COUNTS) or key.startswith("journal"):
        return f"{value:,.0f}"
    return fmt(value, w.unit)


def further(w: Workload) -> list[str]:
    """The figures of `w` its rows do not compare: its notes first, then any other."""
    shown = {k for row in w.rows for k in row}
    keys = list(w.median())
    return [k for k in w.notes if k in keys] + [
        k for k in keys if k not in shown and k not in w.notes
    ]


class Line(NamedTuple):
    indent: str
    name: str
    value: str
    compare: str  # "2.41x faster [1]" or ""


def lines_of(w: Workload) -> tuple[list[Line], list[str]]:
    """The table lines of `w` and its footnotes (marked [1], [2] ... on the lines whose
    figure `w.explain` explains)."""
    med = w.median()
    marks: dict[str, int] = {}

    def mark(*keys: str) -> str:
        out = ""
        for k in keys:
            if k in w.explain:
                marks.setdefault(k, len(marks) + 1)
                out += f" [{marks[k]}]"
        return out

    out: list[Line] = []
    last = None
    for mine, theirs in w.rows:
        a, b = med[mine], med[theirs]
        if mine != last:
            out.append(Line("    ", mine, fmt(a, w.unit), mark(mine).strip()))
            last = mine
        cmp = reads(advantage(a, b, w.unit), w.unit) + mark(mine, theirs)
        out.append(Line("      vs ", theirs, fmt(b, w.unit), cmp))
    rest = further(w)
    if rest:
        out.append(Line("  ", "further figures:", "", ""))
        out += [Line("    ", k, figure_text(w, k, med[k]), mark(k).strip()) for k in rest]
    notes = [
        wrap(w.explain[k], f"  [{i}] ", " " * (len(str(i)) + 5))
        for k, i in sorted(marks.items(), key=lambda kv: kv[1])
    ]
    return out, notes


def comparisons(w: Workload) -> list[dict[str, Any]]:
    """The rows of `w` as the JSON keeps them: both figures, shmwheel's advantage (above 1:
    ahead) and the words the table prints for it, and the note on either figure."""
    med = w.median()
    out = []
    for mine, theirs in w.rows:
        adv = advantage(med[mine], med[theirs], w.unit)
        out.append(
            {
                "shmwheel": mine,
                "baseline": theirs,
                "shmwheel_value": med[mine],
                "baseline_value": med[theirs],
                "advantage": adv,
                "reads": reads(adv, w.unit),
                "notes": [w.explain[k] for k in (mine, theirs) if k in w.explain],
            }
        )
    return out


def _wrap_name(indent: str, name: str, width: int) -> list[str]:
    """A figure's name over lines of `width`, the later ones indented 2 more, broken after
    a comma where that fits ("..., batched (100 per key)" stays whole), else at spaces."""
    more = " " * (len(indent) + 2)
    glued = name.replace(", ", ",\x00").replace(" ", "\x01").replace("\x00", " ")
    parts = textwrap.wrap(
        glued, width, initial_indent=indent, subsequent_indent=more, break_long_words=False
    )
    if all(len(p) <= width for p in parts):
        return [p.replace("\x01", " ") for p in parts]
    return textwrap.wrap(
        name, width, initial_indent=indent, subsequent_indent=more, break_long_words=False
    )


def heading(w: Workload) -> str:
    u = UNITS.get(w.unit, UNITS["ops/s"])
    return f"{w.label}: {u.meaning}, {u.better} is better"


def table(selected: list[Workload]) -> str:
    """Every selected workload's table, in order, one column layout for all."""
    blocks = [(w, *lines_of(w)) for w in selected]
    every = [ln for _, lines, _ in blocks for ln in lines]
    val_w = max([len(ln.value) for ln in every] + [1])
    cmp_w = max([len(ln.compare) for ln in every] + [0])
    longest = max([len(ln.indent + ln.name) for ln in every] + [1])
    name_w = min(longest + 2, WIDTH - val_w - 3 - cmp_w)
    out = []
    for w, lines, notes in blocks:
        out.append(wrap(heading(w)))
        if w.about:
            out.append(wrap(w.about, "  "))
        for ln in lines:
            if not ln.value:  # a sub-heading
                out.append(ln.indent + ln.name)
                continue
            name = ln.indent + ln.name
            if len(name) + 2 + len(ln.value) > name_w + val_w:  # wrap the name
                parts = _wrap_name(ln.indent, ln.name, name_w - 2)
                out += parts[:-1]
                name = parts[-1]
            value = ln.value.rjust(name_w + val_w - len(name))
            out.append(f"{name}{value}  {ln.compare}".rstrip())
        out += notes
        out.append("")
    return "\n".join(out).rstrip("\n")


def goal_verdicts(selected: list[Workload]) -> list[dict[str, Any]]:
    """One verdict per goal of the selected workloads: the goal, its figure's median, met
    or not, and what the goal is for (`why`) and what a miss means (`miss`). A figure the
    run does not have (a recorded run from before the goal's workload measured it) is
    neither: value and met are None, and the report says it was not measured."""
    out = []
    for w in selected:
        med = w.median()
        for g in (Goal(*x) for x in w.goals):
            v = med.get(g.figure)
            met = None if v is None else v >= g.target if g.op == ">=" else v <= g.target
            out.append(
                {
                    "goal": g.what,
                    "figure": g.figure,
                    "op": g.op,
                    "target": g.target,
                    "value": v,
                    "unit": _goal_unit(w, g.figure),
                    "met": None if met is None else bool(met),
                    "workload": w.key,
                    "w": w.wid,
                    "why": g.why,
                    "miss": g.miss,
                }
            )
    return out


def _goal_unit(w: Workload, figure: str) -> str:
    if figure.startswith(("early", "ratio")):
        return ""
    return "ms" if figure.endswith("(ms)") else w.unit


def _show(x: float, g: dict[str, Any]) -> str:
    if g["unit"] == "B":
        return f"{x:,.2f} B"  # the byte goals are tight: show the fraction
    if g["figure"].startswith("ratio"):
        return f"{x:.2f}x"
    if g["unit"] == "ms":  # as precise as the goal's scale needs: 0.166 ms, 1,761 ms
        return f"{x:,.0f} ms" if x >= 100 else f"{x:.3g} ms"
    return fmt(x, g["unit"]) if g["unit"] else f"{x:,.0f}"


def goals_text(verdicts: list[dict[str, Any]], quick: bool = False, busy: str = "") -> str:
    """The goals, one paragraph each: the verdict and figure, what the goal is for, and
    for a miss what it means; `busy` says why this run's figures may be low (the summary
    line is separate)."""
    if not verdicts:
        return ""
    missed = [g for g in verdicts if g["met"] is False]
    unmeasured = [g for g in verdicts if g["met"] is None]
    out = [
        f"Goals: {len(verdicts)} checked against the medians above: "
        f"{len(verdicts) - len(missed) - len(unmeasured)} met, {len(missed)} MISSED"
        + (f", {len(unmeasured)} not measured" if unmeasured else "")
    ]
    if quick:
        out.append(
            wrap(
                "(--quick: small sizes and one repetition; the goals are set for the "
                "default run's sizes, so read these verdicts as a smoke check)",
                "  ",
            )
        )
    said = ""
    if busy:
        out.append(wrap(f"({busy})", "  "))
    for g in verdicts:
        v, t = g["value"], g["target"]
        if v is None:
            head = f"n/a     {g['w'] + ' ' if g['w'] else ''}{g['goal']}: not measured in this run"
            out.append(wrap(head, "  ", " " * 10))
            continue
        how = "" if t == 0 else f" ({v / t:.3g}x the {'goal' if g['op'] == '>=' else 'limit'})"
        head = (
            f"{'met' if g['met'] else 'MISSED':<7} {g['w'] + ' ' if g['w'] else ''}"
            f"{g['goal']} {g['op']} {_show(t, g)}: {_show(v, g)}{how}"
        )
        out.append(wrap(head, "  ", " " * 10))
        why = g["why"] or "(not stated in the registry)"
        out.append(wrap(f"for: {why if why != said else 'as above'}", " " * 10))
        said = why
        if not g["met"] and g["miss"]:
            out.append(wrap(f"a miss: {g['miss']}", " " * 10))
    return "\n".join(out)


STRICT_STATUS = 3  # the exit status of a --strict run that missed a goal


def summary(verdicts: list[dict[str, Any]], strict: bool, leaked: list[str]) -> tuple[str, int]:
    """The run's last line and its exit status: 1 if a service left files in /dev/shm (a
    fault of the run), else STRICT_STATUS under --strict if a goal was missed, else 0 (a
    missed goal is a finding of the measurement, reported here, not a failed run)."""
    missed = [g for g in verdicts if g["met"] is False]
    names = ", ".join(f"{g['w'] + ' ' if g['w'] else ''}{g['goal']}" for g in missed)
    if leaked:
        status = 1
    elif strict and missed:
        status = STRICT_STATUS
    else:
        status = 0
    unmeasured = sum(g["met"] is None for g in verdicts)
    gap = f"; {unmeasured} not measured in this run" if unmeasured else ""
    if not verdicts:
        text = "Summary: no goal applies to the selected workloads."
    elif missed:
        text = f"Summary: {len(missed)} of {len(verdicts)} goals MISSED ({names}){gap}."
    elif unmeasured:
        text = f"Summary: {len(verdicts) - unmeasured} of {len(verdicts)} goals met{gap}."
    else:
        text = f"Summary: all {len(verdicts)} goals met."
    if leaked:
        text += f" Exit status 1: services left files in /dev/shm: {', '.join(leaked)}."
    elif missed and strict:
        text += f" Exit status {STRICT_STATUS} (--strict: a missed goal fails the run)."
    elif missed:
        text += (
            " Exit status 0: a miss is a measured finding, not a failed run; "
            f"--strict exits {STRICT_STATUS} on a miss."
        )
    return wrap(text), status
