"""Prometheus metrics of a timer service: a custom collector over ``stats()``.

The figures already live in the service's shared segment, so no multiprocess mode is
needed: each scrape reads ``stats()`` once, in the scraping process, and turns it into
metric families (docs/operating.md, "Metrics")::

    from prometheus_client import REGISTRY, start_http_server
    from shmwheel.metrics import ServiceCollector

    REGISTRY.register(ServiceCollector(svc))        # a running TimerService, or
    REGISTRY.register(ServiceCollector("orders"))   # a service name: attached read-only
    start_http_server(9464, "127.0.0.1")

Needs ``prometheus_client`` (``pip install 'shmwheel[metrics]'``); ``import shmwheel``
does not import this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from itertools import accumulate
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

try:
    from prometheus_client import CollectorRegistry, make_wsgi_app
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.samples import Sample
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "shmwheel.metrics needs prometheus_client: pip install 'shmwheel[metrics]' "
        "(or pip install 'prometheus_client>=0.20')"
    ) from e

from .segment import contract as C
from .service.jobs.link import StatsReader

if TYPE_CHECKING:  # pragma: no cover
    from .segment.layout import ServiceMemory
    from .service.supervisor.supervisor import TimerService

__all__ = ["LATENESS_BUCKETS_S", "MetricsServer", "ServiceCollector", "families", "serve"]

log = logging.getLogger("shmwheel.metrics")

# The lateness histogram's upper bounds in seconds: one per doubling, 1 us .. 2**31 us
# (about 36 min). The segment's histogram has 8 buckets per doubling, bucket i < 2**(i/8)
# us, so every 8th edge is exact: the cumulative count through bucket 8k is the count
# below 2**k us.
_OCTAVES = (C.HIST_BUCKETS - 1) // C.HIST_PER_OCTAVE + 1  # 32
LATENESS_BUCKETS_S: tuple[float, ...] = tuple(2.0**k / 1e6 for k in range(_OCTAVES))

# stats() counters exported as shmwheel_<key>_total, with their help text
COUNTERS: dict[str, str] = {
    "scheduled": "Timers accepted by schedule / schedule_many.",
    "fired": "Timers found due and queued for an executor (each run of a repeating timer).",
    "cancelled": "Cancels that returned True.",
    "resets": "Resets that returned True (a timer's deadline moved).",
    "completed": "Task runs that returned.",
    "task_errors": "Task runs that raised (an import or payload decode failure too).",
    "crashed": "Task runs lost with a killed executor.",
    "rearmed": "Times a repeating timer was linked again.",
    "early": "Task runs that started before their deadline (should stay 0).",
    "retired": "Cancelled slots unlinked and freed.",
    "ring_garbage": "Ring records that failed a check and were skipped.",
    "ring_stale": "Well-formed ring records whose timer was already retired or linked.",
    "repairs": "Segment rebuilds after a lock holder died mid-update.",
}
# stats() gauges exported as shmwheel_<key>
GAUGES: dict[str, str] = {
    "pending": "Timers linked and not yet due, plus records not yet drained from rings.",
    "in_flight": "Timers fired and handed to an executor, outcome not settled yet.",
    "clients": "Producer rings claimed by clients.",
}
# stats()["operations"] counters (shmwheel_operations_<key>_total) and gauges
OPERATION_COUNTERS: dict[str, str] = {
    "watched": "Cross-process operations watched.",
    "completed": "Operations completed by check_and_complete.",
    "expired": "Operations that expired.",
    "purged": "Watch-list entries purged after their operation ended.",
}
OPERATION_GAUGES: dict[str, str] = {
    "watch_entries": "Entries in the watch lists (one per key of a live operation).",
    "watch_capacity": "Watch-list entries the segment has room for.",
}
JOURNAL_WRITERS = ("coordinator", "reaper")
# stats()["jobs"]: the jobs ended, by outcome (shmwheel_jobs_total{outcome}), and gauges
JOB_OUTCOMES = ("succeeded", "failed", "timed_out", "stopped", "cancelled")
JOB_GAUGES: dict[str, str] = {
    "queued": "Jobs waiting for a job worker.",
    "running": "Jobs whose attempt runs on a job worker now.",
    "backing_off": "Jobs waiting out a retry's back-off.",
}


def lateness_buckets(hist: list[int]) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs, ``le`` in seconds, ``+Inf`` last, from the
    segment's lateness histogram (``stats()["lateness_histogram"]``)."""
    cumulative = list(accumulate(int(n) for n in hist))
    total = cumulative[-1] if cumulative else 0
    out = [
        (str(le), float(cumulative[k * C.HIST_PER_OCTAVE]))
        for k, le in enumerate(LATENESS_BUCKETS_S)
        if k * C.HIST_PER_OCTAVE < len(cumulative)
    ]
    out.append(("+Inf", float(total)))
    return out


