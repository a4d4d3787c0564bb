"""``headstats.scores``: the public name of the score registry, :mod:`headstats.engine.scores`
(``headstats.scores.register(Score(...))``, ``from headstats.scores import Score``). Importing it
gives that very module, so both names share one registry."""

import sys

from headstats.engine import scores as _engine_scores

sys.modules[__name__] = _engine_scores
