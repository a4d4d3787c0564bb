"""``python -m headstats``: the same as the ``headstats`` command."""

import sys

from headstats.cli import main

sys.exit(main())
