"""The bench's table of workloads: which function measures each, against which peers, and
the goals it is checked against (``registry`` gathers ``service``, ``journal_purgatory``,
``heartbeat`` and ``jobs``, then the in-process rows)."""
