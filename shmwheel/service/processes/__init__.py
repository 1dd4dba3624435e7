"""What runs in the service's own processes: their entry point (main), the zygote that
forks them already imported (zygote), what every one shares (process, lines), the
coordinator, the reaper and the executors (coordinator, reaper, executor), and the fire
context a task reads while an executor runs it (context). These modules may import the
service's shared modules, the job worker (``jobs.worker``, which main and the zygote
start) and the layers below (the journal's writers); never ``caller/`` or
``supervisor/``: a service process never needs the client or the code that supervises
it."""
