"""The journal's workloads: its write cost and whole-service recovery (W9, ``workloads``),
and ``python -m shmwheel.bench --journal-audit``, which writes a journal and audits it
(``audit``)."""
