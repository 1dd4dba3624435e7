"""Jobs: work bounded in time (docs/api.md, "Jobs").

Where each module runs:

* ``executor.py``, ``job.py``, ``retry.py``: the caller's process (the public face:
  ``Executor``, ``Job``, ``Retry``); ``link.py`` (a client's side of the job link) and
  ``wire.py`` (the link's frames) there too.
* ``pool.py``, ``manager.py``, ``state.py``, ``failures.py``, ``ledger/``, ``remote.py``,
  ``timers.py``, ``workers.py``: the process that owns the pool (the supervisor's, or the
  caller's for an Executor's own pool): the pool, the manager thread that serves its job
  workers and the job link, and what they share (``wire.py`` too, for the link).
* ``worker.py``: the job worker processes.

Imports point one way: executor -> pool -> job, retry, worker; worker imports nothing of
the service but ``errors`` and, when a job names a registered task, the task registry
(``service/tasks.py``), so a worker process carries little besides the jobs' own modules.
No module here imports a room of the service (``caller/``, ``supervisor/``,
``processes/``): only its shared modules (``forkserver``, ``tasks``); the rooms import
these.
"""
