"""What the bench prints: the machine it ran on, the comparison table, the further
figures, and the goal verdicts, all from the workloads' medians.
"""

from __future__ import annotations

import os
import platform
import sysconfig

from .workload import Workload


def machine() -> dict:
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


LOWER_IS_BETTER = ("B", "us", "ms", "us/op")


def fmt(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value:,.0f} B"
    if unit == "us":
        return f"{value:,.0f} us"
    if unit == "us/op":
        return f"{value:,.2f} us/op"
    if unit == "ms":
        return f"{value:,.3f} ms"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {suffix}/s"
    return f"{value:.0f} /s"


def ratio(a: float, b: float, unit: str) -> str:
    top, bottom = (b, a) if unit in LOWER_IS_BETTER else (a, b)
    return f"{top / bottom:>6.2g}x" if bottom > 0 else f"{'-':>7}"


def table(selected: list[Workload]) -> str:
    cells = []
    for w in selected:
        med = w.median()
        for i, (mine, theirs) in enumerate(w.rows):
            a, b = med[mine], med[theirs]
            cells.append(
                (
                    w.label if i == 0 else "",
                    f"{mine} {fmt(a, w.unit)}",
                    f"{theirs} {fmt(b, w.unit)}",
                    ratio(a, b, w.unit),
                )
            )
    widths = [
        max([len(h)] + [len(c[i]) for c in cells])
        for i, h in enumerate(("workload", "shmwheel", "baseline"))
    ]
    head = (
        f"{'workload':<{widths[0]}}  {'shmwheel':<{widths[1]}}  "
        f"{'baseline':<{widths[2]}}  {'ratio':>7}"
    )
    lines = [head, "-" * len(head)]
    for c in cells:
        lines.append(f"{c[0]:<{widths[0]}}  {c[1]:<{widths[1]}}  {c[2]:<{widths[2]}}  {c[3]}")
    return "\n".join(lines)


def notes(selected: list[Workload]) -> str:
    lines = []
    for w in selected:
        med = w.median()
        for k in w.notes:
            unit = (
                ""
                if k.startswith(
                    (
                        "early",
                        "completed",
                        "shmwheel executors",
                        "ratio",
                        "redis timers",
                        "timers",
                        "pending",
                        "journal",
                    )
                )
                else w.unit
            )
            value = (
                f"{med[k]:.2f}x"
                if k.startswith("ratio")
                else f"{med[k]:.3f} us"
                if k.endswith("CPU us per timer")
                else f"{med[k]:,.{1 if 'per timer' in k else 0}f} B"
                if k.startswith("journal") and "bytes" in k
                else f"{med[k]:,.0f}"
                if not unit
                else fmt(med[k], unit)
            )
            lines.append(f"  {w.label}: {k} {value}")
    return "\n".join(["further figures (medians):", *lines]) if lines else ""


def goal_verdicts(selected: list[Workload]) -> list[dict]:
    out = []
    for w in selected:
        med = w.median()
        for what, key, op, target in w.goals:
            v = med[key]
            met = v >= target if op == ">=" else v <= target
            out.append(
                {
                    "goal": what,
                    "figure": key,
                    "op": op,
                    "target": target,
                    "value": v,
                    "unit": w.unit if not key.startswith(("early", "ratio")) else "",
                    "met": bool(met),
                }
            )
    return out


def goals_text(verdicts: list[dict]) -> str:
    if not verdicts:
        return ""
    lines = ["service goals (medians):"]
    for g in verdicts:

        def show(x: float, unit: str = g["unit"], figure: str = g["figure"]) -> str:
            if unit == "B":
                return f"{x:,.2f} B"  # the byte goals are tight: show the fraction
            if figure.startswith("ratio"):
                return f"{x:.2f}x"
            return fmt(x, unit) if unit else f"{x:,.0f}"

        v, t = g["value"], g["target"]
        if t == 0:
            how = ""
        elif g["op"] == ">=":
            how = f" ({v / t:.3g}x the goal)"
        else:
            how = f" ({v / t:.3g}x the limit)"
        lines.append(
            f"  {g['goal']:<34} {g['op']} {show(t):>10}: {show(v):>12}  "
            f"{'met' if g['met'] else 'MISSED'}{how}"
        )
    return "\n".join(lines)
