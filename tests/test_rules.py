"""The audit's rules counted by pyarrow in the per-timer tasks (``audit.count_violations``,
no Spark): each rule's count is the number of rows its condition is true on, SQL's way (a
null condition is no violation), as a filter by that condition keeps them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shmwheel.pipeline.tables import audit as A
from shmwheel.pipeline.tables import pertimer as P


def test_each_rule_counts_the_rows_its_condition_is_true_on() -> None:
    rng = np.random.default_rng(3)
    b = P.Bounds(end_us=50_000, final_epoch=1, grace_us=0, tasks=("a",))
    n = 5000
    cols = {}
    for c, ty in P.OUTPUT:
        if ty == "bigint":  # small values about the bounds, a fifth of them null
            cols[c] = pa.array(rng.integers(-3, 60, n), mask=rng.random(n) < 0.2)
        else:
            cols[c] = pa.array(rng.choice([*P.TYPES, None], n).tolist(), pa.string())
    table = pa.table(cols)
    want = {}
    for rule, cond in A.conditions(b, A.arrow_ops()):
        kept = table.filter(cond).num_rows
        if kept:
            want[rule] = kept
    got = A.count_violations(table, b)
    assert got == want and len(got) == 8  # every rule broken somewhere in this table
    assert A.count_violations(table.slice(0, 0), b) == {}
    assert A.count_violations(P.empty(), b) == {}
