"""``python -m shmwheel``: the ``shmwheel`` command (shmwheel/cli)."""

import os
import sys

# `python -m` puts the working directory first on sys.path (unless -P): dropped before the
# command imports anything more, so nothing another user planted there runs in it or in
# the services it starts (`run` puts it back when only this user can write it)
if not sys.flags.safe_path and sys.path and sys.path[0] == os.getcwd():
    del sys.path[0]

from shmwheel.cli import main  # after the path is made safe

raise SystemExit(main())
