"""Jobs: work bounded in time (docs/api.md, "Jobs").

Where each module runs:

* ``executor.py``, ``job.py``, ``retry.py``: the caller's process (the public face:
  ``Executor``, ``Job``, ``Retry``).
* ``pool.py``: the process that owns the pool (the supervisor's, or the caller's for an
  Executor's own pool): the job workers and the manager thread that serves them.
* ``worker.py``: the job worker processes.

Imports point one way: executor -> pool -> job, retry, worker; worker imports nothing of
the service (only ``errors``), so a worker process carries little besides the jobs' own
modules.
"""
