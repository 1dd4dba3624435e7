"""Prometheus metrics (shmwheel.metrics, `shmwheel run --metrics-port`): scraped over HTTP
with urllib during load and parsed with prometheus_client's parser; counters only grow and
sit between two stats() readings taken around the scrape, gauges match stats(), the
lateness histogram is in seconds; a collector by name claims no ring, yields nothing while
the service is not running and attaches again to a new service of the same name; `run`
serves /metrics on a free port and stops it with the service; `import shmwheel` does not
import prometheus_client, and shmwheel.metrics without it names the pip command."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import MINE, ROOT, start_run, stop_run, wait_for

import shmwheel

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from shmwheel.metrics import LATENESS_BUCKETS_S, ServiceCollector, families  # noqa: E402

NOOP = {"noop": "shmwheel.examples.tasks:noop"}
CAPACITY = 20_000
COUNTERS = ("scheduled", "fired", "cancelled", "completed", "task_errors", "retired")


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Sample name and sorted labels -> value, of an exposition text."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return parse(r.read().decode())


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _load(client: shmwheel.Client, stop: threading.Event) -> None:
    """Schedule timers 0-200 ms out, and cancel some, until `stop`."""
    i = 0
    while not stop.is_set():
        try:
            hs = [client.schedule("noop", None, delay_ms=(i + k) % 200) for k in range(40)]
        except shmwheel.Full:
            time.sleep(0.05)
            continue
        for h in hs[::10]:
            client.cancel(h)
        i += 40
        time.sleep(0.005)


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[shmwheel.TimerService]:
    """A running service with a journal, with a thread scheduling into it."""
    svc = shmwheel.TimerService(
        tasks=NOOP, capacity=CAPACITY, executors=1, journal=tmp_path / "j", journal_fsync="none"
    )
    stop = threading.Event()
    thread = None
    with svc:
        client = svc.client()
        try:
            thread = threading.Thread(target=_load, args=(client, stop))
            thread.start()
            wait_for(lambda: svc.stats()["completed"] > 200, what="load")
            yield svc
        finally:
            stop.set()
            if thread is not None:
                thread.join(10)
            client.close()


def test_scrape_during_load_counters_grow_and_gauges_match_stats(loaded):
    svc = loaded
    registry = CollectorRegistry()
    collector = ServiceCollector(svc.name)  # attached by name, as another process would
    registry.register(collector)
    server, thread = prometheus_client.start_http_server(0, "127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        readings = []
        for _ in range(2):
            before = svc.stats()
            m = scrape(url)
            after = svc.stats()
            readings.append(m)
            lab = {"service": svc.name}
            for key in COUNTERS:  # a counter lies between the readings around the scrape
                assert before[key] <= value(m, f"shmwheel_{key}_total", **lab) <= after[key], key
            lo, hi = sorted((before["pending"], after["pending"]))
            assert lo - 200 <= value(m, "shmwheel_pending", **lab) <= hi + 200
            assert value(m, "shmwheel_capacity", **lab) == CAPACITY
            # one client (the loader's): the collector by name claims no ring
            assert value(m, "shmwheel_clients", **lab) == before["clients"] == 1
            for role in ("coordinator", "reaper", "exec0"):
                assert value(m, "shmwheel_restarts_total", role=role, **lab) == 0
                assert value(m, "shmwheel_process_alive", role=role, **lab) == 1
            for role in ("coordinator", "reaper"):
                assert value(m, "shmwheel_journal_fault", role=role, **lab) == 0
                assert value(m, "shmwheel_journal_fault_held_bytes", role=role, **lab) == 0
            assert (
                before["journal"]["bytes_written"]
                <= value(m, "shmwheel_journal_written_bytes_total", **lab)
                <= after["journal"]["bytes_written"]
            )
            assert value(m, "shmwheel_operations_watched_total", **lab) == 0

            # the lateness histogram: cumulative buckets in seconds, +Inf == _count
            les = [
                le
                for (name, labels) in m
                if name == "shmwheel_lateness_seconds_bucket"
                for k, le in labels
                if k == "le"
            ]
            assert les[-1] == "+Inf"
            assert [float(le) for le in les[:-1]] == list(LATENESS_BUCKETS_S)
            counts = [value(m, "shmwheel_lateness_seconds_bucket", le=le, **lab) for le in les]
            assert counts == sorted(counts)
            total = value(m, "shmwheel_lateness_seconds_count", **lab)
            assert counts[-1] == total
            assert before["lateness_samples"] <= total <= after["lateness_samples"]
            # the median's bucket bound (one per doubling) against stats()' p50 (ms, 8
            # buckets per doubling): the same figure in seconds, within that resolution
            le50 = next(float(le) for le, n in zip(les, counts, strict=True) if n >= total / 2)
            p50_s = after["lateness_ms"]["p50"] / 1000
            assert p50_s / 4 <= le50 <= p50_s * 4, (le50, p50_s)
            time.sleep(0.3)

        first, second = readings
        for (name, labels), v in first.items():
            if name.endswith(("_total", "_bucket", "_count")):
                assert second[(name, labels)] >= v, name
        lab = {"service": svc.name}
        assert value(second, "shmwheel_scheduled_total", **lab) > value(
            first, "shmwheel_scheduled_total", **lab
        )
        # every sample carries the service label
        assert all(dict(labels).get("service") == svc.name for _, labels in second)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        collector.close()


def test_collector_of_a_service_object_reads_its_stats_and_restart_counts(loaded):
    svc = loaded
    registry = CollectorRegistry()
    registry.register(ServiceCollector(svc))
    m = parse(generate_latest(registry).decode())
    st = svc.stats()
    lab = {"service": svc.name}
    assert value(m, "shmwheel_capacity", **lab) == CAPACITY
    assert value(m, "shmwheel_scheduled_total", **lab) <= st["scheduled"]
    assert value(m, "shmwheel_restarts_total", role="exec0", **lab) == 0


def test_collector_by_name_follows_the_service_and_exports_health_only_when_present():
    name = f"{MINE}metrics"
    registry = CollectorRegistry()
    collector = ServiceCollector(name)
    registry.register(collector)

    def scheduled() -> float | None:
        m = parse(generate_latest(registry).decode())
        return m.get(("shmwheel_scheduled_total", (("service", name),)))

    try:
        assert scheduled() is None  # not running yet: no metrics, no error
        with shmwheel.TimerService(name, tasks=NOOP, capacity=100, executors=1) as svc:
            with svc.client() as c:
                for _ in range(3):
                    c.schedule("noop", None, delay_ms=60_000)
            assert scheduled() == 3
            st = svc.stats()
        assert scheduled() is None  # stopped: nothing, and the mapping is released
        with shmwheel.TimerService(name, tasks=NOOP, capacity=100, executors=1):
            assert scheduled() == 0  # the new service of that name, attached again
    finally:
        collector.close()

    def health(fams: list[Any]) -> list[Any]:
        return [s for f in fams if f.name == "shmwheel_health" for s in f.samples]

    assert st["health"] == {"state": "ok", "reasons": []}  # the watchdog's (watchdog.py)
    (s,) = health(families(name, st, 100))
    assert s.value == 1 and s.labels == {"service": name, "state": "ok"}
    del st["health"]
    assert health(families(name, st, 100)) == []
    (s,) = health(families(name, {**st, "health": 1}, 100))
    assert s.value == 1 and s.labels == {"service": name}
    (s,) = health(families(name, {**st, "health": "degraded"}, 100))
    assert s.value == 1 and s.labels == {"service": name, "state": "degraded"}


def test_run_serves_metrics_on_a_free_port_until_it_stops(tmp_path):
    name = f"{MINE}run"
    log_path = tmp_path / "run.log"
    p, line = start_run(
        [
            "--name",
            name,
            "--capacity",
            "600",
            "--executors",
            "1",
            "--metrics-port",
            "0",
            "--tasks",
            "noop=shmwheel.examples.tasks:noop",
        ],
        log_path,
    )
    try:
        assert line.startswith(f"service {name} running")
        found = re.search(
            r"Prometheus metrics on (http://127\.0\.0\.1:(\d+)/metrics)", log_path.read_text()
        )
        assert found, log_path.read_text()
        url, port = found.group(1), int(found.group(2))
        assert port > 0
        with shmwheel.connect(name) as c:
            c.schedule("noop", None, delay_ms=1)
            wait_for(lambda: c.stats()["completed"] == 1, what="one run")
        m = scrape(url)
        assert value(m, "shmwheel_capacity", service=name) == 600
        assert value(m, "shmwheel_completed_total", service=name) == 1
        assert value(m, "shmwheel_lateness_seconds_count", service=name) == 1
    finally:
        stop_run(p, name, signal.SIGTERM, log_path)
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


def test_run_metrics_port_errors_start_nothing(cli):
    tasks = ["--tasks", "noop=shmwheel.examples.tasks:noop"]
    code, _, err = cli("run", "--name", f"{MINE}bad", "--metrics-port", "70000", *tasks)
    assert code == 2 and "--metrics-port must be 0 to 65535" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, out, err = cli("run", "--name", f"{MINE}bad", "--metrics-port", str(port), *tasks)
    assert code == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in err
    assert out == ""  # the service never started


def test_import_shmwheel_leaves_prometheus_client_out_and_metrics_names_pip():
    code = (
        "import sys, shmwheel\n"
        "shmwheel.TimerService, shmwheel.connect\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
        "sys.modules['prometheus_client'] = None\n"
        "try:\n"
        "    import shmwheel.metrics\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "pip install 'shmwheel[metrics]'" in r.stdout
