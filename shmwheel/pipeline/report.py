"""The audit's report: ``report/summary.json``, PNG plots drawn with matplotlib from small
aggregates (one row per second, a few hundred quantiles), and ``report/index.md`` linking
them. Nothing here touches Spark.

How the plots read. Lateness spans microseconds to seconds, so its axes are logarithmic
(``symlog``: linear below 1 µs, the journal's resolution, so a lateness of 0 still shows);
the CDF runs to the greatest lateness, and its tail (the fraction of fires later than x,
down to one fire in all of them) is drawn beside it. The per-second tables have a row only
for a second with records (lateness: with fires), so a line drawn from row to row would
bridge an outage or the pause between two epochs with a ramp that was never measured: a
missing second breaks the line (``gapped``), and each epoch's start is a dotted line.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import Future
from typing import Any

from .background import in_thread

log = logging.getLogger("shmwheel.pipeline")

PLOTS = {
    "lateness.png": "Lateness over time (per second: p50, p90, p99, p99.9, max)",
    "lateness_cdf.png": "Lateness of every fire: CDF and tail, to the greatest",
    "throughput.png": "Throughput over time (records per second)",
    "services.png": "Each service: fires per second and p99 lateness per second",
}
_QUANTILE_LINES = (("p50_ms", "-", "p50"), ("p90_ms", "--", "p90"), ("p99_ms", "-.", "p99"),
                   ("p999_ms", ":", "p99.9"), ("max_ms", "-", "max"))  # fmt: skip
_LINEAR_BELOW_MS = 1e-3  # the journal's resolution (1 µs): symlog's linear range
_MAX_EPOCH_LINES = 12


def write_report(
    out: str,
    summary: dict[str, Any],
    small: dict[str, Any],
    cdf: list[list[float]],
    drawn: Future[list[str]] | None = None,
) -> None:
    """Write summary.json, the plots (unless `drawn`: their names, from ``start_plots``)
    and index.md under OUT/report."""
    rep = os.path.join(out, "report")
    os.makedirs(rep, exist_ok=True)
    with open(os.path.join(rep, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2, default=str)
    names = drawn.result() if drawn is not None else _plots(rep, summary, small, cdf)
    with open(os.path.join(rep, "index.md"), "w") as fh:
        fh.write(index_md(summary, names))


def start_plots(
    out: str, summary: dict[str, Any], small: dict[str, Any], cdf: list[list[float]]
) -> Future[list[str]]:
    """Draw the plots under OUT/report in a thread of this process while Spark works:
    they need only the per-second figures (``small``'s lateness, throughput and services)
    and, of the summary, ``lateness_ms`` and each service's ``epoch_starts_us``, all known
    once the journal is read. The driver waits on Spark meanwhile; drawing took 1.6-2.8 s
    after the jobs. The names drawn, or the drawing's exception, when ``result()`` is
    called. The thread runs at the lowest priority (``background.py``)."""
    rep = os.path.join(out, "report")
    os.makedirs(rep, exist_ok=True)
    return in_thread("shmwheel-plots", _plots, rep, summary, small, cdf, idle=True)


def gapped(df: Any, every_s: float = 1.0) -> Any:
    """`df` (a per-second table: ``window`` timestamps, ascending) with a row of NaN
    after each row whose next one is more than `every_s` later, so a line drawn through
    it breaks where no second was recorded instead of bridging the gap."""
    import pandas as pd

    if len(df) < 2:
        return df
    t = df["window"]
    step = pd.Timedelta(seconds=every_s)
    after = (t.shift(-1) - t) > step
    if not after.any():
        return df
    holes = pd.DataFrame({"window": t[after] + step})
    return pd.concat([df, holes], ignore_index=True).sort_values("window", kind="stable")


def _plots(rep: str, s: dict[str, Any], small: dict[str, Any], cdf: list[list[float]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = []
    starts = _epoch_starts(s)
    lat = gapped(small["lateness"])
    fig, ax = plt.subplots(figsize=(10, 4.8))
    if len(lat):
        t = _mid(lat["window"])
        ax.fill_between(t, lat["p50_ms"], lat["p99_ms"], alpha=0.2, label="p50 to p99")
        for col, style, label in _QUANTILE_LINES:
            ax.plot(t, lat[col], style, marker=".", markersize=3, label=label)
    _log_y(ax)
    _epochs(ax, starts)
    ax.set(title=PLOTS["lateness.png"], xlabel="time (UTC; each second's figure at its middle)",
           ylabel="ms after the deadline")  # fmt: skip
    _legend_below(ax)
    drawn.append(_save(fig, rep, "lateness.png"))

    drawn.append(_cdf_plot(plt, rep, cdf, s["lateness_ms"]))

    thr = gapped(small["throughput"])
    fig, ax = plt.subplots(figsize=(10, 4.8))
    for col in ("scheduled", "fired", "cancelled", "completed", "expired", "task_failures"):
        if len(thr) and thr[col].sum() > 0:
            ax.plot(_mid(thr["window"]), thr[col], marker=".", markersize=3, label=col)
    ax.set_yscale("symlog", linthresh=1)  # a burst of schedules beside a few failures
    ax.grid(alpha=0.3)
    _epochs(ax, starts)
    ax.set(title=PLOTS["throughput.png"], xlabel="time (UTC; each second's count at its "
           "middle)", ylabel="records per second (log)")  # fmt: skip
    _legend_below(ax)
    drawn.append(_save(fig, rep, "throughput.png"))

    if small.get("services"):
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
        for svc, (thr_s, lat_s) in small["services"].items():
            g = gapped(thr_s)
            top.plot(_mid(g["window"]), g["fired"], marker=".", markersize=3, label=svc)
            g = gapped(lat_s)
            bottom.plot(_mid(g["window"]), g["p99_ms"], marker=".", markersize=3, label=svc)
        _log_y(bottom)
        for ax in (top, bottom):
            _epochs(ax, starts)
        top.set(title=PLOTS["services.png"], ylabel="fires per second")
        top.grid(alpha=0.3)
        bottom.set(xlabel="time (UTC)", ylabel="p99 ms after the deadline")
        _legend_below(bottom)
        drawn.append(_save(fig, rep, "services.png"))
    plt.close("all")
    return drawn


def _cdf_plot(plt: Any, rep: str, cdf: list[list[float]], lat: dict[str, Any]) -> str:
    """The CDF of every fire's lateness on a log axis, to the greatest, and its tail (the
    fraction later than x, on log axes) down to one fire of all."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    fires, top = lat.get("fires") or 0, lat.get("max_ms")
    if cdf and fires and top is not None:
        xs = [v for _, v in cdf] + [top]
        qs = [q for q, _ in cdf] + [1.0]
        left.plot(xs, qs, "-", drawstyle="steps-post")
        tail = [(v, 1 - q) for v, q in zip(xs, qs, strict=True) if q < 1]
        tail.append((top, 1 / fires))  # the greatest: one fire of all
        right.plot([v for v, _ in tail], [f for _, f in tail], "-", marker=".", markersize=3)
        right.set_yscale("log")
        low = min(xs)
        for ax in (left, right):
            if low > 0:  # no fire on time or early: a plain log axis
                ax.set_xscale("log")
                ax.set_xlim(low / 1.5, top * 1.5)
            else:
                ax.set_xscale("symlog", linthresh=_LINEAR_BELOW_MS)
                ax.set_xlim(low, top * 1.5)
            ax.axvline(top, color="grey", linestyle=":", linewidth=1)
    left.set(title="Lateness CDF (every fire)", xlabel="ms after the deadline (log)",
             ylabel="fraction of fires at most x")  # fmt: skip
    right.set(title=f"Tail, to the greatest ({_ms(top)} ms)", xlabel="ms after the deadline "
              "(log)", ylabel="fraction of fires later than x")  # fmt: skip
    for ax in (left, right):
        ax.grid(alpha=0.3, which="both")
    return _save(fig, rep, "lateness_cdf.png", dates=False)


