"""A log-linear histogram of integer durations (lateness in microseconds), mergeable by
adding counts: how the audit's percentiles are computed where the data is decoded.

Theory of operation. The lateness of every fire is known exactly (an integer number of
microseconds) in the task that decodes its segment, but a percentile over a window or
the whole journal needs the fires of every segment, and shipping every value to one
place is what the audit must not do. So each task reduces its values to counts per
*bin* and the driver adds the counts: the totals are exact, and so is the rank of every
bin; only the value within a bin is lost.

A value v codes as a bin of its magnitude ``|v|``, signed like v, so that codes sort as
their values do (a fire can be early: a negative lateness):

- ``|v| < 2**SUB_BITS``: the bin is the value itself (exact below 1.024 ms);
- above, ``|v|`` has a power of two ``e`` (``2**e <= |v| < 2**(e+1)``), and the bin keeps
  its top ``SUB_BITS + 1`` bits: bins are ``2**(e - SUB_BITS)`` wide, under 1/1024 of
  the values in them (0.1 %);
- a negative v codes as ``-(bin + 1)``.

Magnitudes are clipped to ``LIMIT`` (about 146,000 years in microseconds) so that
garbage from a corrupt record codes without overflow.
"""

from __future__ import annotations

import numpy as np

#: bits of a magnitude kept below its leading one
SUB_BITS = 10
_SUB = 1 << SUB_BITS
#: the largest magnitude coded; larger ones are clipped to it
LIMIT = (1 << 62) - 1


def code(values: np.ndarray) -> np.ndarray:
    """The bin code (int64) of each integer value."""
    v = np.clip(np.asarray(values, np.int64), -LIMIT, LIMIT)
    m = np.abs(v)
    big = m >= _SUB
    # the power of two of each magnitude, from frexp. Above 2**53 the float can round a
    # magnitude just under 2**(e+1) up to it; the code comes out the same (the top bits
    # are all ones, and the last bin of one power is the one before the first of the
    # next), which test_values_beside_every_power_of_two checks
    e = np.frexp(np.where(big, m, 1).astype(np.float64))[1].astype(np.int64) - 1
    shift = np.maximum(e - SUB_BITS, 0)
    top = np.right_shift(m, shift)  # in [SUB, 2 * SUB) for the big ones
    b = np.where(big, (shift + 1) * _SUB + (top - _SUB), m)
    return np.where(v < 0, -b - 1, b)


def bounds(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each bin's smallest and largest value (int64), inclusive."""
    c = np.asarray(codes, np.int64)
    neg = c < 0
    b = np.where(neg, -c - 1, c)
    k = b >> SUB_BITS  # 0: exact; k >= 1: width 2**(k-1)
    shift = np.maximum(k - 1, 0)
    lo = np.where(k == 0, b, np.left_shift((b & (_SUB - 1)) + _SUB, shift))
    hi = lo + np.left_shift(1, shift) - 1
    return np.where(neg, -hi, lo), np.where(neg, -lo, hi)


def quantiles(
    codes: np.ndarray, counts: np.ndarray, qs: list[float], lo: int, hi: int
) -> list[float]:
    """The q-quantile of the values (in the same unit) for each q of `qs`: the middle of
    the bin holding the value of rank ``ceil(q * n)`` (1-based), kept within [lo, hi]
    (the smallest and largest value, known exactly). `codes` sorted, no repeats;
    `counts` the values in each. Empty: NaN for each q."""
    if int(np.sum(counts)) == 0:
        return [float("nan")] * len(qs)
    got = grouped_quantiles(codes, counts, np.zeros(1, np.int64), qs, np.array([lo]),
                            np.array([hi]))  # fmt: skip
    return [float(x) for x in got[0]]


def grouped_quantiles(
    codes: np.ndarray,
    counts: np.ndarray,
    starts: np.ndarray,
    qs: list[float],
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """``quantiles`` of many histograms at once: group g is the cells from ``starts[g]``
    to the next start (each group's codes sorted, no repeats, and at least one value),
    kept within [lo[g], hi[g]]. A (groups, len(qs)) float array; no Python loop over the
    groups (a journal of a month has millions of seconds)."""
    if len(starts) == 0:
        return np.zeros((0, len(qs)))
    cum = np.cumsum(counts)
    ends = np.append(starts[1:], len(codes))
    before = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0)  # values before g
    n = cum[ends - 1] - before
    ranks = np.maximum(1, np.ceil(np.outer(n, np.asarray(qs, np.float64)))).astype(np.int64)
    at = np.searchsorted(cum, before[:, None] + ranks, side="left")
    blo, bhi = bounds(codes[at])
    mid = (blo + bhi) / 2.0
    out: np.ndarray = np.clip(
        mid, np.asarray(lo, np.float64)[:, None], np.asarray(hi, np.float64)[:, None]
    )
    return out
