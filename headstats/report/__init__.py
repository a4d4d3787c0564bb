"""Reports: :func:`~headstats.report.writer.build_report` runs the list of sections
(:data:`headstats.report.sections.SECTIONS`, one small module per section) over a results folder
and renders them with :class:`~headstats.report.writer.ReportWriter` (HTML + markdown); figures
come from :mod:`~headstats.report.plots`, drawn with :mod:`~headstats.report.figure`, the study's published curves from
:mod:`~headstats.report.paper`.

- :mod:`~headstats.report.writer`: ``headstats report``, a report of a results folder built from its
  Parquet tables alone;
- :mod:`~headstats.report.sections`: the sections of that report, in the order they appear;
- :mod:`~headstats.report.plots`: the figure kinds (accuracy curves, matrices, score distributions),
  drawn from finished tables without pyplot;
- :mod:`~headstats.report.figure`: the machinery they share: how scores and models look, legible text
  at a report's width, annotations kept apart, atomic PNG and SVG;
- :mod:`~headstats.report.paper`: ``headstats paper``, the study's Table 2 and MMLU figures rebuilt from
  its published numbers;
- :mod:`~headstats.report.freshness`: is a committed report built from the inputs it sits beside?
  Content hashes, not timestamps (:func:`~headstats.report.freshness.check_report`).

The reports of the other study kinds, each built from its results alone:

- :mod:`~headstats.report.compare`: the report of ``headstats compare``: one sentence per comparison,
  one figure, the main table; :mod:`~headstats.report.compare_heads`: its per-head part, how far each
  head moved against its margin;
- :mod:`~headstats.report.confirm`: a pre-registered confirmatory run, per claim the drop's upper bound
  on every computation path and the verdict;
- :mod:`~headstats.report.frontier`: the pruning frontier; :mod:`~headstats.report.frontier_paired`:
  the same when speed is timed in paired rounds (``timing = "paired"``);
- :mod:`~headstats.report.adaptive`: a skipping study (heads skipped per prompt), its answer first;
- :mod:`~headstats.report.finetuning`: a fine-tuning seed study, its sentence per stage end first;
  :mod:`~headstats.report.seed_distance`: the words and the figure of its distance rule;
- :mod:`~headstats.report.registered`: what a report of a pre-registered study says first about its
  registration (one wording for every kind that registers).
"""