def families(service: str, st: Mapping[str, Any], capacity: int) -> list[Metric]:
    """The metric families of one ``stats()`` reading of `service` (of `capacity` slots),
    each sample labelled ``service``."""
    lab = ["service"]
    out: list[Metric] = []

    def counter(name: str, doc: str, value: float) -> None:
        out.append(_single(CounterMetricFamily, service, name, doc, value))

    def gauge(name: str, doc: str, value: float) -> None:
        out.append(_single(GaugeMetricFamily, service, name, doc, value))

    for key, doc in COUNTERS.items():
        counter(key, doc, st[key])
    for key, doc in GAUGES.items():
        gauge(key, doc, st[key])
    gauge("capacity", "Timer slots (the capacity option).", capacity)

    roles = list(st.get("processes", {}))
    restarts = st.get("restarts") or {}
    for role in restarts:
        if role not in roles:
            roles.append(role)
    m = CounterMetricFamily(
        "shmwheel_restarts", "Restarts of a service process, by role.", labels=[*lab, "role"]
    )
    for role in roles:
        m.add_metric([service, role], restarts.get(role, 0))
    out.append(m)
    g = GaugeMetricFamily(
        "shmwheel_process_alive",
        "1 while the service process of a role is alive, else 0.",
        labels=[*lab, "role"],
    )
    for role, p in st.get("processes", {}).items():
        g.add_metric([service, role], 1 if p.get("alive") else 0)
    out.append(g)

    hist = HistogramMetricFamily(
        "shmwheel_lateness_seconds",
        "Start of a task run less its deadline, measured in the executors (no _sum: the "
        "segment keeps bucket counts only).",
        labels=lab,
    )
    buckets = lateness_buckets(list(st["lateness_histogram"]))
    hist.add_metric([service], buckets, None)  # no _sum: see the help text
    hist.samples.append(
        Sample("shmwheel_lateness_seconds_count", {"service": service}, buckets[-1][1])
    )
    out.append(hist)

    ops = st.get("operations")
    if ops is not None:
        for key, doc in OPERATION_COUNTERS.items():
            counter(f"operations_{key}", doc, ops[key])
        for key, doc in OPERATION_GAUGES.items():
            gauge(f"operations_{key}", doc, ops[key])

    j = st.get("journal")
    if j is not None:
        counter(
            "journal_written_bytes",
            "Bytes the journal writers wrote since the service started (this epoch).",
            j["bytes_written"],
        )
        counter("journal_syncs", "fsync / fdatasync calls of the journal writers.", j["syncs"])
        gauge(
            "journal_disk_bytes", "Bytes of the journal's segment files on disk.", j["disk_bytes"]
        )
        gauge("journal_segments", "Segment files in the journal directory.", j["segments"])
        faults = j.get("faults") or {}
        fault = GaugeMetricFamily(
            "shmwheel_journal_fault",
            "1 while a journal writer cannot write (new timers are refused), else 0.",
            labels=[*lab, "role"],
        )
        held = GaugeMetricFamily(
            "shmwheel_journal_fault_held_bytes",
            "Bytes a faulted journal writer holds in memory until the disk takes writes.",
            labels=[*lab, "role"],
        )
        for role in (*JOURNAL_WRITERS, *(r for r in faults if r not in JOURNAL_WRITERS)):
            f = faults.get(role)
            fault.add_metric([service, role], 1 if f else 0)
            held.add_metric([service, role], f["held_bytes"] if f else 0)
        out += [fault, held]

    pool = st.get("jobs")
    if pool is not None:
        out += _jobs(service, pool)

    health = _health(service, st.get("health"))
    if health is not None:
        out.append(health)
    return out


