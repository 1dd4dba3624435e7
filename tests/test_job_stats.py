"""The job pool's figures outside the supervisor's process: ``Client.stats()["jobs"]`` (asked
over the job link), ``shmwheel status`` / ``top`` and the Prometheus collector by name; a
service without job workers has none of them, with no error and no wait."""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import re
import time

import job_fns
import pytest
from helpers import module_service, wait_for

import shmwheel
from shmwheel import JobTimeout, Retry, TaskError
from shmwheel.cli import observe, top

TASKS = {"double": "job_fns:task_double"}
# what the fixture's jobs leave in the counts (each figure its own, so a mix-up shows)
EXPECTED = {
    "submitted": 15,
    "succeeded": 4,
    "failed": 3,
    "timed_out": 2,
    "retried": 6,
    "stopped": 1,
    "cancelled": 5,
    "queued": 0,
    "running": 0,
    "backing_off": 0,
}


@pytest.fixture(scope="module")
def svc():
    """A service with 2 job workers and jobs done, failed (one after 6 retries), timed
    out, stopped and cancelled; nothing queued or running when the tests read it."""
    s = shmwheel.TimerService(tasks=TASKS, executors=1, job_workers=2, job_grace=0.5)
    for started in module_service(s):
        with started.client() as client:
            ok = [client.submit("double", {"x": i}) for i in range(4)]
            assert [j.result(30)["double"] for j in ok] == [0, 2, 4, 6]
            retry = Retry(7, backoff=0.01, factor=1.0, on=(KeyError,))
            failing = [client.submit("double", {"fail": "k"}, retry=retry)]
            failing += [client.submit("double", {"fail": "k"}) for _ in range(2)]
            for job in failing:
                with pytest.raises(TaskError):
                    job.result(30)
            assert failing[0].attempts == 7
            slow = [
                client.submit("double", {"x": 1, "sleep": 30}, time_limit_ms=200) for _ in range(2)
            ]
            for job in slow:
                with pytest.raises(JobTimeout):
                    job.result(30)
            later = [client.submit("double", {"x": 1}, delay_ms=60_000) for _ in range(5)]
            assert all(j.cancel() for j in later)
            running = client.submit("double", {"x": 1, "sleep": 60})
            wait_for(running.running, 20, "the job to start")
            assert running.stop()
            with pytest.raises(cf.CancelledError):
                running.result(0)
        # a stopped job's worker may be replaced: wait until both serve again
        wait_for(
            lambda: all(w["alive"] for w in started.stats()["jobs"]["workers"].values()),
            20,
            "the stopped job's worker to be replaced",
        )
        yield started


def pool_view(svc: shmwheel.TimerService) -> dict:
    return svc.stats()["jobs"]


def test_client_stats_in_a_spawned_process_equal_the_supervisors(svc):
    mine = pool_view(svc)
    assert {k: mine[k] for k in EXPECTED} == EXPECTED
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        theirs = pool.apply(job_fns.stats_from_child, (svc.name,))
    assert theirs["jobs"] == mine == pool_view(svc)
    with svc.client() as client:  # in this process too, through the same link
        assert client.stats()["jobs"] == mine


def test_status_shows_the_jobs_and_json_has_them(svc, cli):
    mine = pool_view(svc)
    code, out, err = cli("status", svc.name, "--sample", "0")
    assert code == 0, err
    pids = ", ".join(f"{k} pid {w['pid']}" for k, w in mine["workers"].items())
    assert f"jobs         2/2 workers alive ({pids}), {mine['worker_restarts']} worker" in out
    assert "queued 0, running 0, backing off 0" in out
    assert (
        "submitted 15, succeeded 4, failed 3, timed out 2, retried 6, stopped 1, cancelled 5"
    ) in out, out
    code, out, err = cli("status", svc.name, "--json", "--sample", "0")
    assert code == 0, err
    assert json.loads(out)["jobs"] == mine


