"""The pipeline's running: the Spark session (``session``, its JVM class archive
``jvm_archive``), the job that chains the stages (``job``), the report it writes
(``report``), shipping the package to a cluster (``ship``) and the background threads the
stages overlap with (``background``)."""
