"""Reports: :func:`~headstats.report.writer.build_report` runs the list of sections
(:data:`headstats.report.sections.SECTIONS`, one small module per section) over a results folder
and renders them with :class:`~headstats.report.writer.ReportWriter` (HTML + markdown); figures
come from :mod:`~headstats.report.plots`, the study's published curves from
:mod:`~headstats.report.paper`."""
