"""Statistics on headstats' tables (pandas in, pandas out).

- :mod:`~headstats.stats.curves`: the within-1-point number and curve areas of one accuracy curve;
- :mod:`~headstats.stats.paired`: accuracy intervals and paired per-question tests;
- :mod:`~headstats.stats.distances`: Wasserstein-1 between models' score distributions, with
  sequence-level bootstrap, permutation test and noise floor;
- :mod:`~headstats.stats.stability`: do a model's heads keep their order across datasets?
- :mod:`~headstats.stats.overlap`: do two score functions select the same heads?
- :mod:`~headstats.stats.ranking`: ranking score functions by their curves, across models.

Submodules are imported explicitly (``from headstats.stats import distances``); nothing is
imported here, so that reading one statistic does not import the others.
"""
