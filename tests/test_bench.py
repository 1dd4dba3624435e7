import json
import subprocess
import sys

from shmwheel.bench.__main__ import workloads


def test_bench_quick_writes_every_workload(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "shmwheel.bench", "--quick", "--n", "20000", "--timer-n", "2000",
         "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert set(doc["workloads"]) == {w.key for w in workloads()}
    for key, w in doc["workloads"].items():
        for mine, theirs in w["rows"]:
            assert w["median"][mine] > 0 and w["median"][theirs] > 0, key
    assert doc["machine"]["cores"] >= 1
    assert "ratio" in proc.stdout and "heapq heappop" in proc.stdout
    assert "[1/" in proc.stderr, "progress is shown per workload"


def test_bench_rejects_unknown_workload():
    proc = subprocess.run([sys.executable, "-m", "shmwheel.bench", "--workloads", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown workloads" in proc.stderr
