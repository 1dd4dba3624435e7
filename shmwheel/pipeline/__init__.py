"""The journal audit on Spark (docs/pipeline.md), grouped by stage: ``read`` finds and
decodes the journals' segments into Arrow events and Parquet buckets; ``tables`` reduces
them to the per-timer table, the per-second figures and the audit's rules; ``run`` holds
the Spark session, the job that chains the stages, the report and shipping to a cluster.
``cli`` is the command line (``python -m shmwheel.pipeline``), ``demo`` records a real
journal to audit."""
