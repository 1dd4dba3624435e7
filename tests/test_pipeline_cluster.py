"""The audit on a real Spark cluster with the documented shipping recipe (issue 24): a
standalone master and one worker started here on 127.0.0.1, ``python -m shmwheel.pipeline
ship`` packing shmwheel, and ``spark-submit --archives`` running both readers' audits and
a query of the data source, with executors whose Python cannot import shmwheel by itself.
Everything started is stopped in a ``finally``; nothing listens beyond 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyspark
import pytest
from helpers import settle

from shmwheel.pipeline import cli
from shmwheel.pipeline.demo import write_demo_journal
from shmwheel.pipeline.run import ship

# its own master, worker and spark-submit (no shared session): a group of its own, which
# xdist may run beside the tests of the shared session
pytestmark = [pytest.mark.xdist_group("spark-cluster"), pytest.mark.system]

SPARK_HOME = os.path.dirname(pyspark.__file__)
LOOPBACK = "127.0.0.1"
START_S = 90  # the master and worker must be up within this
SUBMIT_S = 300  # one spark-submit, at most
QUIET = os.path.join(os.path.dirname(ship.__file__), "log4j2-quiet.properties")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP=LOOPBACK, SPARK_LOG_DIR=str(tmp / "logs"),
               SPARK_WORKER_DIR=str(tmp / "work"), SPARK_NO_DAEMONIZE="1")  # fmt: skip
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return env


def _daemon(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a daemon's whole process group (the JVM and anything it started)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=20)


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], until: float) -> None:
    """Until the monotonic time `until`: `text` shows in `log` (AssertionError if `proc`
    exits first or the time runs out)."""

    def seen() -> bool:
        return log.exists() and text in log.read_text(errors="replace")

    settle(lambda: seen() or proc.poll() is not None, until - time.monotonic(), pause=0.5)
    assert seen(), f"{text!r} not in {log} in time:\n{log.read_text(errors='replace')}"


@pytest.fixture
def cluster(tmp_path: Path):
    """A standalone master and one worker (two cores) on 127.0.0.1: the master's URL."""
    env = _env(tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "work").mkdir()
    port = _free_port()
    klass = os.path.join(SPARK_HOME, "bin", "spark-class")
    master = _daemon([klass, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                      "--port", str(port), "--webui-port", str(_free_port())],
                     tmp_path / "master.log", env)  # fmt: skip
    procs = [master]
    try:
        until = time.monotonic() + START_S
        _wait_for(tmp_path / "master.log", "I have been elected leader", master, until)
        url = f"spark://{LOOPBACK}:{port}"
        worker = _daemon([klass, "org.apache.spark.deploy.worker.Worker", url, "--host", LOOPBACK,
                          "--cores", "2", "--memory", "2g", "--webui-port", str(_free_port()),
                          "--work-dir", str(tmp_path / "work")],
                         tmp_path / "worker.log", env)  # fmt: skip
        procs.append(worker)
        _wait_for(tmp_path / "worker.log", "Successfully registered with master", worker, until)
        yield url
    finally:
        for p in reversed(procs):
            _stop(p)


def _worker_python(tmp: Path) -> str:
    """An executor's Python that has PySpark's packages (pyarrow, pandas) but cannot
    import shmwheel by itself: this venv's interpreter without its site initialisation
    (``-S``: the editable install's path hook is not run), its site-packages on the path."""
    import pyarrow

    site = os.path.dirname(os.path.dirname(pyarrow.__file__))
    script = tmp / "worker-python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" '
                      f'exec {sys.executable} -S "$@"\n')  # fmt: skip
    script.chmod(0o755)
    probe = subprocess.run([str(script), "-c", "import shmwheel"], capture_output=True,
                           cwd=tmp, timeout=60)  # fmt: skip
    assert probe.returncode != 0 and b"No module named 'shmwheel'" in probe.stderr
    return str(script)


DRIVER = textwrap.dedent(
    """
    # a driver run by spark-submit: both readers' audits and a query of the data source,
    # in the audit's session (under spark-submit: spark-submit's settings, the source
    # registered)
    import json, sys
    from shmwheel.pipeline.run import job
    from shmwheel.pipeline.run.session import spark_session

    journal, out = sys.argv[1:3]
    spark = spark_session()
    got = {}
    for reader in ("datasource", "binaryfile"):
        s = job.run(spark, journal, f"{out}/{reader}", reader)
        got[reader] = {k: s[k] for k in ("clean", "records", "timers", "violations")}
    df = spark.read.format("shmwheel-journal").load(journal)
    got["query"] = [df.count(), df.filter("kind = 'fired'").count()]

    def where(batches):
        import pyarrow as pa
        import shmwheel
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"f": [shmwheel.__file__]})

    probe = spark.range(0, 2, 1, 2).mapInArrow(where, "f string")
    got["imported_from"] = [r.f for r in probe.collect()]
    print("RESULT " + json.dumps(got))
    spark.stop()
    """
)


def test_audit_on_a_standalone_cluster_with_the_shipping_recipe(cluster, tmp_path):
    journal = tmp_path / "journal"
    n = write_demo_journal(str(journal), one_shots=1500, repeating=2, operations=30,
                           segment_bytes=1 << 16)  # fmt: skip
    archive = tmp_path / "shmwheel.zip"
    assert cli.main(["ship", str(archive)]) == 0
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    cmd = [os.path.join(SPARK_HOME, "bin", "spark-submit"), "--master", cluster,
           *ship.spark_submit_args(str(archive), _worker_python(tmp_path)),
           "--conf", f"spark.driver.host={LOOPBACK}", "--conf", "spark.executor.memory=1g",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{QUIET}",
           str(driver), str(journal), str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path),
                          timeout=SUBMIT_S, cwd=tmp_path)  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-3000:], proc.stderr[-3000:])
    got = json.loads(lines[-1][len("RESULT ") :])
    for reader in ("datasource", "binaryfile"):
        r = got[reader]
        assert r["clean"] and r["violations"] == 0, (reader, r)
        assert r["records"] == n.records
        assert r["timers"]["one-shot"]["n"] == n.one_shots
        assert r["timers"]["operation"]["completed"] == n.completed
    assert got["datasource"] == got["binaryfile"]
    assert got["query"][0] == n.records and got["query"][1] > 0
    # the executors imported the shipped copy, unpacked in their working directory
    work = str(tmp_path / "work")
    assert got["imported_from"] and all(
        f.startswith(work) and f"/{ship.NAME}/shmwheel/" in f for f in got["imported_from"]
    ), got["imported_from"]
