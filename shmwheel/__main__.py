"""``python -m shmwheel``: the ``shmwheel`` command (shmwheel/cli)."""

from shmwheel.cli import main

raise SystemExit(main())
