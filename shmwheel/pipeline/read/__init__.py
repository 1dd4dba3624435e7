"""The pipeline's first stage: reading journals. Segments are found (``fleet``), decoded
into Arrow event batches (``events``, ``decode``, the Spark data source ``datasource``,
its filters ``filters``) and written into parquet buckets by timer id (``buckets``,
``parts``)."""
