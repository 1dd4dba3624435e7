"""``python -m shmwheel.pipeline audit JOURNAL OUT`` (also a script for ``spark-submit``:
``spark-submit --master spark://HOST:7077 shmwheel/pipeline/__main__.py audit ...``)."""

import sys

from shmwheel.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
