"""The sections of a report, in the order they appear: :data:`SECTIONS`.

A section is a function ``section(writer, context)`` (:data:`~.context.Section`): it reads the
tables of :class:`~.context.Context` (score tables, intervention rows and their summaries, the
models' identities, the options) and writes headings, text, tables and figures to the
:class:`~.context.Writer`, or nothing when its inputs are absent. To add a statistic to reports,
write one section function (in a module here) and add it to :data:`SECTIONS`. Whatever their order,
the page opens with the lead (:func:`~.answer.the_answer`: abstract, headline figure, main table),
then the contents, the body, and the "Methods and caveats" appendix that sections write to with
``writer.appendix()`` and ``writer.note()``.

- ``context``: what every section receives, the :class:`Writer` and the :class:`Context` of one results folder;
- ``answer``: the lead, the answer to the report's question with its main numbers, figure and table;
- ``can_show``: first section, what this run can show per task and model (questions, baseline against
  chance, the smallest detectable drop);
- ``distributions``: score distributions per dataset (means per model, ECDFs, layer x head maps);
- ``overlap``: do two scores select the same heads? Overlap at matched selection rates, per dataset;
- ``distances``: between models, Wasserstein-1 distances of every score per dataset they share;
- ``contrast``: the same checkpoints under another prompt format (``ReportSpec.contrast``);
- ``stability``: across datasets, how stable each model's head scores are when the texts change;
- ``curves``: interventions per task (points, curves, within 1 point, rankings); its
  :func:`add_curve_sections` is shared with ``headstats paper``;
- ``provenance``: last section, the provenance of every table the report used.
"""

from __future__ import annotations

from headstats.report.sections.answer import the_answer
from headstats.report.sections.can_show import what_this_run_can_show
from headstats.report.sections.context import Context, Section, Writer
from headstats.report.sections.contrast import format_contrast
from headstats.report.sections.curves import add_curve_sections, interventions
from headstats.report.sections.distances import between_models
from headstats.report.sections.distributions import score_distributions
from headstats.report.sections.overlap import score_overlap
from headstats.report.sections.provenance import provenance, write_provenance
from headstats.report.sections.stability import across_datasets

SECTIONS: list[Section] = [
    the_answer,  # the lead: abstract, headline figure, main table (rendered first, before the contents)
    what_this_run_can_show,  # per task: n, points per question, baseline vs chance, detectable drop
    score_distributions,  # per dataset: means of every score, ECDFs, layer x head maps
    score_overlap,  # do two scores select the same heads?
    between_models,  # W1 distances with intervals, p-values and noise floors
    format_contrast,  # the same models under another prompt format (ReportSpec.contrast)
    across_datasets,  # rank stability and per-layer W1 of each model's heads
    interventions,  # per task: points, curves, within 1 point, rankings
    provenance,  # the provenance of every table used
]

__all__ = [
    "SECTIONS",
    "Context",
    "Section",
    "Writer",
    "add_curve_sections",
    "write_provenance",
]
