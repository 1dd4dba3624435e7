"""A pytest plugin (``pytest -p kafka_oracle_plugin``, tests/ on sys.path) that puts the
oracle (kafka_oracle.py) under the Kafka layer for the whole run: it replaces the native
types in ``shmwheel.kafka._backend`` before any Kafka module imports them."""

from __future__ import annotations

import sys

import kafka_oracle

import shmwheel.kafka._backend as backend

if any(m in sys.modules for m in ("shmwheel.kafka.timing_wheel", "shmwheel.kafka.purgatory")):
    raise RuntimeError("kafka_oracle_plugin loaded after the Kafka layer was imported")

for name in ("Operation", "Task", "TaskWheel", "Watchers"):
    setattr(backend, name, getattr(kafka_oracle, name))
backend.BACKEND = "oracle"