def _jobs(service: str, pool: Mapping[str, Any]) -> list[Metric]:
    """The metric families of the job pool's figures (``stats()["jobs"]``)."""
    Counter, Gauge = CounterMetricFamily, GaugeMetricFamily
    workers = pool["workers"].values()
    families = [
        _single(Counter, service, "jobs_submitted", "Jobs submitted to the job workers.",
                pool["submitted"]),
        _single(Counter, service, "job_retries", "Attempts that failed and were retried.",
                pool["retried"]),
        _single(Counter, service, "job_worker_restarts",
                "Job workers started again after one died or was killed.",
                pool["worker_restarts"]),
        *(_single(Gauge, service, f"jobs_{key}", doc, pool[key])
          for key, doc in JOB_GAUGES.items()),
        _single(Gauge, service, "job_workers", "Job worker processes (the job_workers option).",
                len(workers)),
        _single(Gauge, service, "job_workers_alive", "Job worker processes alive.",
                sum(1 for w in workers if w["alive"])),
    ]  # fmt: skip
    ended = CounterMetricFamily(
        "shmwheel_jobs",
        "Jobs ended, by outcome: succeeded, failed (the last attempt raised or its worker "
        "died), timed_out (the last attempt passed its time limit), stopped, cancelled.",
        labels=["service", "outcome"],
    )
    for outcome in JOB_OUTCOMES:
        ended.add_metric([service, outcome], pool[outcome])
    families.insert(1, ended)
    return families


def _single(
    kind: type[CounterMetricFamily | GaugeMetricFamily], service: str, name: str, doc: str,
    value: float,
) -> Metric:  # fmt: skip
    """The family ``shmwheel_<name>`` of one sample, labelled ``service``."""
    m = kind(f"shmwheel_{name}", doc, labels=["service"])
    m.add_metric([service], value)
    return m


def _health(service: str, value: Any) -> Metric | None:
    """``stats()["health"]`` when the service reports one: a number (or bool) as the
    gauge's value, a string (or a dict's ``state``) as a ``state`` label of a gauge at
    1; None otherwise."""
    if value is None:
        return None
    doc = "The service's health, as stats() reports it."
    if isinstance(value, dict):  # the watchdog's {"state": ..., "reasons": [...]}
        value = value.get("state")
    if isinstance(value, bool | int | float):
        m = GaugeMetricFamily("shmwheel_health", doc, labels=["service"])
        m.add_metric([service], float(value))
        return m
    if isinstance(value, str):
        m = GaugeMetricFamily("shmwheel_health", doc, labels=["service", "state"])
        m.add_metric([service, value], 1)
        return m
    log.debug("stats()['health'] of %s is a %s: not exported", service, type(value).__name__)
    return None


