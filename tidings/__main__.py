"""`python -m tidings` is the `tidings` command."""

import sys

from .cli import main

sys.exit(main())
