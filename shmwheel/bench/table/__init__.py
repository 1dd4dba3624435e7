"""The bench's table of workloads: which function measures each, against which peers, and
the goals it is checked against. Each module's ``ROWS`` is its part of the table, one row
a workload (id, name, measuring function, spec); ``registry`` puts them in table order:
``service`` (W1-W8), ``journal_purgatory`` (W9, W10), ``heartbeat`` (W11, W12), ``jobs``
(W13), then ``inprocess``."""
