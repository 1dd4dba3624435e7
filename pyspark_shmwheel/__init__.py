"""Registers shmwheel's journal data source in every SparkSession whose driver Python has
shmwheel installed: Spark 4 imports each top-level module named ``pyspark_*`` on the first
use of a Python data source and registers its ``DefaultSource`` under its ``name()``, so
``spark.read.format("shmwheel-journal")`` works without ``spark.dataSource.register``
(docs/pipeline.md, "The data source").

An import that fails (shmwheel installed without its ``spark`` extra, say) leaves the
source unregistered with a warning, rather than failing Spark's lookup of every other
Python data source.
"""

from __future__ import annotations

import logging

try:
    from shmwheel.pipeline.read.datasource import JournalDataSource as DefaultSource
except ImportError as e:  # pragma: no cover - shown by the warning
    logging.getLogger("shmwheel.pipeline").warning(
        "the shmwheel-journal data source is not registered: %s", e
    )
else:
    __all__ = ["DefaultSource"]
