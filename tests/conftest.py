import sys
from pathlib import Path

import pytest

# the service's sample tasks (workers.tasks) must be importable here and, through the
# path the supervisor hands its children, in executors, however pytest was started
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shmwheel.wheel.core import warm_up


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels():
    """Compile (or load) the wheel kernels once, before any test measures time."""
    warm_up()
