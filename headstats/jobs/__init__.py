"""Jobs: what a command runs. Each job's options are one spec dataclass (:mod:`~headstats.specs`)
that the CLI, analysis TOML files and Python calls all build.

The jobs:

- :mod:`~headstats.jobs.collect`: collection, model x dataset -> a Parquet score table, streamed and resumable;
  :mod:`~headstats.jobs.collect_plan`: what a collection scores and its resume key, planned without torch;
- :mod:`~headstats.jobs.sweep`: ``headstats ablate``, a task's accuracy under head zeroing at each
  (score, target) point; :mod:`~headstats.jobs.sweep_plan`: a sweep's plan (its points, its resume key,
  what its results folder already holds);
- :mod:`~headstats.jobs.evaluate`: log-likelihood multiple-choice evaluation, one row per question,
  batched, intervention-aware; :mod:`~headstats.jobs.sequences`: the token sequences it reads, planned
  from the tokenizer and configuration alone;
- :mod:`~headstats.jobs.analysis`: declarative analyses (``analyses/NAME.toml``): a file read and
  checked, and the sweep points it plans;
- :mod:`~headstats.jobs.confirm`: pre-registered confirmatory runs: the file and its paths' sweeps;
- :mod:`~headstats.jobs.compare`: ``headstats compare``, a reference model against other models on the
  same texts; :mod:`~headstats.jobs.compare_identity`: what a comparison's models and tables are,
  checked before anything is computed;
- :mod:`~headstats.jobs.prune`: ``headstats prune``, a static head set chosen by a score's mean over a
  calibration set, removed, optionally certified, saved;
- :mod:`~headstats.jobs.frontier`: the pruning frontier, each model pruned at each share by each score,
  with its held-out accuracy and its speed against the unpruned model; :mod:`~headstats.jobs.frontier_plan`:
  a frontier file's plan and what its results folder holds, read without torch;
- :mod:`~headstats.jobs.adaptive`: heads skipped per prompt, measured: per-prompt, static, random and
  oracle selections at equal share against the full model on the same items; :mod:`~headstats.jobs.adaptive_plan`:
  its file and measured rows, read without torch;
- :mod:`~headstats.jobs.timing`: paired, interleaved timing rounds that run until the speed-up is resolved;
- :mod:`~headstats.jobs.finetune`: a fine-tuning chain, SFT -> DPO -> GRPO with TRL;
  :mod:`~headstats.jobs.finetune_data`: its training material, cut into train and held-out parts.

What they share:

- :mod:`~headstats.jobs.checkpoint`: passes that resume from their last saved batch (:class:`PassCheckpoint`);
- :mod:`~headstats.jobs.resume`: resume keys, what a partition's results were computed with, checked
  before a run adds to them;
- :mod:`~headstats.jobs.registration`: pre-registration, one mechanism for every study kind whose
  verdicts follow a rule stated before the data;
- :mod:`~headstats.jobs.dryrun`: what ``headstats run --dry-run`` reports (each unit's row, the summary);
  :mod:`~headstats.jobs.dryrun_units`: one unit counted and timed;
- :mod:`~headstats.jobs.grid`: grids of independent jobs on this machine or on a SLURM cluster,
  through submitit.
"""
