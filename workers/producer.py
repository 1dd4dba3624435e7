"""The load generator now lives in the package: ``python -m shmwheel.examples.producer``.
``python -m workers.producer`` (from a checkout) runs the same program."""

import sys

from shmwheel.examples.producer import *  # noqa: F403
from shmwheel.examples.producer import main

if __name__ == "__main__":
    sys.exit(main())
