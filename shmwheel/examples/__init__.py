"""Example programs that use shmwheel through its public API only, runnable after ``pip
install`` from any directory:

- ``shmwheel.examples.tasks``: sample tasks to register, e.g.
  ``TimerService(tasks={"log": "shmwheel.examples.tasks:log_fire"})``.
- ``python -m shmwheel.examples.producer``: a load generator (``--help``).
"""
