import pytest

from shmwheel.wheel_core import warm_up


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels():
    """Compile (or load) the wheel kernels once, before any test measures time."""
    warm_up()
