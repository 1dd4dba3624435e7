"""What runs in the caller's process, the one that embeds or attaches to a service:
``connect`` and ``Client`` (client, client_base, batch, purgatory, lease, connection),
the time arguments of its calls (times), its handles and how their outcomes reach it
(handles, outcomes). These modules may import the service's shared modules (calendar,
stats, tracebacks), the job link's client side (``jobs.job``, ``jobs.link``,
``jobs.retry``) and the layers below the service; never ``supervisor/`` or
``processes/``: a client attaches to a running service and needs none of the code that
starts or runs it."""
