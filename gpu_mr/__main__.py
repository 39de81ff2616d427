"""``python -m gpu_mr``: the same command line as ``gpu-mr``."""

import sys

from gpu_mr.cli import main

sys.exit(main())
