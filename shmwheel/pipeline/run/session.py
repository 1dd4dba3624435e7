"""The pipeline's SparkSession: embedded by default, unchanged under ``spark-submit``.

The master is never fixed in code when Spark was launched by ``spark-submit`` (settings
made in code override its flags): then the session takes what ``--master`` and ``--conf``
said. Run as a plain ``python -m shmwheel.pipeline``, the session is embedded
(``local[*]``) unless ``--master`` names one, and ``PYSPARK_PYTHON`` is set to the running
interpreter so Spark's Python workers import this very shmwheel. Logs are quiet (errors
only) unless ``verbose``. An embedded session's JVM maps Spark's classes from the class
archive the ``audit`` command keeps (``jvm_archive.py``): it then starts in about half
the time (3.7-7.0 s against 6.6-11.2 s here).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import jvm_archive
from .background import in_thread

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger("shmwheel.pipeline")

#: rows per Arrow batch between the JVM and Python: Spark's 10,000 made the hand-over of
#: a shuffle's rows to numpy cost 1.7x as much (docs/performance.md)
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
ARROW_BATCH_ROWS = 1 << 19
#: numpy's huge pages in the embedded session's Python workers: off (numpy asks the kernel
#: for them on large arrays; where transparent huge pages are "madvise" with direct
#: compaction, the default on this machine, decoding a 64 MiB segment spent 3x the
#: system time and 1.4x the wall time with them: docs/performance.md). The variable, if
#: set in the driver's environment, is passed on instead.
HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"
#: the embedded session's JVM (in local mode, the driver runs every task): its client
#: compiler only and one garbage-collector thread. The audit's work is in Python; the
#: JVM's default JIT and GC threads spent 27.6 s of CPU in a session that ran one tiny
#: job (16.3 s with these), taken from the Python workers on a machine of two cores
#: (docs/performance.md)
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_LOG4J = os.path.join(os.path.dirname(__file__), "log4j2-quiet.properties")
#: the class archive's plan of the embedded session this process started last
_archive: list[jvm_archive.Plan] = [jvm_archive.OFF]


class SparkUnavailable(RuntimeError):
    """PySpark or Java is missing: the message says what to install."""


def under_spark_submit() -> bool:
    """Whether this Python driver was started by spark-submit (its JVM is already up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def check_java() -> tuple[str, str]:
    """Java 17+ must be on PATH (or JAVA_HOME) for an embedded session: the java binary
    and what its ``-version`` says."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise SparkUnavailable(
            "the audit pipeline runs on Spark, which needs Java 17 or later: install it "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SparkUnavailable(f"could not run {java} -version: {e}") from None
    text = out.stderr + out.stdout
    major = _java_major(text)
    if major is not None and major < 17:
        raise SparkUnavailable(f"Spark 4 needs Java 17 or later; {java} is Java {major}")
    return java, text


def _java_major(version_text: str) -> int | None:
    import re

    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def spark_session(
    master: str | None = None,
    shuffle_partitions: int | None = None,
    app_name: str = "shmwheel-audit",
    verbose: bool = False,
    data_source: bool = True,
    write_archive: bool = False,
    whole_stage_codegen: bool = True,
) -> SparkSession:
    """The session the audit runs in (see the module docstring); the data source is
    registered in it unless `data_source` is false (the ``audit`` command's job opens
    the segments itself: registering costs a Python worker that imports every
    ``pyspark_*`` module, 2.4 s of the session's start). An embedded session's JVM maps
    the class archive (``jvm_archive.py``) if there is a sound one; with `write_archive`
    (the ``audit`` command, which then calls ``finish_archive``) it writes one at exit
    if there is none. Without `whole_stage_codegen` (the ``audit`` command: its jobs'
    work is in Python), Spark does not compile each job's plan: Janino, its compiler,
    cannot be in the class archive (a signed jar), and compiling cost the first Python
    job about 0.4 s (medians 1.47 s against 1.05 s until its Python daemon started:
    bench/results/audit-jvm-probes-2026-11-27.txt)."""
    embedded = not under_spark_submit()
    planner: concurrent.futures.Future[jvm_archive.Plan] | None = None
    if embedded:
        java, version_text = check_java()
        memory = os.environ.get("SHMWHEEL_SPARK_MEMORY") or default_memory()
        if _starts_a_jvm():  # the archive's check (0.3 s, a hash) runs beside the imports
            args = (java, version_text, spark_home(), f"{JVM_OPTIONS} -Xmx{memory}")
            planner = in_thread("shmwheel-archive-check", jvm_archive.plan, *args, write_archive)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable(
            "the audit pipeline needs PySpark: pip install 'shmwheel[spark]'"
        ) from None
    builder = SparkSession.builder.appName(app_name)
    if embedded:
        builder = _embedded(builder, master, memory, planner, verbose)
    elif master:
        log.warning("--master %s ignored: spark-submit's --master decides", master)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    elif not under_spark_submit():
        builder = builder.config("spark.sql.shuffle.partitions", str(default_partitions()))
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    if not whole_stage_codegen:
        builder = builder.config("spark.sql.codegen.wholeStage", "false")
    spark = builder.getOrCreate()
    from ..read.datasource import register

    if spark.sparkContext.getConf().get(ARROW_BATCH) is None:  # not set by spark-submit
        spark.conf.set(ARROW_BATCH, str(ARROW_BATCH_ROWS))
    if not verbose:
        spark.sparkContext.setLogLevel("ERROR")
    if data_source:
        register(spark)
    return spark


def _embedded(
    builder: SparkSession.Builder,
    master: str | None,
    memory: str,
    planner: concurrent.futures.Future[jvm_archive.Plan] | None,
    verbose: bool,
) -> SparkSession.Builder:
    """The settings of a session this process launches (not spark-submit's): local
    master unless told, no UI, the driver's heap, the hugepage switch for the executors,
    quiet log4j unless `verbose`, and the class archive's JVM options from `planner`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = builder.master(master or "local[*]")
    builder = builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.driver.memory", memory)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    hugepage = os.environ.get(HUGEPAGE_ENV, "0")
    builder = builder.config(f"spark.executorEnv.{HUGEPAGE_ENV}", hugepage)
    quiet = f"-Dlog4j2.configurationFile=file:{_LOG4J}"
    plan = _planned(planner) if planner is not None else jvm_archive.OFF
    if planner is not None:
        _archive[0] = plan
    driver = " ".join(o for o in (JVM_OPTIONS, plan.options, "" if verbose else quiet) if o)
    builder = builder.config("spark.driver.extraJavaOptions", driver)
    if not verbose:
        builder = builder.config("spark.executor.extraJavaOptions", quiet)
    if master and not master.startswith("local"):
        # a cluster's executors run this interpreter too (same path on every host)
        builder = builder.config("spark.pyspark.python", sys.executable)
    return builder


def archive_plan() -> jvm_archive.Plan:
    """What the last embedded session's JVM did with the class archive."""
    return _archive[0]


def finish_archive(progress: Callable[[str], None]) -> bool:
    """After ``spark.stop()``, in a session started with ``write_archive``: end the JVM
    and keep the archive it writes (``jvm_archive.finish``; 15-20 s, once); a later
    session in this process launches a JVM of its own. Whether an archive was written."""
    plan, _archive[0] = _archive[0], jvm_archive.OFF
    if not plan.writes:
        return False
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    progress(f"[archive] writing the JVM's class archive for later audits (once; "
             f"{jvm_archive.ENV}=off skips it)")  # fmt: skip
    written = jvm_archive.finish(plan, proc, progress)
    if gateway is not None:  # its JVM is gone: a later session in this process starts anew
        SparkContext._gateway = None
        SparkContext._jvm = None
    return written


def spark_home() -> str:
    """Where Spark's jars are: $SPARK_HOME, else the pyspark package (a pip install;
    found without importing it)."""
    import importlib.util

    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else ""


def _starts_a_jvm() -> bool:
    """Whether the next session launches its JVM (none launched in this process yet): its
    options are fixed at launch."""
    pyspark = sys.modules.get("pyspark")
    return pyspark is None or getattr(pyspark.SparkContext, "_gateway", None) is None


def _planned(planner: concurrent.futures.Future[jvm_archive.Plan]) -> jvm_archive.Plan:
    """The archive's plan; off if working it out failed (the audit runs without it)."""
    try:
        return planner.result()
    except Exception as e:  # noqa: BLE001 - the archive only ever costs speed
        log.warning("the JVM class archive is off for this run: %s: %s", type(e).__name__, e)
        return jvm_archive.OFF


def active_session() -> SparkSession | None:
    """The SparkSession already running in this process, if any (None without PySpark)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def default_memory() -> str:
    """The embedded driver's heap (local mode runs every task in it): a quarter of the
    machine's memory, between 1 and 6 GiB (Spark's own 1 GiB made the audit's shuffle
    spill and collect garbage: docs/performance.md)."""
    import psutil

    quarter = round(psutil.virtual_memory().total / 4 / (1 << 30))
    return f"{min(6, max(1, quarter))}g"


def default_partitions() -> int:
    """Shuffle partitions for an embedded session: a few per core (Spark's 200 suits a
    cluster, not two cores)."""
    return max(4, 2 * (os.cpu_count() or 1))
