"""The sections of a report, in the order they appear: :data:`SECTIONS`, a registry of lazy
``"module:function"`` entries.

A section is a function ``section(writer, context)`` (:data:`~.context.Section`): it reads the
tables of :class:`~.context.Context` (score tables, intervention rows and their summaries, the
models' identities, the options) and writes headings, text, tables and figures to the
:class:`~.context.Writer`, or nothing when its inputs are absent. To add a statistic to reports,
write one section function (in a module here) and register it in :data:`SECTIONS` where it belongs
in the page (``SECTIONS.register_lazy(name, "headstats.report.sections.module:function")``; user code
may ``SECTIONS.register(name, function)``, which adds it last). An entry whose module defines no such
function fails the report, naming the file (``tests/test_registry.py`` resolves every entry). Whatever their order,
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

from headstats.registry import Registry
from headstats.report.sections.context import Context, Section, Writer
from headstats.report.sections.curves import add_curve_sections
from headstats.report.sections.provenance import write_provenance

SECTIONS: Registry[Section] = Registry("report section")
# the lead: abstract, headline figure, main table (rendered first, before the contents)
SECTIONS.register_lazy("the_answer", "headstats.report.sections.answer:the_answer")
# per task: n, points per question, baseline vs chance, detectable drop
SECTIONS.register_lazy("what_this_run_can_show", "headstats.report.sections.can_show:what_this_run_can_show")
# per dataset: means of every score, ECDFs, layer x head maps
SECTIONS.register_lazy("score_distributions", "headstats.report.sections.distributions:score_distributions")
# do two scores select the same heads?
SECTIONS.register_lazy("score_overlap", "headstats.report.sections.overlap:score_overlap")
# W1 distances with intervals, p-values and noise floors
SECTIONS.register_lazy("between_models", "headstats.report.sections.distances:between_models")
# the same models under another prompt format (ReportSpec.contrast)
SECTIONS.register_lazy("format_contrast", "headstats.report.sections.contrast:format_contrast")
# rank stability and per-layer W1 of each model's heads
SECTIONS.register_lazy("across_datasets", "headstats.report.sections.stability:across_datasets")
# per task: points, curves, within 1 point, rankings
SECTIONS.register_lazy("interventions", "headstats.report.sections.curves:interventions")
# the provenance of every table used
SECTIONS.register_lazy("provenance", "headstats.report.sections.provenance:provenance")

__all__ = [
    "SECTIONS",
    "Context",
    "Section",
    "Writer",
    "add_curve_sections",
    "write_provenance",
]
