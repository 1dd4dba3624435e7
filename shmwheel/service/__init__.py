"""The multiprocess service, in rooms by the process their code runs in (docs/concepts.md,
"Layers"): ``caller/`` (the embedding process's clients: ``connect``, ``Client``, handles),
``supervisor/`` (``TimerService``, which starts and watches the service), ``processes/``
(the service's own processes: the coordinator, the reaper, the executors, and the zygote
that forks them) and ``jobs/`` (the job pool and its workers). The modules here are the
few every room shares: ``calendar`` (cron times, computed by clients and executors),
``tasks`` (the task registry and the processes' import path), ``tracebacks`` (a failed
task's exception, written by an executor and read by a client), ``stats`` (the figures any
attached process reads) and ``forkserver`` (the fork server, started by whichever process
owns service processes or job workers). They import no room; the rooms import them."""
