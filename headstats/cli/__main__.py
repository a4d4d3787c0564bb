"""``python -m headstats.cli``: the same as the ``headstats`` command."""

import sys

from headstats.cli import main

sys.exit(main())
