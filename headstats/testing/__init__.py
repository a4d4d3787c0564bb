"""Support for headstats' tests and benchmarks (not used by the package itself): synthetic score
tables shaped like real collections (:mod:`headstats.testing.synthetic`)."""
