"""The multiprocess-service workloads (W1-W13 but W9): each runs a ``TimerService`` and its
peers (``common`` holds the sizes, the service factory and the Redis switch they share;
``ops`` schedule and cancel, ``timing`` lateness and dispatch, ``footprint`` memory and
start-up, ``producers``, ``heartbeat``, ``lease``, ``jobs``, ``purgatory``)."""
