import json
import subprocess
import sys
import threading
from pathlib import Path

from shmwheel.bench.__main__ import service_workloads, workloads
from shmwheel.bench.baselines import HeapTimer

SERVICE_KEYS = {"svc_schedule_call", "svc_schedule_many", "svc_producers", "svc_cancel",
                "svc_memory", "svc_lateness", "svc_fire"}


def test_bench_quick_writes_every_workload(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "shmwheel.bench", "--quick", "--n", "20000", "--timer-n", "2000",
         "--svc-n", "5000", "--lateness-n", "5000", "--json", str(out)],
        check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert set(doc["workloads"]) == {w.key for w in workloads()}
    assert {w.key for w in service_workloads()} == SERVICE_KEYS <= set(doc["workloads"])
    for key, w in doc["workloads"].items():
        assert w["rows"], key
        for mine, theirs in w["rows"]:
            assert w["median"][mine] > 0 and w["median"][theirs] > 0, key
        for note in w["notes"]:
            assert note in w["median"], (key, note)
    assert doc["machine"]["cores"] >= 1
    assert "ratio" in proc.stdout and "heapq heappop" in proc.stdout
    assert "[1/" in proc.stderr, "progress is shown per workload"

    # the service workloads: every goal has a figure, the lateness run completed
    assert "service goals" in proc.stdout and "Client.schedule_many" in proc.stdout
    assert {g["figure"] for g in doc["goals"]} <= {k for w in doc["workloads"].values()
                                                   for k in w["median"]}
    late = doc["workloads"]["svc_lateness"]["median"]
    assert late["completed: shmwheel service"] == 5000
    assert late["early: shmwheel service"] == 0
    assert doc["workloads"]["svc_memory"]["median"]["shmwheel segment bytes"] > 0

    # every service the bench started was stopped and left nothing in /dev/shm
    assert len(doc["services_started"]) >= len(SERVICE_KEYS)
    assert doc["services_leaked"] == []
    for name in doc["services_started"]:
        assert not list(Path("/dev/shm").glob(f"*shmwheel.{name}*")), name


def test_bench_rejects_unknown_workload():
    proc = subprocess.run([sys.executable, "-m", "shmwheel.bench", "--workloads", "nope"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown workloads" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "shmwheel.bench", "--workloads", "service,nope"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown workloads ['nope']" in proc.stderr


def test_heap_timer_schedule_many_fires_every_entry():
    ht = HeapTimer()
    try:
        done = threading.Event()
        fired: list[int] = []

        def make(i: int):
            def fn() -> None:
                fired.append(i)
                if len(fired) == 5:
                    done.set()
            return fn

        ht.schedule(0.03, make(0))
        entries = ht.schedule_many([0.02, 0.01], make(1))  # pushed into a non-empty heap
        assert len(entries) == 2
        ht.schedule_many([0.001], make(2))
        ht.cancel(ht.schedule_many([0.001], make(9))[0])
        ht.schedule(0.005, make(3))
        assert done.wait(5)
        assert sorted(fired) == [0, 1, 1, 2, 3]  # not 9: cancelled
    finally:
        ht.stop()
