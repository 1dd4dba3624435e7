"""Lanes: job workers are processes apart from the executors that run timers' tasks, so
timers keep running, in order and never early, while every job worker is busy."""

from __future__ import annotations

import job_fns
from helpers import read_log, wait_for

import shmwheel


def test_timers_run_while_every_job_worker_is_busy(tmp_path):
    flag, log = tmp_path / "release", tmp_path / "timers.log"
    with shmwheel.TimerService(
        tasks={"append_line": "shmwheel.examples.tasks:append_line"}, executors=1, job_workers=2
    ) as svc:
        ex = svc.executor()
        busy = [ex.submit(job_fns.wait_for_file, str(flag), 60.0) for _ in range(2)]
        wait_for(lambda: all(j.running() for j in busy), 20, "both job workers busy")
        with svc.client() as client:
            handles = [
                client.schedule("append_line", {"path": str(log), "tag": f"t{i}"}, delay_ms=10)
                for i in range(20)
            ]
            assert [h.result(30) for h in handles] == ["ok"] * 20
        rows = read_log(log)
        assert len(rows) == 20 and all(
            run_ns >= deadline * 1_000_000 for _, _, deadline, run_ns, *_ in rows
        )
        # every timer ran while both jobs still held their workers
        assert all(j.running() for j in busy)
        flag.write_text("go")
        assert [j.result(20) for j in busy] == ["released"] * 2
