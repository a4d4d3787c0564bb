"""Statistics on headstats' tables (pandas in, pandas out).

- :mod:`~headstats.stats.w1`: every Wasserstein-1 kernel (sorted support with weights; sorted samples);
- :mod:`~headstats.stats.thresholds`: the calibration rule (one quantile rule for every threshold);
- :mod:`~headstats.stats.curves`: the within-1-point readings (``first``, censored, ``study``) and
  curve areas of one accuracy curve;
- :mod:`~headstats.stats.paired`: accuracy intervals, paired per-question tests, the certification
  bound of a paired drop and the minimum detectable drop;
- :mod:`~headstats.stats.summary`: per-point and per-curve summaries of intervention results;
- :mod:`~headstats.stats.distances`: Wasserstein-1 between models' score distributions, with
  cluster-level bootstrap, permutation test and noise floor;
- :mod:`~headstats.stats.stability`: do a model's heads keep their order across datasets?
- :mod:`~headstats.stats.overlap`: do two score functions select the same heads?
- :mod:`~headstats.stats.inactive`: on what share of the texts does a score call each head inactive?
- :mod:`~headstats.stats.ranking`: ranking score functions by their curves, across models;
- :mod:`~headstats.stats.large`: W1 matrices and overlap read straight from a results folder too
  large for pandas (``*_from_dataset``), on the same kernels.

Every resampling statistic resamples clusters (MMLU subjects, source documents, else sequences or
questions) and names the unit in a ``cluster`` column; p-values of one table are Holm-adjusted.

Submodules are imported explicitly (``from headstats.stats import distances``); nothing is
imported here, so that reading one statistic does not import the others.
"""

# How curves are ranked (:mod:`~headstats.stats.ranking`); here so that the command line can offer
# the choices without importing scipy and pandas.
RANK_METRICS = ("norm_auc", "grid_auc")
