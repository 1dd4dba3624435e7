import sys
from pathlib import Path

# the service's sample tasks (workers.tasks) must be importable here and, through the
# path the supervisor hands its children, in executors, however pytest was started
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
