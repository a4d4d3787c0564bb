"""Reports: figures (:mod:`~headstats.report.plots`), the HTML/markdown writer and its sections
(:mod:`~headstats.report.writer`), and the study's published curves (:mod:`~headstats.report.paper`)."""
