"""First section: what this run can show. Per task and model: how many questions, what one question
is worth, the baseline against chance, and the smallest drop the run could detect, so a reader
knows before any curve which differences are resolvable and which tasks the model cannot do."""

from __future__ import annotations

import pandas as pd

from headstats.report.sections.context import Context, Writer, fit_sentences, term
from headstats.stats import coverage


def _completeness_and_time(writer: Writer, context: Context) -> str | None:
    """Completeness, run times and computation paths (for the appendix); returns what is missing
    when the run is partial."""
    partial = None
    table = coverage.completeness(context.planned, context.passes)
    if table is not None:
        planned, finished = int(table["points_planned"].sum()), int(table["points_finished"].sum())
        if finished < planned:
            partial = f"{finished} of the {planned} sweep points its analysis file plans are finished"
            writer.heading("Completeness", 3)
            writer.text(
                f"**This report is partial**: {finished} of the {planned} sweep points its analysis file plans are "
                "finished (the run resumes where it stopped). Tasks and models marked `not started` have no results "
                "here; a score with points missing has a curve that ends where the run stopped, so its "
                "within-1-point value, when censored, is a lower bound over a shorter range."
            )
        else:
            writer.heading("Completeness", 3)
            writer.text(f"Every one of the {planned} sweep points the analysis file plans is finished.")
        writer.table(table, "completeness")
    times = coverage.run_times(context.passes)
    if times is not None:
        writer.heading("Run time", 3)
        writer.text(
            "Run time: the wall time of each sweep pass as its file records it (`passes_timed`; p = 0 points "
            "calibrated on the evaluation prompts reuse the baseline's answers and cost no pass), one row per "
            "machine and model dtype the passes ran on. `cpu_hours` is the process's CPU time over the same passes "
            "(all threads): wall time well above CPU time / threads means the run was paused or shared its cores. "
            "A pass resumed from saved batches counts the time of every session that ran it, except batches saved "
            "before times were kept (`part_timed` passes)."
        )
        writer.table(times, "run_times", floatfmt=".3g")
    mixed = coverage.mixed_paths(context.passes)
    if mixed is not None:
        writer.heading("Computation paths", 3)
        writer.text(
            "Computation paths: a sweep runs every pass on whole sequences through one attention kernel, so that a "
            "point differs from its baseline only by the heads it zeroes. The points below ran otherwise "
            "(`other_kernel`: another kernel than the baseline's) or are passes that predate that record "
            "(`unrecorded`: a resumed sweep keeps such a file only when it can show its path, since a score that "
            "reads the attention probabilities ran the explicit kernel and a task none of whose sequences share a "
            "prefix ran whole; it computes the others again). In a bf16 body, the path alone moves 1-3% of answers "
            "with nothing zeroed (`benchmarks/bench_paths.py`); in fp32, none."
        )
        writer.table(mixed, "mixed_paths")
    return partial


CAN_SHOW_WORDS = 120  # the most words of this section's text: the rest is in the appendix


def _can_show_legend(context: Context, table: pd.DataFrame) -> str:
    need = coverage.fewest_questions_to_certify()
    other = f"baseline_{coverage.other_metric(context.options.metric)}"
    return (
        "Per task and model: questions asked and the clusters they fall in (`cluster`, `n_clusters`: MMLU "
        "questions of one subject share a few-shot prefix, so intervals resample whole subjects), what one "
        "question is worth in accuracy points, the baseline accuracy with its 95% interval against chance (the "
        "mean of 1 / number of choices), and `min_detectable_drop`: the smallest drop in points that a paired "
        f"comparison on these questions detects with {coverage.POWER:.0%} power at one-sided level 5% even when every "
        "changed answer is a loss (answers that change both ways, or together within a cluster, need larger "
        "drops). Certifying 'within 1 point' "
        f"(one-sided {coverage.CONFIDENCE:.0%} score bound of the paired drop at most 1 point) needs at least {need} "
        "questions even when no answer changes (`can_certify_1pt`)."
        + (
            f" `{other}`: the baseline under the accuracy this report does not read (`correct_norm` is lm-eval's "
            "acc_norm, log-likelihoods divided by the answer's length in characters), to set beside published "
            f"numbers; every other reading here is of `{context.options.metric}`."
            if other in table.columns
            else ""
        )
    )


def _warnings(table: pd.DataFrame) -> list[str]:
    """One short sentence per kind of limit, in words: tasks at chance, tasks too small to certify 1 point."""
    out = []
    chance = table[table["at_chance"]]
    for row in chance.itertuples(index=False):
        out.append(
            f"**On `{row.task}`, `{row.model}` answers no better than guessing**: {row.baseline:.1f}% correct "
            f"(95% interval {row.baseline_low:.1f} to {row.baseline_high:.1f}%) against {row.chance:.1f}% by chance, "
            "so its curves cannot show which heads the task needs."
        )
    small = table[~table["at_chance"] & ~table["can_certify_1pt"]]
    if len(small):
        need = coverage.fewest_questions_to_certify()
        pairs = ", ".join(f"{r.min_detectable_drop:.0f} points on `{r.task}` ({r.model})" for r in small.itertuples())
        out.append(
            f"Too few questions to {term('certify', 'certified')} that accuracy stays within 1 point (that needs at "
            f"least {need}); the smallest drops this run {term('detects', 'mde')}: {pairs}. Read those curves as "
            "demonstrations, not measurements of a 1-point drop."
        )
    return out


def what_this_run_can_show(writer: Writer, context: Context) -> None:
    writer.heading("What this run can show")
    methods = "#methods-and-caveats"
    with writer.appendix():
        if context.options.notes:
            writer.heading("Notes on this run", 3)
            writer.text(context.options.notes)
        if context.scores is not None:
            writer.heading("Score samples", 3)
            writer.text(
                "Score tables: sequences scored per dataset and model, and the clusters they come from. Distances and "
                "noise floors can only be as precise as the number of independent clusters allows: a few clusters "
                "sharing a prompt prefix are a small sample whatever the number of sequences."
            )
            writer.table(coverage.score_samples(context.scores), "score_samples")
        partial = _completeness_and_time(writer, context)
    sentences = []
    if partial:
        sentences.append(f"**This report is partial**: {partial} ([what is missing]({methods})).")
    if context.points is None:
        sentences.append(
            "No intervention results: this run shows score distributions only, not what zeroing heads costs "
            f"([methods and caveats]({methods}))."
        )
        writer.text(fit_sentences(sentences, CAN_SHOW_WORDS))
        return
    table = coverage.what_it_can_show(context.interventions, context.points, context.options.metric)
    legend = writer.note("Reading the table of what this run can show", _can_show_legend(context, table))
    sentences.append(
        "Per task and model: questions, the baseline with its 95% interval against chance, and the smallest drop "
        f"this run detects ([full legend](#{legend}); paths, dtypes and run notes: [methods and caveats]({methods}))."
    )
    writer.text(fit_sentences([*sentences, *_warnings(table)], CAN_SHOW_WORDS))
    writer.table(table, "what_this_run_can_show", floatfmt=".3g")
