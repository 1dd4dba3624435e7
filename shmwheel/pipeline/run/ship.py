"""Shipping shmwheel to a Spark cluster's executors: ``python -m shmwheel.pipeline ship
OUT.zip`` packs the shmwheel installed here (its compiled core included) and the packages
it needs into one zip, which ``spark-submit --archives OUT.zip#shmwheel-ship`` unpacks in
every executor's working directory and ``spark.executorEnv.PYTHONPATH=shmwheel-ship``
puts first on its Python workers' path (docs/pipeline.md, "On a cluster").

The same files are unpacked beside the zip, as ``shmwheel-ship/``: Spark plans a read of
a registered Python data source on the driver, in a Python worker started with the
executors' settings (``spark.pyspark.python`` and ``spark.executorEnv.PYTHONPATH``), so
``spark-submit`` run from that directory finds shmwheel there too (the audit's own
decoding job needs only the executors' copy).

Why a zip unpacked, not ``--py-files``: Python imports a C extension only from a file on
disk, never from inside a zip on ``sys.path``, and shmwheel's core (``shmwheel._native``)
is one. The zip holds what this Python has installed, so the executors' Python must be the
same version on the same platform (the C extensions are built for it); their own
site-packages need only what PySpark's workers need (pyarrow, pandas).
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import re
import shutil
import zipfile
from collections.abc import Iterator

log = logging.getLogger("shmwheel.pipeline")

#: the directory name the recipe gives the unpacked archive (``--archives ZIP#NAME``)
NAME = "shmwheel-ship"
#: distributions the cluster provides (PySpark's own), never packed
PROVIDED = ("pyspark", "py4j", "pyarrow", "pandas")
_PACKAGES = ("shmwheel", "pyspark_shmwheel")  # this project's import packages


def pack(out: str, deps: bool = True, unpack: bool = True) -> list[str]:
    """Write the zip `out`: shmwheel's packages and, with `deps`, every distribution it
    requires (recursively, its extras left out; ``PROVIDED`` never), as installed here;
    with `unpack`, unpack it beside `out` as ``NAME`` (replacing what was there).
    Returns the distributions packed."""
    import shmwheel

    root = os.path.dirname(os.path.dirname(os.path.abspath(shmwheel.__file__)))
    packed = ["shmwheel"]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for pkg in _PACKAGES:
            for path in _tree(os.path.join(root, pkg)):
                z.write(path, os.path.relpath(path, root))
        if deps:
            for dist in _requirements("shmwheel"):
                for path, arc in _files(dist):
                    z.write(path, arc)
                packed.append(dist.metadata["Name"])
    log.info("packed %s into %s", ", ".join(packed), out)
    if unpack:
        where = os.path.join(os.path.dirname(os.path.abspath(out)), NAME)
        shutil.rmtree(where, ignore_errors=True)
        with zipfile.ZipFile(out) as z:
            z.extractall(where)
    return packed


def _tree(directory: str) -> Iterator[str]:
    """The files under `directory` a Python needs (no caches, no build leftovers)."""
    for here, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.endswith(".egg-info")]
        for f in sorted(files):
            if not f.endswith((".pyc", ".o")):
                yield os.path.join(here, f)


def _requirements(name: str) -> list[md.Distribution]:
    """The installed distributions `name` requires, recursively, but ``PROVIDED``."""
    seen: dict[str, md.Distribution] = {}
    todo = [name]
    while todo:
        for req in md.distribution(todo.pop()).requires or []:
            dep = _needed(req)
            if dep is None or dep in seen or dep in PROVIDED:
                continue
            seen[dep] = md.distribution(dep)
            todo.append(dep)
    return list(seen.values())


def _needed(requirement: str) -> str | None:
    """The normalized name a requirement asks for, or None if it does not apply here (an
    extra, a marker this platform fails)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # no packaging: every extra left out, other markers taken
        if "extra" in requirement.partition(";")[2]:
            return None
        m = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
        return _normal(m.group(0)) if m else None
    req = Requirement(requirement)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        return None
    return _normal(req.name)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _files(dist: md.Distribution) -> Iterator[tuple[str, str]]:
    """(path, name in the zip) of a distribution's installed files under its
    site-packages (scripts and caches left out)."""
    for f in dist.files or []:
        if f.parts[0] == ".." or "__pycache__" in f.parts or f.suffix == ".pyc":
            continue
        path = str(dist.locate_file(f))
        if os.path.isfile(path):
            yield path, str(f)


def spark_submit_args(
    archive: str, worker_python: str = "python3", driver_python: str | None = None
) -> list[str]:
    """The spark-submit options of the recipe for the zip `archive`: the executors'
    Python (`worker_python`, the same path on every host) and the driver's (default: the
    one running this)."""
    import sys

    return [
        "--archives", f"{archive}#{NAME}",
        "--conf", f"spark.executorEnv.PYTHONPATH={NAME}",
        "--conf", f"spark.pyspark.python={worker_python}",
        "--conf", f"spark.pyspark.driver.python={driver_python or sys.executable}",
    ]  # fmt: skip
