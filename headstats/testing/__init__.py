"""Support for headstats' tests and benchmarks (not used by the package itself):

- :mod:`headstats.testing.synthetic`: synthetic score tables shaped like real collections;
- :mod:`headstats.testing.margin`: paired texts whose score distributions lie a known W1 apart, for
  the size of ``headstats compare``'s verdicts at the margin;
- :mod:`headstats.testing.head_margin`: heads whose true shifts lie exactly at their margin, for the
  family-wise error of ``headstats compare``'s per-head verdicts.
"""
