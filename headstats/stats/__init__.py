"""Statistics on headstats' tables (pandas in, pandas out).

- :mod:`~headstats.stats.w1`: every Wasserstein-1 kernel (sorted support with weights; sorted samples);
- :mod:`~headstats.stats.thresholds`: the calibration rule (one quantile rule for every threshold);
- :mod:`~headstats.stats.curves`: the within-1-point readings (``first``, censored, ``study``) and
  curve areas of one accuracy curve;
- :mod:`~headstats.stats.paired`: accuracy intervals, paired per-question tests, the certification
  bound of a paired drop and the minimum detectable drop;
- :mod:`~headstats.stats.summary`: per-point and per-curve summaries of intervention results;
- :mod:`~headstats.stats.tables`: a score table's parts every statistic starts from: one model's rows,
  the scores and datasets two models share, sequence keys, relative-depth bins and clusters;
- :mod:`~headstats.stats.multiple`: multiple testing: Holm, the floor a permutation count allows, and
  the permutations a family needs;
- :mod:`~headstats.stats.distances`: Wasserstein-1 between models' score distributions, with
  cluster-level bootstrap, permutation test and noise floor;
- :mod:`~headstats.stats.matrix`: the W1 matrix of a series of models for one score and depth;
- :mod:`~headstats.stats.stability`: do a model's heads keep their order across datasets?
- :mod:`~headstats.stats.overlap`: do two score functions select the same heads?
- :mod:`~headstats.stats.inactive`: on what share of the texts does a score call each head inactive?
- :mod:`~headstats.stats.ranking`: ranking score functions by their curves, across models;
- :mod:`~headstats.stats.curve_bootstrap`: how sure a curve's area, rank and first drop are (every curve
  of a model resampled together by question clusters), and its Holm-adjusted verdict against random;
- :mod:`~headstats.stats.large`: W1 matrices and overlap read straight from a results folder too
  large for pandas (``*_from_dataset``), on the same kernels;
- :mod:`~headstats.stats.describe`: descriptive tables, each score's quartiles and means per dataset,
  model and head;
- :mod:`~headstats.stats.constant`: scores that cannot tell a model's heads apart (one value for every
  head of a layer), which reports leave out;
- :mod:`~headstats.stats.coverage`: what a run covers and can show (questions, detectable drops,
  sequences, points planned and finished, run times);
- :mod:`~headstats.stats.confirm`: the verdicts of a pre-registered confirmatory run;
- :mod:`~headstats.stats.movement`: which heads move between two models of one architecture;
- :mod:`~headstats.stats.heads`: how far each head moved: its shift in the reference's units, a
  simultaneous interval, a margin and a verdict;
- :mod:`~headstats.stats.compare`: a reference model against other models on the same texts: how far,
  against what margin, equivalent or not, and which heads moved;
- :mod:`~headstats.stats.frontier`: a pruning frontier's drops and bounds, speed-ups and certified shares;
- :mod:`~headstats.stats.adaptive`: heads skipped per prompt: each selection's paired cost, its bounds,
  the certified shares, per-prompt against static;
- :mod:`~headstats.stats.speed`: the speed-up of one model over another from paired, interleaved
  timing rounds;
- :mod:`~headstats.stats.learning`: did a fine-tuning stage learn? Paired changes of its held-out metrics;
- :mod:`~headstats.stats.seeds`: a fine-tuning seed study's decision, with seeds as the unit (the
  contrast rule, the seeds kept, the heads that moved);
- :mod:`~headstats.stats.seed_margin`: a seed study's distance rule: does one run move a score's
  distribution by more than the margin?
- :mod:`~headstats.stats.seed_power`: how that rule behaves on data like a study's own: its level at
  the margin and a design's power.

Every resampling statistic over texts or questions resamples clusters (MMLU subjects, source documents,
else sequences or questions) and names the unit in a ``cluster`` column (the seed statistics take seeds
as the unit, :mod:`~headstats.stats.learning` held-out examples); the p-values of one table are adjusted for
their family (Holm; max-T over a model's heads).

Submodules are imported explicitly (``from headstats.stats import distances``); nothing is
imported here, so that reading one statistic does not import the others.
"""

# How curves are ranked (:mod:`~headstats.stats.ranking`); here so that the command line can offer
# the choices without importing scipy and pandas.
RANK_METRICS = ("norm_auc", "grid_auc")