def test_top_shows_the_jobs(svc):
    from rich.console import Console

    mem = observe.attach(svc.name)
    jobs = observe.job_reader(mem)
    try:
        st = observe.snapshot(mem, observe.ProcessHealth(), jobs)
        st2 = observe.snapshot(mem, observe.ProcessHealth(), jobs)  # the kept link again
    finally:
        jobs.close()
        mem.close()
    assert st["jobs"] == st2["jobs"] == pool_view(svc)
    console = Console(record=True, width=200)
    console.print(top.render(st, top.rates(None, st), 1.0))
    screen = console.export_text()
    assert re.search(r"jobs  2/2 workers alive \(job0 pid \d+, job1 pid \d+\)", screen), screen
    assert "succeeded 4, failed 3, timed out 2, retried 6, stopped 1, cancelled 5" in screen


def test_collector_by_name_exports_the_job_metrics(svc):
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from shmwheel.metrics import ServiceCollector

    registry = CollectorRegistry()
    collector = ServiceCollector(svc.name)
    registry.register(collector)
    try:
        text = generate_latest(registry).decode()
    finally:
        collector.close()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, s.labels.get("outcome")): s.value for f in fams.values() for s in f.samples}
    mine = pool_view(svc)
    for outcome in ("succeeded", "failed", "timed_out", "stopped", "cancelled"):
        assert samples[("shmwheel_jobs_total", outcome)] == EXPECTED[outcome]
    assert samples[("shmwheel_jobs_submitted_total", None)] == 15
    assert samples[("shmwheel_job_retries_total", None)] == 6
    assert samples[("shmwheel_job_worker_restarts_total", None)] == mine["worker_restarts"]
    assert samples[("shmwheel_jobs_queued", None)] == 0
    assert samples[("shmwheel_jobs_running", None)] == 0
    assert samples[("shmwheel_jobs_backing_off", None)] == 0
    assert samples[("shmwheel_job_workers", None)] == 2
    assert samples[("shmwheel_job_workers_alive", None)] == 2
    assert fams["shmwheel_jobs"].type == "counter" and fams["shmwheel_jobs_queued"].type == "gauge"
    assert all(fams[n].documentation for n in fams if n.startswith(("shmwheel_job",)))
    # a collector given the service object exports the same job figures
    registry = CollectorRegistry()
    registry.register(ServiceCollector(svc))
    text2 = generate_latest(registry).decode()
    job_lines = [line for line in text.splitlines() if line.startswith("shmwheel_job")]
    assert job_lines and all(line in text2.splitlines() for line in job_lines)


def test_a_service_without_job_workers_has_no_jobs_and_no_error(cli):
    with shmwheel.TimerService(tasks=TASKS, executors=1) as s, s.client() as client:
        start = time.monotonic()
        st = client.stats()
        assert "jobs" not in st and "jobs" not in s.stats()
        assert time.monotonic() - start < 5.0  # nobody listens: refused at once, no wait
        code, out, err = cli("status", s.name, "--sample", "0")
        assert code == 0 and "jobs" not in out and err == "", err
        code, out, _ = cli("status", s.name, "--json", "--sample", "0")
        assert code == 0 and "jobs" not in json.loads(out)
        prom = pytest.importorskip("prometheus_client")
        from shmwheel.metrics import ServiceCollector

        registry = prom.CollectorRegistry()
        collector = ServiceCollector(s.name)
        registry.register(collector)
        try:
            text = prom.generate_latest(registry).decode()
        finally:
            collector.close()
        assert "shmwheel_pending" in text and "shmwheel_job" not in text


def test_a_job_link_address_held_by_another_process_is_refused(cli):
    """A squatter on the job link's address (same user, not the supervisor): Client.stats
    raises ShmwheelError saying so; status warns, shows no jobs and keeps its exit code."""
    import subprocess
    import sys

    from shmwheel.service.jobs import wire

    with shmwheel.TimerService(tasks=TASKS, executors=1) as s, s.client() as client:
        code = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.bind({wire.address(s.name)!r}); s.listen(4)\n"
            "print('ready', flush=True); sys.stdin.read()\n"
        )
        squatter = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert squatter.stdout.readline().strip() == "ready"
            with pytest.raises(shmwheel.ShmwheelError, match="not by the service's supervisor"):
                client.stats()
            rc, out, err = cli("status", s.name, "--sample", "0")
            assert rc == 0 and "jobs" not in out
            assert "not by the service's supervisor" in err, err
        finally:
            squatter.kill()
            squatter.wait(10)
            squatter.stdin.close()
            squatter.stdout.close()
