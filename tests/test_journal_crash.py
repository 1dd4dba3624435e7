"""The whole-service SIGKILL loop, small: 3 cycles of bench/journal_crash_harness.py (the
bench, bench/journal_crash.py, runs 50). Each cycle a driver process (the embedding
process) runs a journaled TimerService, schedules and cancels timers, and is SIGKILLed
together with every service process; a final clean start on the same journal runs what
is left. Then: nothing lost, a True cancel never runs, never early, ids and deadlines
preserved, duplicates only inside the crash window (no outcome recorded in the killed
epoch), repeating timers resume across restarts and stop when cancelled, the journal
holds every accepted timer, and nothing is left in /dev/shm or running."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))  # the harness
import journal_crash_harness as H  # (from bench/, put on sys.path above)

pytestmark = pytest.mark.system  # a SIGKILL crash loop: pytest -m 'not system' skips it


def test_whole_service_sigkill_cycles_lose_nothing():
    res = H.run(H.Config(cycles=3, seed=20240611, startup_kill_fraction=0.0))
    text = H.summary(res)
    print(text)
    c = res.counts
    assert c["cycles"] == 3
    assert c["cycles whose service was up at the kill"] == 3, text
    assert c["one-shot accepted"] > 50 and c["executions"] > 50, text
    assert not res.violations, text
    # the loop exercised what it is for: repeating timers across restarts, recoveries
    assert c["repeating timers that ran in more than one cycle"] > 0, text
    assert any((ci.recovery or {}).get("recovered", 0) > 0 for ci in res.cycles[1:]), text
    assert res.final.get("recovery", {}).get("recovered", 0) > 0, text
    assert not res.leaks["processes"] and not res.leaks["shm"], text
