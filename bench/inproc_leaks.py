"""The in-process layer's reference check at scale: a million tasks added to a timer, half
cancelled, some re-added (they move) or asked for their entry, the rest fired, then all
dropped; prints what survived (tests/test_kafka_refs.py runs the same with a CI-sized n).
``--oracle`` checks the test suite's oracle (tests/kafka_oracle.py) instead of the native core.

    python bench/inproc_leaks.py [--n 1000000] [--oracle]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="tasks (default 1,000,000)")
    ap.add_argument("--oracle", action="store_true", help="the oracle, not the native core")
    args = ap.parse_args()
    if args.oracle:  # before the Kafka layer is imported (tests/kafka_oracle_plugin.py)
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import kafka_oracle_plugin  # noqa: F401

    from shmwheel.bench.inprocess.refs import churn_tasks
    from shmwheel.kafka._backend import BACKEND

    r = churn_tasks(args.n)
    print(
        f"{BACKEND} core: {r.n:,} tasks, {r.fired:,} fired, {r.cancelled:,} cancelled, "
        f"{r.entries:,} entries made, in {r.seconds:.1f} s (traced)"
    )
    print(f"payload references before/after: {r.payload_refs_before} / {r.payload_refs_after}")
    print(
        f"tasks still alive: {r.live_tasks:,}; entries still alive: {r.live_entries:,}; "
        f"Python heap bytes kept: {r.bytes_kept:,}"
    )
    leaked = r.payload_refs_after != r.payload_refs_before or r.live_tasks or r.live_entries
    print("LEAK" if leaked else "no leak")
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(main())