def _mid(window: Any) -> Any:
    """Each second's window start moved to its middle (where its figure belongs beside an
    epoch's start)."""
    import pandas as pd

    return window + pd.Timedelta(milliseconds=500)


def _legend_below(ax: Any) -> None:
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize="small", ncol=6,
              frameon=False)  # fmt: skip


def _log_y(ax: Any) -> None:
    ax.set_yscale("symlog", linthresh=_LINEAR_BELOW_MS)
    ax.grid(alpha=0.3, which="major")


def _epoch_starts(s: dict[str, Any]) -> list[tuple[Any, str]]:
    """(when, label) of each epoch's start, of every service (a few at most)."""
    import pandas as pd

    several = len(s.get("services") or []) > 1
    out = []
    for v in s.get("services") or []:
        for e, us in (v.get("epoch_starts_us") or {}).items():
            label = f"{v['service']} epoch {e}" if several else f"epoch {e}"
            out.append((pd.Timestamp(int(us), unit="us", tz="UTC"), label))
    return sorted(out)[:_MAX_EPOCH_LINES]


def _epochs(ax: Any, starts: list[tuple[Any, str]]) -> None:
    for when, label in starts:
        ax.axvline(when, color="grey", linestyle=":", linewidth=1)
        ax.annotate(label, (when, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                    va="top", ha="right", fontsize="x-small", color="grey")  # fmt: skip


def _save(fig: Any, rep: str, name: str, dates: bool = True) -> str:
    if dates:
        fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(os.path.join(rep, name), dpi=100)
    return name


def verdict(s: dict[str, Any]) -> tuple[str, list[str]]:
    """The report's headline and what it covers: the service's promises (every timer and
    operation one outcome, none early, the journal whole) and, apart, the tasks that
    failed in their runs (a task that raises is the application's failure, not the
    service's: still named, with its error rate, beside the verdict)."""
    failing = s.get("task_failures") or []
    if s["clean"]:
        head = "CLEAN" + (", with task failures" if failing else "")
        lines = ["the service kept its promises: every timer and operation has exactly one "
                 "outcome, none ran early, the journal is whole"]  # fmt: skip
    else:
        head = "VIOLATIONS OR REJECTS FOUND"
        lines = [f"{s['violations']:,} violations of the service's promises and "
                 f"{s['rejects']:,} rejects (below)"]  # fmt: skip
    if failing:
        worst = ", ".join(_failure(t) for t in failing[:5])
        more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
        lines.append(f"{len(failing)} task(s) failed in their runs: {worst}{more} "
                     "(the report's Tasks table)")  # fmt: skip
    return head, lines


def _failure(t: dict[str, Any]) -> str:
    rate = (t.get("error_rate") or 0) + (t.get("crash_rate") or 0)
    return (f"`{t['task']}` {100 * rate:.1f} % of {t['runs']:,} runs ({t['error']:,} raised, "
            f"{t['crashed']:,} crashed)")  # fmt: skip


def jobs_line(s: dict[str, Any]) -> str:
    """What the jobs' rules judged (the summary's "jobs"), "" without a jobs' ledger."""
    j = s.get("jobs") or {}
    if not j.get("files"):
        return ""
    return (f"{j['jobs']:,} jobs, {j['attempts']:,} attempts, {j['records']:,} records in "
            f"{j['files']} file(s) of {j['ledgers']} jobs' ledger(s)")  # fmt: skip


def _jobs(s: dict[str, Any]) -> list[str]:
    """The report's Jobs section: each of the jobs' rules and its violations."""
    what = jobs_line(s)
    if not what:
        return []
    out = ["", "## Jobs", "", f"{what}; the jobs' rules (docs/journal.md, \"The jobs' "
           "rules\"):", "", "| rule | violations |", "|---|---|"]  # fmt: skip
    out += [f"| {r} | {n:,} |" for r, n in s["jobs"]["violations_by_rule"].items()]
    return out


def index_md(s: dict[str, Any], plots: list[str]) -> str:
    """The report's front page (Markdown)."""
    head, covers = verdict(s)
    by_kind = ", ".join(f"{k} {n:,}" for k, n in s["records_by_kind"].items())
    lines = [
        f"# Journal audit: {head}",
        "",
        *[f"- **{c}**" for c in covers],
        f"- journal: `{s['journal']}` (reader: {s['reader']}; {s['epochs']} epochs, "
        f"{s['span_s']:.1f} s of records)",
        f"- records: {s['records']:,} ({by_kind})",
        f"- rejects: {s['rejects']:,}",
        f"- violations: {s['violations']:,}",
        "",
        *_services(s),
        "## Timers and operations",
        "",
        "| type | count | ran | cancelled | completed | expired | pending at the end | runs "
        "| repeats inside the crash window |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for typ, t in sorted(s["timers"].items()):
        lines.append(
            f"| {typ} | {t['n']:,} | {t['ran']:,} | {t['cancelled']:,} | {t['completed']:,} "
            f"| {t['expired']:,} | {t['pending']:,} | {t['runs']:,} | {t['repeats_in_window']:,} |"
        )
    lines += _jobs(s)
    lines += _tasks(s)
    lat = s["lateness_ms"]
    lines += ["", "## Lateness (ms after the deadline, every fire)", ""]
    lines.append(
        "| fires | p50 | p90 | p99 | p99.9 | max |\n|---|---|---|---|---|---|\n"
        f"| {lat['fires']:,} | {_ms(lat.get('p50_ms'))} | {_ms(lat.get('p90_ms'))} "
        f"| {_ms(lat.get('p99_ms'))} | {_ms(lat.get('p999_ms'))} | {_ms(lat.get('max_ms'))} |"
    )
    if s["violations_by_rule"]:
        lines += ["", "## Violations", "", "| rule | count |", "|---|---|"]
        lines += [f"| {r} | {n:,} |" for r, n in sorted(s["violations_by_rule"].items())]
        lines += ["", "First ones:", ""]
        lines += [f"- {v['rule']}: {v['detail']}" for v in s["violation_sample"]]
    if s["reject_sample"]:
        lines += ["", "## Rejects", ""] + [f"- {r}" for r in s["reject_sample"]]
    ops = s["operations"]
    if ops["operations"]:
        ttc = ops["time_to_complete_ms"]
        lines += [
            "",
            "## Operations (purgatory)",
            "",
            f"{ops['operations']:,} operations: {ops['completed']:,} completed, "
            f"{ops['expired']:,} expired, {ops['cancelled']:,} cancelled, {ops['pending']:,} "
            f"pending; time to complete p50 {_ms(ttc.get('p50'))} ms, p99 "
            f"{_ms(ttc.get('p99'))} ms.",
        ]
    lines += ["", "## Plots", ""]
    lines += [f"![{PLOTS[p]}]({p})" for p in plots]
    lines += [
        "",
        "Lateness is drawn on log axes (linear below 1 µs); a second with no record (an "
        "outage, the pause between epochs) breaks the lines; dotted lines mark each "
        "epoch's start.",
        "",
        "## Tables (Parquet, next to this report)",
        "",
        "`events/`, `timers/`, `violations/`, `lateness/`, `throughput/`, `per_producer/`, "
        "`per_task/`, `rejects/`; the figures above are in `summary.json`.",
        "",
    ]
    return "\n".join(lines)


def _tasks(s: dict[str, Any]) -> list[str]:
    """Every task's runs and how they ended."""
    rows = s.get("per_task") or []
    if not rows:
        return []
    out = ["", "## Tasks", "",
           "| task | runs | ok | raised | crashed | error rate | crash rate | mean ms | max ms |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for t in rows:
        out.append(
            f"| {t['task']} | {t['runs']:,} | {t['ok']:,} | {t['error']:,} | {t['crashed']:,} "
            f"| {_pct(t.get('error_rate'))} | {_pct(t.get('crash_rate'))} "
            f"| {_ms(t.get('mean_duration_ms'))} | {_ms(t.get('max_duration_ms'))} |"
        )
    return out


def _services(s: dict[str, Any]) -> list[str]:
    """The per-service table: one row per service of the audit (docs/pipeline.md)."""
    rows = s.get("services") or []
    if not rows:
        return []
    out = [
        "## Services",
        "",
        "| service | hosts (boot ids) | epochs | segments | records | timers and operations "
        "| violations | rejects | gaps | p99 ms | max ms | failing tasks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in rows:
        n = sum(t["n"] for t in v["timers"].values())
        lat = v.get("lateness_ms") or {}
        failing = ", ".join(_failure(t) for t in v.get("task_failures") or []) or "none"
        out.append(
            f"| {v['service']} | {', '.join(v['hosts'])} | {v['epochs']} | {v['segments']} "
            f"| {v['records']:,} | {n:,} | {v['violations']:,} | {v['rejects']:,} "
            f"| {len(v['gaps'])} | {_ms(lat.get('p99_ms'))} | {_ms(lat.get('max_ms'))} "
            f"| {failing} |"
        )
    gaps = [f"- {v['service']}: {g}" for v in rows for g in v["gaps"]]
    if gaps:
        out += ["", "Gaps in the segment chains (each a reject):", "", *gaps]
    return [*out, ""]


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"
