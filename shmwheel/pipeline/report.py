"""The audit's report: ``report/summary.json``, three PNG plots drawn with matplotlib from
small aggregates (one row per second, a few hundred quantiles), and ``report/index.md``
linking them. Nothing here touches Spark."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger("shmwheel.pipeline")

PLOTS = {
    "lateness.png": "Lateness over time (per second: p50, p90, p99, p99.9, max)",
    "lateness_cdf.png": "Lateness CDF (every fire)",
    "throughput.png": "Throughput over time (records per second)",
}


def write_report(out: str, summary: dict[str, Any], small: dict[str, Any], cdf: list) -> None:
    """Write summary.json, the plots and index.md under OUT/report."""
    rep = os.path.join(out, "report")
    os.makedirs(rep, exist_ok=True)
    with open(os.path.join(rep, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2, default=str)
    drawn = _plots(rep, small, cdf)
    with open(os.path.join(rep, "index.md"), "w") as fh:
        fh.write(index_md(summary, drawn))


def _plots(rep: str, small: dict[str, Any], cdf: list) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = []
    lat = small["lateness"]
    fig, ax = plt.subplots(figsize=(9, 4))
    if len(lat):
        t = lat["window"]
        ax.fill_between(t, lat["p50_ms"], lat["p99_ms"], alpha=0.25, label="p50 to p99")
        for col, style in (("p50_ms", "-"), ("p90_ms", "--"), ("p999_ms", ":"), ("max_ms", "-.")):
            ax.plot(t, lat[col], style, label=col[:-3])
    ax.set(title=PLOTS["lateness.png"], xlabel="time (UTC)", ylabel="ms after the deadline")
    ax.legend(loc="upper right", fontsize="small")
    drawn.append(_save(fig, rep, "lateness.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    if cdf:
        ax.plot([v for _, v in cdf], [q for q, _ in cdf], "-")
    ax.set(title=PLOTS["lateness_cdf.png"], xlabel="ms after the deadline", ylabel="fraction")
    ax.grid(alpha=0.3)
    drawn.append(_save(fig, rep, "lateness_cdf.png"))

    thr = small["throughput"]
    fig, ax = plt.subplots(figsize=(9, 4))
    for col in ("scheduled", "fired", "cancelled", "completed", "expired"):
        if len(thr) and thr[col].sum() > 0:
            ax.plot(thr["window"], thr[col], label=col)
    ax.set(title=PLOTS["throughput.png"], xlabel="time (UTC)", ylabel="per second")
    ax.legend(loc="upper right", fontsize="small")
    drawn.append(_save(fig, rep, "throughput.png"))
    plt.close("all")
    return drawn


def _save(fig: Any, rep: str, name: str) -> str:
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(os.path.join(rep, name), dpi=100)
    return name


def index_md(s: dict[str, Any], plots: list[str]) -> str:
    """The report's front page (Markdown)."""
    verdict = "CLEAN" if s["clean"] else "VIOLATIONS OR REJECTS FOUND"
    by_kind = ", ".join(f"{k} {n:,}" for k, n in s["records_by_kind"].items())
    lines = [
        f"# Journal audit: {verdict}",
        "",
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
        "## Tables (Parquet, next to this report)",
        "",
        "`events/`, `violations/`, `lateness/`, `throughput/`, `per_producer/`, `per_task/`, "
        "`rejects/`; the figures above are in `summary.json`.",
        "",
    ]
    return "\n".join(lines)


def _services(s: dict[str, Any]) -> list[str]:
    """The per-service table: one row per service of the audit (docs/pipeline.md)."""
    rows = s.get("services") or []
    if not rows:
        return []
    out = [
        "## Services",
        "",
        "| service | hosts (boot ids) | epochs | segments | records | timers and operations "
        "| violations | rejects | gaps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in rows:
        n = sum(t["n"] for t in v["timers"].values())
        out.append(
            f"| {v['service']} | {', '.join(v['hosts'])} | {v['epochs']} | {v['segments']} "
            f"| {v['records']:,} | {n:,} | {v['violations']:,} | {v['rejects']:,} "
            f"| {len(v['gaps'])} |"
        )
    gaps = [f"- {v['service']}: {g}" for v in rows for g in v["gaps"]]
    if gaps:
        out += ["", "Gaps in the segment chains (each a reject):", "", *gaps]
    return [*out, ""]


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"
