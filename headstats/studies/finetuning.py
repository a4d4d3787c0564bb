"""The fine-tuning kind: a seed study, a file with ``[design]`` (``analyses/finetuning_confirm.toml``;
:mod:`headstats.jobs.finetune.study`).

Its stages: train (each chosen seed's chain built or finished with the design's recipe; run only
when named), collect (each finished checkpoint scored on the design's texts into ``RESULTS/seed-N/``,
resuming) and report (the pre-registered decision from the score tables and the chains' learning
records alone). Its units, counted from the chain folders and the results folder without loading a
model: per seed and stage the training steps left (timed at the seconds per step the study's chains
recorded), and per seed, checkpoint and dataset the texts left (timed at the seconds per text its
collections took). A seed's units run together: its chain trained up to each stage end in turn, then
its checkpoints scored (one still training is named and skipped), each copying the chain's records
next to its scores. ``--seeds`` chooses seeds; ``--results`` puts the score tables elsewhere.
"""

from __future__ import annotations

import logging
from pathlib import Path

from headstats.io.assets import portable_name
from headstats.jobs.dryrun import WorkUnit
from headstats.jobs.finetune.study import (
    SeedStudy,
    amendments,
    chain_machines,
    chain_metrics,
    collect_checkpoint,
    copy_chain_records,
    load_seed_study,
    model_provenance,
    register,
    registration,
    seconds_per_step,
    seconds_per_text,
    seed_cells,
    seed_tables,
    steps_left,
    texts_left,
    train_seed,
)
from headstats.options import SpecError
from headstats.specs import LoadOptions, RunSpec
from headstats.studies.registry import Session, Study, StudyKind, Unit, register_kind

logger = logging.getLogger("headstats")

FINETUNING_NOTE = (
    "a fine-tuning study: train = optimizer steps left per seed and stage (passes left: steps left/steps), timed at "
    "the median seconds per step the study's finished chains recorded (their metrics.json), the learning "
    "measurements not included; collect = texts left per checkpoint and dataset (sequences: texts left), timed at "
    "the seconds per text of the study's collections so far (their part files); a checkpoint not trained yet is "
    "counted with all its texts. -: no rate recorded yet. No model is loaded."
)


def load(path: Path) -> Study:
    return Study("fine-tuning", Path(path), load_seed_study(path))


def chosen_seeds(study: SeedStudy, run: RunSpec) -> list[int]:
    """The seeds ``run`` chooses (``--seeds``), in the design's order; a seed the design lacks is refused."""
    if not run.only_seeds:
        return list(study.design.seeds)
    unknown = [s for s in run.only_seeds if s not in study.design.seeds]
    if unknown:
        raise SpecError(
            "only_seeds",
            f"{', '.join(map(str, unknown))} not in {study.path}'s design (its seeds: "
            f"{', '.join(map(str, study.design.seeds))})",
            label="--seeds",
        )
    return [s for s in study.design.seeds if s in run.only_seeds]


def results_of(study: SeedStudy, run: RunSpec) -> Path:
    return Path(run.results_dir).expanduser() if run.results_dir else study.results


def _seconds(left: int, rate: float | None) -> float | None:
    return None if rate is None or not left else left * rate


def plan(study: Study, run: RunSpec) -> list[Unit]:
    spec: SeedStudy = study.spec
    results = results_of(spec, run)
    per_step = seconds_per_step(spec) if "train" in run.stages else {}
    per_text = seconds_per_text(results) if "collect" in run.stages else None
    samples: dict = {}
    units: list[Unit] = []
    for seed in chosen_seeds(spec, run):
        label = f"[seed-{seed}] "
        if "train" in run.stages:
            for stage, left, steps in steps_left(spec, seed):
                seconds = _seconds(left, per_step.get(stage))
                counted = WorkUnit(
                    f"seed-{seed}", "train", stage, steps, None, None, None, left, steps, 1, None, seconds=seconds
                )
                units.append(
                    Unit(
                        f"seed-{seed}",
                        "train",
                        stage,
                        "training steps",
                        left,
                        steps,
                        None,
                        (spec, seed, stage, results),
                        counted,
                        label=label,
                    )
                )
        if "collect" in run.stages:
            batch = spec.collect.batch_size
            for checkpoint in spec.checkpoints(seed):
                for dataset in spec.datasets:
                    if checkpoint.finished:
                        left, total = texts_left(spec, checkpoint, dataset, results, samples)
                        what = dataset
                    else:
                        left = total = spec.design.texts
                        what = f"{dataset} (not trained yet)"
                    seconds = _seconds(left, per_text)
                    counted = WorkUnit(
                        checkpoint.label, "collect", what, total, left, None, None, int(left > 0), 1, batch, None,
                        seconds=seconds,
                    )  # fmt: skip
                    work = (spec, checkpoint, dataset, results)
                    units.append(
                        Unit(checkpoint.label, "collect", what, "texts", left, total, None, work, counted, label=label)
                    )
    return units


