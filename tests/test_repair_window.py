"""A crash repair (a lock holder died mid-update; the next locker rebuilds the tables from
the slot states) that lands between a client storing a payload in an arena block and
submitting the slot must not free that block. bench/chaos.py found it: timers whose
payload block had been freed and handed to the next payload ran with a payload not
theirs (task errors, or another timer's tag)."""

from __future__ import annotations

import pytest
from test_service import TASKS, assert_once_never_early, read_log, wait_for

from shmwheel import TimerService
from shmwheel.segment.verify import verify

# a payload too large to be inline: it goes to an arena block
PATH_PAD = "x" * 40


def _repair_first(svc: TimerService, client, name: str) -> None:  # type: ignore[no-untyped-def]
    """Make client.<name> (a step after the blocks are taken, before submission) run a
    crash repair first, as if another process had died holding the lock just then."""
    original = getattr(client, name)

    def repaired_then(*args):  # type: ignore[no-untyped-def]
        client._mem._repair()
        return original(*args)

    setattr(client, name, repaired_then)


@pytest.mark.parametrize("path", ["schedule_many", "schedule"])
def test_a_repair_before_submission_keeps_the_payload_blocks(tmp_path, path):
    log = tmp_path / "log"
    with TimerService(tasks=TASKS, capacity=1000, executors=1) as svc:
        with svc.client() as c:
            first = [f"a{i}" for i in range(8)]
            payloads = [{"path": str(log), "tag": t, "pad": PATH_PAD} for t in first]
            if path == "schedule_many":
                _repair_first(svc, c, "_write_many")
                c.schedule_many("record", [300] * len(first), payloads)
            else:
                _repair_first(svc, c, "_submit")
                for p in payloads:
                    c.schedule("record", p, delay_ms=300)
            with c._mem.locked():
                verify(c._mem)  # every block a slot names is owned by it, none is free
            # the next payloads would take any block the repair freed
            second = [f"b{i}" for i in range(8)]
            c.schedule_many(
                "record", [300] * 8, [{"path": str(log), "tag": t, "pad": PATH_PAD} for t in second]
            )
            tags = first + second
            wait_for(lambda: len(read_log(log)) >= len(tags), what="every timer to run")
            wait_for(lambda: svc.stats()["pending"] == 0, what="nothing pending")
            assert svc.stats()["task_errors"] == 0
    assert_once_never_early(read_log(log), tags)
