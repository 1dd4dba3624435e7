"""The multiprocess service: the supervisor (``TimerService``), its processes
(coordinator, reaper, executors) and the client side (``connect``, ``Client``)."""