class ServiceCollector:
    """A ``prometheus_client`` collector of one service's figures: register it in a
    registry (``REGISTRY.register(ServiceCollector(svc))``); each scrape reads
    ``stats()`` once.

    `service` is a running `TimerService` (its ``stats()``, restart counts included) or
    the name of a service of this user on this host, attached read-only like
    ``shmwheel status``: no client ring is claimed and nothing is written to the segment.
    A service that is not running (not started yet, stopped, its owner gone) yields no
    metrics; a service of that name started again later is attached again at the next
    scrape. `close()` releases the mapping of an attached service.
    """

    def __init__(self, service: TimerService | str) -> None:
        self._lock = threading.Lock()  # scrapes may come on several server threads
        self._mem: ServiceMemory | None = None
        self._jobs: StatsReader | None = None  # the attached service's job pool figures
        if isinstance(service, str):
            from .segment import shm

            self._service: TimerService | None = None
            self.name = shm.check_name(service)
        else:
            self._service = service
            self.name = service.name

    def collect(self) -> Iterator[Metric]:
        """The metric families of one ``stats()`` reading; none while the service is
        not running."""
        with self._lock:
            reading = self._read()
        if reading is not None:
            yield from families(self.name, *reading)

    def close(self) -> None:
        """Release the mapping of an attached service (a later scrape attaches again)."""
        with self._lock:
            self._detach()

    def _detach(self) -> None:
        if self._jobs is not None:
            self._jobs.close()
            self._jobs = None
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def _read(self) -> tuple[dict[str, Any], int] | None:
        from .errors import ShmwheelError

        if self._service is not None:
            try:
                return self._service.stats(), self._service.config.capacity
            except ShmwheelError as e:
                log.debug("no metrics of service %s: %s", self.name, e)
                return None
        mem = self._attached()
        if mem is None:
            return None
        from .service.stats import read_stats

        st = read_stats(mem)
        try:
            pool = self._jobs.read() if self._jobs is not None else None
        except ShmwheelError as e:
            log.warning("no job metrics of service %s: %s", self.name, e)
            pool = None
        if pool is not None:
            st["jobs"] = pool
        return st, mem.config.capacity

    def _attached(self) -> ServiceMemory | None:
        """The mapped segment of the running service `name`, attached again when the
        one mapped has stopped; None when none runs."""
        import posix_ipc

        from .errors import LayoutError
        from .segment import layout as L

        if self._mem is not None and not _running(self._mem):
            self._detach()
        if self._mem is None:
            try:
                mem = L.ServiceMemory.attach(self.name)
            except (LayoutError, posix_ipc.Error, OSError) as e:
                log.debug("no metrics of service %s: %s", self.name, e)
                return None
            if not _running(mem):
                mem.close()
                return None
            self._mem = mem
            self._jobs = StatsReader(self.name, int(mem.header[L.W_OWNER]))
        return self._mem


def _running(mem: ServiceMemory) -> bool:
    """Whether the service of an attached segment still runs (owner alive, not stopping)."""
    from .segment import layout as L
    from .segment import shm

    return not mem.header[L.W_STOPPING] and shm.pid_alive(int(mem.header[L.W_OWNER]))


class _QuietHandler(WSGIRequestHandler):
    """Requests logged through logging at DEBUG, not written to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics %s: " + format, self.address_string(), *args)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One daemon thread per scrape: a slow scraper delays no other, and none keeps the
    process alive."""

    daemon_threads = True


class MetricsServer:
    """An HTTP server of a registry's metrics on ``/metrics`` (any path, like
    ``prometheus_client.start_http_server``), IPv4, in a daemon thread; `close()` stops
    it, then closes `collectors` (those of `serve`)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        collectors: tuple[ServiceCollector, ...] = (),
    ) -> None:
        self._httpd = make_server(
            host,
            port,
            make_wsgi_app(registry),
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._collectors = collectors
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="shmwheel-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Where the metrics are served."""
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()
        for c in self._collectors:
            c.close()


def serve(service: TimerService | str, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
    """Serve `service`'s metrics (a `ServiceCollector` in a registry of its own) on
    ``http://host:port/metrics``; port 0 picks a free port (``.port`` says which)."""
    collector = ServiceCollector(service)
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        return MetricsServer(registry, host, port, (collector,))
    except BaseException:
        collector.close()
        raise
