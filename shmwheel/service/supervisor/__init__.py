"""What runs in the supervisor, the ``TimerService`` object in the process that embeds the
service: its options (options), creating the segment, starting and restarting the
service's processes through the fork server, stopping them (supervisor), and the watchdog
its monitor thread runs (watchdog). These modules may import ``caller/`` (the supervisor
lives in the caller's process and hands out its clients), ``jobs/``, the service's shared
modules and the layers below; never ``processes/``: the roles are started by name through
the zygote, never imported here."""