def begin(study: Study, run: RunSpec) -> None:
    """Before the first unit: the design's deciding keys recorded under the results folder, or the
    run refused when the file changed them since (:func:`~headstats.jobs.finetune.study.register`)."""
    register(study.spec, results_of(study.spec, run))


def measure(unit: Unit, model, tokenizer, probe: int, rng, timer=None) -> WorkUnit:
    raise AssertionError("a fine-tuning study's units are counted and timed from recorded rates; no model loads")


def run(unit: Unit, session: Session) -> None:
    """A seed's chain trained up to a stage end, or a checkpoint scored on a dataset (a checkpoint
    still training is named and skipped); the chain's records are copied next to its scores."""
    from headstats.jobs.analysis import given_load

    if unit.stage == "train":
        spec, seed, stage, results = unit.work
        logger.info("[seed-%d] training %s up to %s", seed, spec.chain(seed).name, stage)
        train_seed(spec, seed, log=logger.info, up_to=stage)
        copy_chain_records(spec, seed, results)
        return
    spec, checkpoint, dataset, results = unit.work
    if not checkpoint.finished:
        logger.info("[seed-%d] %s is not finished: skipped (rerun when it is)", checkpoint.seed, checkpoint.label)
        return
    if texts_left(spec, checkpoint, dataset, results)[0]:
        load = LoadOptions(**given_load(session.run))
        model, tokenizer = session.model(unit, str(checkpoint.path), load)
        collect_checkpoint(spec, checkpoint, dataset, results, model, tokenizer, progress=session.progress)
    copy_chain_records(spec, checkpoint.seed, results)


def report(study: Study, run: RunSpec, *, progress: bool = True) -> Path:
    """The decision over every seed of the design scored so far, from ``RESULTS`` alone (the score
    tables and each seed's copied chain records; no chain is read)."""
    import pandas as pd

    from headstats.report.finetuning import SeedDecision, write_seed_report
    from headstats.report.freshness import file_sha256, report_inputs
    from headstats.stats import seed_margin
    from headstats.stats import seeds as seed_stats

    spec: SeedStudy = study.spec
    design, results = spec.design, results_of(spec, run)
    check_results(study, run, results)
    scores, checkpoints = seed_tables(spec, results)
    score_ids = list(spec.collect.scores or ())
    scored_base = bool((checkpoints["stage"] == seed_stats.BASE).any())
    # nothing to measure from before the base is scored
    distances = seed_stats.seed_distances(scores, checkpoints, score_ids) if scored_base else _no_distances()
    metrics = chain_metrics(spec, results)
    learning = seed_stats.learning_by_seed(metrics)
    machines = chain_machines(spec, results, metrics)
    stages = [stage for stage, _ in spec.stage_ends]
    kept, verdicts, sentences = seed_stats.study_decision(
        distances,
        learning,
        seeds=list(design.seeds),
        datasets=spec.datasets,
        score_ids=score_ids,
        margin=design.margin,
        alpha=design.alpha,
        min_seeds=design.min_seeds,
        stages=stages,
        family=design.family,
    )
    if scored_base:
        heads = seed_stats.head_seed_shifts(scores, checkpoints, score_ids, kept, alpha=design.alpha, stages=stages)
    else:
        heads = pd.DataFrame(columns=seed_stats.HEAD_COLUMNS)
    distance_verdicts, distance_sentences = _distance_rule(spec, results, kept, (scores, checkpoints), stages)
    table = kept.merge(learning, on=["seed", "stage"], how="left")
    table.insert(2, "machine", [machines.get(int(seed), "not recorded") for seed in table["seed"]])
    rebuild = f"headstats run {portable_name(study.path)} --stages report"
    decision = SeedDecision(
        title=spec.description or spec.name,
        seeds=tuple(design.seeds),
        margin=float(design.margin),
        alpha=design.alpha,
        min_seeds=design.min_seeds,
        family=design.family,
        power_moved=design.power_moved,
        power_equivalent=design.power_equivalent,
        verdicts=verdicts,
        sentences=sentences,
        learning=table,
        distances=distances,
        heads=heads,
        moved_heads=seed_stats.moved_head_counts(heads),
        # no distance yet (no table holds every dataset's texts): no seed to keep out
        machines=seed_stats.machine_spread(distances, machines, kept if len(distances) else None),
        registration=registration(spec),
        rule=spec.rule,
        distance_verdicts=distance_verdicts,
        distance_sentences=distance_sentences,
        power=seed_margin.achieved_power(distance_verdicts, alpha=design.alpha),
        model=model_provenance(spec),
        design_file=portable_name(study.path),
        design_sha256=file_sha256(study.path),
        rebuild=rebuild + (f" --results {portable_name(run.results_dir)}" if run.results_dir else ""),
        amended=None if (changed := amendments(spec, results)) is None else tuple(changed),
        results=portable_name(results),
    )
    inputs = report_inputs(results, registration(spec)["keys"], study.path, report=spec.report)
    return write_seed_report(decision, spec.report, inputs if results.is_dir() else None)


