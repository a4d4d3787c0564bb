"""The ``headstats`` subcommands, one module each: every module of this package ends with
``register_command(Command(...))`` (:mod:`headstats.cli.registry`), and importing the package imports
every module it holds, so nothing lists the commands. A module that registers none fails the import,
naming its file. Each command builds its specs from the parsed flags first
(:func:`headstats.cli.options.spec_from_args`), so a bad option is refused, naming its flag, before a
model loads or a file is written; then it calls the library, importing what needs torch only then.

- :mod:`~headstats.cli.commands.collect`: ``headstats collect``, score tables of models on datasets;
- :mod:`~headstats.cli.commands.ablate`: ``headstats ablate``, a task's accuracy while zeroing heads;
- :mod:`~headstats.cli.commands.summary`: ``headstats summary RESULTS``, the summaries of intervention results;
- :mod:`~headstats.cli.commands.report`: ``headstats report RESULTS``, the report of a results folder;
- :mod:`~headstats.cli.commands.paper`: ``headstats paper``, the study's Table 2 and figures from its numbers;
- :mod:`~headstats.cli.commands.run`: ``headstats run FILE``, a study file of any kind;
- :mod:`~headstats.cli.commands.list`: ``headstats list``, the names of the registries;
- :mod:`~headstats.cli.commands.compare`: ``headstats compare REFERENCE OTHER ...``, answer first
  (:class:`headstats.specs.CompareSpec`'s flags);
- :mod:`~headstats.cli.commands.finetune`: ``headstats finetune``, a base -> SFT -> DPO -> GRPO chain
  (:class:`headstats.specs.FinetuneSpec`'s flags);
- :mod:`~headstats.cli.commands.prune`: ``headstats prune``, the heads a score calls inactive removed and the
  smaller model saved (:class:`headstats.specs.PruneSpec`'s flags);
- :mod:`~headstats.cli.commands.frontier`: ``headstats frontier FILE``, ``headstats run`` for a pruning
  frontier file;
- :mod:`~headstats.cli.commands.inactive`: ``headstats inactive RESULTS``, which heads a score calls inactive
  and on what share of the texts (:class:`headstats.specs.InactiveSpec`'s flags);
- :mod:`~headstats.cli.commands.lm_eval`: ``headstats lm-eval ARGS...``, lm-eval's own command line with
  the ``headstats`` model.
"""

from __future__ import annotations

from operator import attrgetter

from headstats.cli.registry import COMMANDS
from headstats.registry import import_registering

import_registering(
    __name__,
    __path__,
    COMMANDS,
    attrgetter("module"),
    "register_command(Command(...)) (docs/developing.md#adding-a-command)",
)
