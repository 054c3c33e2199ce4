"""`python -m tidings.bench`: the bench CLI until it is wired into the `tidings` command."""

import sys

from tidings.bench.cli import main

sys.exit(main())