def _distance_rule(spec: SeedStudy, results: Path, kept, tables, stages: list[str]):
    """The distance rule's verdicts and sentences over the seeds each stage keeps (registered for a
    ``rule = "distance"`` design; a post hoc re-analysis of a contrast design)."""
    from headstats.stats import seed_margin
    from headstats.stats import seeds as seed_stats

    _, checkpoints = tables
    design = spec.design
    ok = set(kept.loc[kept["kept"].astype(bool), ["seed", "stage"]].itertuples(index=False, name=None))
    scored = {
        stage: sorted(set(checkpoints.loc[checkpoints["stage"] == stage, "seed"].astype(int))) for stage in stages
    }
    counts = {stage: sum((s, stage) in ok for s in scored[stage]) for stage in stages}
    cells = seed_cells(spec, results, kept, tables=tables)
    return seed_margin.study_verdicts(
        cells,
        seeds=list(design.seeds),
        scored=scored,
        kept=counts,
        datasets=spec.datasets,
        score_ids=list(spec.collect.scores or ()),
        margin=design.margin,
        alpha=design.alpha,
        min_seeds=design.min_seeds,
        family=seed_stats.FAMILIES[design.family],
        stages=stages,
    )


def check_results(study: Study, run: RunSpec, results: Path) -> None:
    """Refuse, before anything is read, a results folder that is not there: ``--results`` naming
    another folder than the collect stage wrote to, or a study none of whose units has run yet."""
    if results.is_dir():
        return
    if run.results_dir:
        raise SpecError(
            "results_dir",
            f"{run.results_dir} does not exist: give the folder the collect stage wrote this study's tables to (it "
            f"holds seed-N/ folders), or leave --results out to read the file's ({study.spec.results})",
            label="--results",
        )
    raise ValueError(
        f"{study.path}: no results under {results} yet: run its collect stage first "
        f"(headstats run {study.path} --stages collect)"
    )


def _no_distances():
    import pandas as pd

    from headstats.stats.seeds import CELL

    return pd.DataFrame(columns=[*CELL, "comparison", "seed", "other", "w1", "iqr", "n_texts", "w1_iqr"])


def check(study: Study, run: RunSpec, grid: str | None) -> None:
    chosen_seeds(study.spec, run)


FINETUNING = register_kind(
    StudyKind(
        name="fine-tuning",
        section="design",
        description="seed chains of one recipe trained, scored and decided against training noise "
        "(analyses/finetuning_confirm.toml)",
        stages=("train", "collect", "report"),
        load=load,
        plan=plan,
        measure=measure,
        run=run,
        report=report,
        note=FINETUNING_NOTE,
        check=check,
        begin=begin,
        takes=("only_seeds", "results_dir"),
        example="analyses/finetuning_confirm.toml",
    )
)

__all__ = ["FINETUNING"]
