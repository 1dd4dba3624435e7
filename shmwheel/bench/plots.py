"""--plot DIR: PNG charts of one bench run (matplotlib, headless).

- lateness_cdf.png: W4, the lateness CDF of every system. The peers' from their exact
  samples (every repetition pooled); shmwheel's from its executors' lateness histogram as
  a step CDF at the buckets' upper edges (8 per octave), repetitions summed.
- rates.png: W1, W2, W5 and W6 rates, shmwheel beside each peer (medians, log scale).
- scale.png: W7, µs per operation against the number of pending timers.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def hist_cdf(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(upper edges in ms, cumulative fraction) of a lateness histogram: bucket 0 below
    1 µs, bucket i >= 1 for [2^((i-1)/8), 2^(i/8)) µs."""
    edges_ms = 2.0 ** (np.arange(len(counts)) / 8.0) / 1000.0
    cum = np.cumsum(counts) / max(1, counts.sum())
    return edges_ms, cum


def write_plots(
    directory: str,
    selected: list[Any],
    samples: dict[str, list[np.ndarray]],
    hists: list[list[int]],
) -> list[str]:
    """The charts the run's workloads allow, written into `directory`; their paths."""
    plt = _plt()
    os.makedirs(directory, exist_ok=True)
    by_key = {w.key: w for w in selected}
    figures = []
    if "svc_lateness" in by_key and (samples or hists):
        figures.append(("lateness_cdf.png", lateness_cdf(plt, samples, hists)))
    bars = [w for w in selected if w.wid in ("W1", "W2", "W5", "W6") and w.unit == "ops/s"]
    if bars:
        figures.append(("rates.png", rates(plt, bars)))
    if "svc_scale" in by_key:
        figures.append(("scale.png", scale(plt, by_key["svc_scale"])))
    written = []
    for name, fig in figures:
        path = os.path.join(directory, name)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def lateness_cdf(plt: Any, samples: dict[str, list[np.ndarray]], hists: list[list[int]]) -> Any:
    """W4: the service's lateness histogram as a step CDF beside the peers' samples."""
    fig, ax = plt.subplots(figsize=(8, 5))
    if hists:
        counts = np.sum(np.array(hists, dtype=np.int64), axis=0)
        x, y = hist_cdf(counts)
        nz = np.flatnonzero(counts)
        lo, hi = (max(0, nz[0] - 1), nz[-1] + 1) if len(nz) else (0, len(x))
        ax.step(x[lo:hi], y[lo:hi], where="post", label="shmwheel service (histogram bucket edges)")
    for label, arrays in samples.items():
        late = np.sort(np.concatenate(arrays))
        late = np.clip(late, 1e-3, None)  # log axis: early/0 shown at 1 µs
        ax.plot(late, np.arange(1, len(late) + 1) / len(late), label=label)
    ax.set_xscale("log")
    ax.set_xlabel("lateness (ms, log)")
    ax.set_ylabel("fraction of timers run")
    ax.set_title("W4 precision: lateness CDF of no-op timers, same run")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def rates(plt: Any, bars: list[Any]) -> Any:
    """W1, W2, W5, W6: each shmwheel rate (blue) above its peers' (grey)."""
    labels, mine, theirs = [], [], []
    for w in bars:
        med = w.median()
        seen = set()
        for a, b in w.rows:
            if a not in seen:
                seen.add(a)
                labels.append(f"{w.wid}: {a}")
                mine.append(med[a])
                theirs.append(True)
            labels.append(f"{w.wid}:   {b}")
            mine.append(med[b])
            theirs.append(False)
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(labels) + 1))
    y = np.arange(len(labels))[::-1]
    ax.barh(y, mine, color=["tab:blue" if t else "tab:gray" for t in theirs])
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("operations per second (median, log)")
    ax.set_title("rates: shmwheel (blue) and peers (grey), same run")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    return fig


def scale(plt: Any, w: Any) -> Any:
    """W7: µs per operation against the number of pending timers, one line per system."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[tuple[float, float]]] = {}
    for key, value in w.median().items():
        who, level = key.rsplit(" @ ", 1)
        series.setdefault(who, []).append((_level(level), value))
    for who, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=who)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("timers pending (log)")
    ax.set_ylabel("µs per operation (median, log)")
    ax.set_title("W7 scale: cost per operation vs pending")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _level(label: str) -> float:
    mult = {"k": 1e3, "M": 1e6}.get(label[-1], 1.0)
    return float(label[:-1] if mult != 1.0 else label.replace(",", "")) * mult
