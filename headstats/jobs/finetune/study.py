"""A fine-tuning seed study: a study file with ``[design]`` (``analyses/finetuning_confirm.toml``), its
chains, what is left of their training and scoring, and the tables its decision reads.

The design names one chain per seed, all of one recipe, under its ``chains`` folder
(``<base>-<recipe hash>-seed-<N>``, :mod:`~headstats.jobs.finetune.layout`); its stage ends
(``sft@40``) are the checkpoints compared with the base, which every chain saves with the same
weights and chat template and which is scored once, with the first seed. Each seed's score tables go
to ``RESULTS/seed-N/model=<chain>-<stage>-<step>/dataset=<name>/`` (the ``[collect]`` settings), and a
copy of its chain's records (``metrics.json``, ``recipe.json``) to ``RESULTS/seed-N/_chain/``, so the
decision is rebuilt from the results folder alone when no chain is present.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from headstats.io import store
from headstats.io.assets import local_path
from headstats.jobs.analysis import read_analysis_file, section_table
from headstats.jobs.finetune import layout
from headstats.jobs.finetune.recipe import STAGES, Recipe, read_recipe
from headstats.jobs.registration import Registered
from headstats.jobs.registration import amendments as registration_amendments
from headstats.jobs.registration import register as register_keys
from headstats.options import narrow
from headstats.specs import CollectSection, CollectSpec, FinetuneDesign, ModelsSection

if TYPE_CHECKING:
    from headstats.stats import seed_margin

logger = logging.getLogger("headstats")

SECTIONS = ("models", "collect", "design")
BASE = "base"
# Keys that change neither the checkpoints compared, the texts nor the rule (where things are, the
# stated power and hours): left out of the design's hash.
UNDECIDING = ("chains", "base_model", "recipe_file", "power_moved", "power_equivalent", "cpu_hours")
COLLECT_UNDECIDING = ("batch_size", "data_dir", "progress", "part_seconds", "rows_per_part")
# Keys added after designs were registered, at the value every earlier design ran with: left out of
# the hash there, so an earlier registration keeps its hash.
ADDED_AT = {"rule": None, "skip_sampled": 0}
STEADY_GAP_S = 900.0  # a longer pause between a collection's parts is a stop, not scoring time


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint a seed study scores: the base (with the first seed) or a seed's stage end."""

    seed: int
    stage: str
    step: int
    path: Path

    @property
    def label(self) -> str:
        return BASE if self.stage == BASE else f"seed-{self.seed} {self.stage}@{self.step}"

    @property
    def finished(self) -> bool:
        return layout.is_complete(self.path)


@dataclass(frozen=True)
class SeedStudy:
    """A checked fine-tuning study file."""

    name: str
    path: Path
    description: str
    results: Path
    report: Path
    design: FinetuneDesign
    collect_section: CollectSection
    base_slug: str  # the chains' leading name part: <base_slug>-<recipe hash>-seed-N

    @property
    def collect(self) -> CollectSpec:
        return narrow(self.collect_section, CollectSpec)

    @property
    def datasets(self) -> list[str]:
        return list(self.collect_section.datasets)

    @property
    def chains(self) -> Path:
        return local_path(self.design.chains)

    @property
    def rule(self) -> str:
        """The design's decision rule; a design that names none was registered under the contrast rule."""
        return self.design.rule or "contrast"

    @property
    def stage_ends(self) -> list[tuple[str, int]]:
        return [(end.split("@")[0], int(end.split("@")[1])) for end in self.design.stage_ends]

    def chain(self, seed: int) -> Path:
        return self.chains / f"{self.base_slug}-{self.design.recipe_hash}-seed-{seed}"

    def checkpoints(self, seed: int) -> list[Checkpoint]:
        """The seed's checkpoints the study scores: the base with the first seed, then its stage ends."""
        root = self.chain(seed)
        base = [Checkpoint(seed, BASE, 0, root / BASE)] if seed == self.design.seeds[0] else []
        ends = [Checkpoint(seed, s, n, layout.checkpoint_path(root, s, n)) for s, n in self.stage_ends]
        return base + ends

    def seed_results(self, seed: int, results: Path | None = None) -> Path:
        return (results or self.results) / f"seed-{seed}"


def _base_slug(design: FinetuneDesign, models: tuple[str, ...], path: Path) -> str:
    from headstats.io.identity import model_slug

    if design.base_model:
        return model_slug(design.base_model)
    marker = f"-{design.recipe_hash}-seed-"
    for name in models:
        folder = Path(name).expanduser()
        if folder.is_relative_to(local_path(design.chains)):
            chain = folder.relative_to(local_path(design.chains)).parts[0]
            if marker in chain:
                return chain.split(marker)[0]
    chains = local_path(design.chains)
    found = sorted(chains.glob(f"*{marker}*")) if chains.is_dir() else []
    if found:
        return found[0].name.split(marker)[0]
    raise ValueError(
        f"{path}: [design] names no base and [models] no chain of recipe {design.recipe_hash} under {design.chains}: "
        "give [design] base_model (the model every chain starts from)"
    )


def load_seed_study(path: str | Path) -> SeedStudy:
    """Parse and check a fine-tuning study file: every key, and that ``[models]`` (when given) lists
    exactly the checkpoints the design derives, before any work starts."""
    path = Path(path)
    raw, header = read_analysis_file(
        path, SECTIONS, what="fine-tuning study file", example="analyses/finetuning_confirm.toml"
    )
    names: tuple[str, ...] = ()
    if "models" in raw:  # optional: when given, the design's checkpoints, listed
        names = ModelsSection.from_toml(section_table(raw, "models", path), f"{path}: [models]").names
    collect = CollectSection.from_toml(section_table(raw, "collect", path), f"{path}: [collect]")
    design = FinetuneDesign.from_toml(section_table(raw, "design", path), f"{path}: [design]")
    _check_design(design, collect, path)
    name, results, report = header.folders(path)
    slug = _base_slug(design, names, path)
    study = SeedStudy(name, path, header.description, results, report, design, collect, slug)
    if names:
        derived = {str(c.path) for seed in design.seeds for c in study.checkpoints(seed)}
        given = {str(Path(n).expanduser()) for n in names}
        extra, lacking = sorted(given - derived), sorted(derived - given)
        if extra or lacking:
            first = f"lists {extra[0]}, which the design does not derive" if extra else f"lacks {lacking[0]}"
            raise ValueError(
                f"{path}: [models] {first} ({len(extra)} extra, {len(lacking)} missing): list the design's "
                f"checkpoints ({design.chains}/{study.base_slug}-{design.recipe_hash}-seed-N/STAGE/step-NNNNN and "
                "the first seed's base), or leave [models] out"
            )
    return study


def _check_design(design: FinetuneDesign, collect: CollectSection, path: Path) -> None:
    where = f"{path}: [design]"
    for key in ("recipe_hash", "chains", "seeds", "stage_ends"):
        if not getattr(design, key):
            raise ValueError(f"{where} has no {key}: a seed study names its chains, seeds and stage ends")
    if len(set(design.seeds)) != len(design.seeds):
        raise ValueError(f"{where} lists a seed twice: {list(design.seeds)}")
    stages = [end.split("@")[0] for end in design.stage_ends]
    if stages != [s for s in STAGES if s in stages]:
        raise ValueError(f"{where} stage_ends must follow the chain's order ({', '.join(STAGES)}), once each")
    if not collect.datasets:
        raise ValueError(f"{path}: [collect] has no datasets: name those the stage ends are scored on")
    if collect.limit != design.texts:
        raise ValueError(
            f"{path}: [collect] limit = {collect.limit} but [design] texts = {design.texts}: they are one number"
        )
    if not collect.scores:
        raise ValueError(f"{path}: [collect] names no scores: list those the decision reads")


def registered(study: SeedStudy) -> Registered:
    """Every key that decides the study's verdicts (the recipe's hash, seeds, stage ends, texts,
    margin, rule, and the texts' sampling and scores), as :mod:`headstats.jobs.registration` records
    them before the first unit runs; a key a record lacks ran as its default. A key added after
    designs were registered is left out at the value every earlier design ran with (:data:`ADDED_AT`),
    so an earlier registration keeps its hash."""

    def decides(k: str, v: object) -> bool:
        return not (k in ADDED_AT and v == ADDED_AT[k])

    keys = {k: v for k, v in study.design.settings().items() if k not in UNDECIDING and decides(k, v)}
    keys["collect"] = {
        k: v
        for k, v in study.collect_section.settings().items()
        if k not in COLLECT_UNDECIDING and v is not None and decides(k, v)
    }
    design = {
        f.name: f.default for f in fields(FinetuneDesign) if f.default is not MISSING and f.name not in UNDECIDING
    }
    collect = {
        f.name: f.default
        for f in fields(CollectSection)
        if f.default is not MISSING and f.default is not None and f.name not in COLLECT_UNDECIDING
    }
    return Registered(keys, defaults={**design, "collect": collect})


def registration(study: SeedStudy) -> dict:
    """The deciding keys (:func:`registered`) with their SHA-256: the design's hash the results record."""
    return registered(study).record


def register(study: SeedStudy, results: Path) -> dict:
    """Record the design's deciding keys under ``results`` before the first unit of a run (train or
    collect), or refuse a run of a file whose keys changed since (:func:`headstats.jobs.registration.register`)."""
    return register_keys(results, registered(study), file=study.path.as_posix(), what="a seed study's design and rule")


def amendments(study: SeedStudy, results: Path) -> list[str] | None:
    """The deciding keys the file changed since ``results`` recorded them, empty when none; None
    when no registration is recorded there."""
    return registration_amendments(results, registered(study))


# --- what is left -----------------------------------------------------------------------------------


def steps_left(study: SeedStudy, seed: int) -> list[tuple[str, int, int]]:
    """Per stage end of ``seed``'s chain: (stage, steps left, steps), read from the chain's folders."""
    root = study.chain(seed)
    return [(stage, steps - layout.steps_done(root, stage, steps), steps) for stage, steps in study.stage_ends]


def seconds_per_step(study: SeedStudy) -> dict[str, float]:
    """Per stage: the median seconds per training step the study's chains recorded (``metrics.json``
    ``run.seconds_per_step``); a stage no chain has finished is absent."""
    measured: dict[str, list[float]] = {}
    for seed in study.design.seeds:
        metrics = layout.read_metrics(study.chain(seed) / layout.METRICS_FILE)
        for stage, record in metrics.items():
            value = (record.get("run") or {}).get("seconds_per_step") if isinstance(record, dict) else None
            if isinstance(value, (int, float)) and value > 0:
                measured.setdefault(stage, []).append(float(value))
    return {stage: statistics.median(values) for stage, values in measured.items()}


def _part_time(path: Path) -> float | None:
    stamp = path.name.split("-")[1] if path.name.count("-") >= 2 else ""
    if len(stamp) != 23 or not stamp.isdigit():
        return None
    when = datetime.strptime(stamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc)
    return when.timestamp() + int(stamp[14:]) / 1e9


def seconds_per_text(results: Path) -> float | None:
    """Seconds per text of the collections under ``results``, measured from their part files' close
    times (each part's texts over the time since the one before, or since the table was created;
    pauses longer than :data:`STEADY_GAP_S` are stops, not counted); None before any part."""
    import pyarrow.parquet as pq

    if not results.is_dir():
        return None
    seconds = texts = 0.0
    for partition in store.find_partitions(results, "scores")[0]:
        created = (partition.provenance or {}).get("created")
        times = [datetime.fromisoformat(created).timestamp()] if isinstance(created, str) else []
        parts = sorted((t, f) for f in store.data_files(partition.path) if (t := _part_time(f)) is not None)
        previous = times[0] if times else None
        for when, file in parts:
            if previous is not None and 0 < when - previous <= STEADY_GAP_S:
                seconds += when - previous
                texts += len(set(pq.read_table(file, columns=["sample_id"]).column(0).to_pylist()))
            previous = when
    return seconds / texts if texts else None


# --- running ----------------------------------------------------------------------------------------


def chain_recipe(study: SeedStudy) -> tuple[Recipe, str]:
    """The recipe and base every chain of ``study`` trains with: the design's ``recipe`` file and
    ``base``, or those a chain of its recipe hash records; refused unless they hash to the design's
    ``recipe_hash``."""
    from headstats.jobs.finetune.layout import base_identity

    design = study.design
    recipe, base, where = None, design.base_model, "[design]"
    if design.recipe_file:
        recipe, where = read_recipe(design.recipe_file), design.recipe_file
    if recipe is None or base is None:
        for seed in design.seeds:
            record = layout.read_json(study.chain(seed) / layout.RECIPE_FILE)
            if record:
                recipe = recipe or Recipe.from_dict(record["recipe"])
                base = base or record.get("base")
                where = f"{study.chain(seed) / layout.RECIPE_FILE}"
                break
    if recipe is None or not base:
        raise ValueError(
            f"{study.path}: no chain of recipe {design.recipe_hash} is here to read its recipe from: give [design] "
            "recipe_file and base_model"
        )
    digest = recipe.recipe_digest(base_identity(base))
    if digest != design.recipe_hash:
        raise ValueError(
            f"{study.path}: the recipe of {where} with base {base} hashes to {digest}, not the design's recipe_hash "
            f"{design.recipe_hash}: give the recipe the design registered"
        )
    return recipe, base


def train_seed(study: SeedStudy, seed: int, log=None, *, up_to: str | None = None) -> None:
    """Build (or finish) ``seed``'s chain with the design's recipe (:func:`headstats.jobs.finetune.finetune`),
    its stages up to ``up_to`` (default: the design's last stage end)."""
    from headstats.jobs.finetune import finetune
    from headstats.jobs.finetune.layout import chain_dir

    recipe, base = chain_recipe(study)
    recipe = Recipe.from_kwargs({"seed": seed}, base=recipe)
    if chain_dir(base, study.chains, recipe) != study.chain(seed):
        raise ValueError(f"{study.path}: seed {seed}'s chain would be built in {chain_dir(base, study.chains, recipe)}")
    last = STAGES.index(up_to) if up_to else max(STAGES.index(s) for s, _ in study.stage_ends)
    stages = STAGES[: last + 1]
    started = time.monotonic()
    finetune(base=base, seed=seed, out=str(study.chains), stages=tuple(stages), recipe=recipe, log=log)
    logger.info("[seed-%d] chain trained (%.0f min)", seed, (time.monotonic() - started) / 60)


def copy_chain_records(study: SeedStudy, seed: int, results: Path) -> None:
    """The chain's ``metrics.json`` and ``recipe.json`` copied to ``RESULTS/seed-N/_chain/`` (the
    learning evidence the report reads when no chain is present)."""
    folder = study.seed_results(seed, results) / store.CHAIN_RECORDS
    for name in (layout.METRICS_FILE, layout.RECIPE_FILE):
        record = layout.read_json(study.chain(seed) / name)
        if record:
            folder.mkdir(parents=True, exist_ok=True)
            store.write_json_atomic(record, folder / name)


def collect_checkpoint(
    study: SeedStudy, checkpoint: Checkpoint, dataset: str, results: Path, model, tokenizer, *, progress: bool = True
) -> None:
    """Score ``dataset`` with ``checkpoint`` (loaded: ``model``, ``tokenizer``) into ``RESULTS/seed-N/``,
    resuming: the collection adds only the texts its table lacks."""
    from headstats.jobs.collect import collect_scores

    out = store.ensure_writable(study.seed_results(checkpoint.seed, results))
    collect = CollectSpec.from_kwargs({"progress": progress}, base=study.collect)
    result = collect_scores(model, tokenizer, dataset, out, spec=collect)
    logger.info(
        "[seed-%d] %s %s: %d texts (%d new)", checkpoint.seed, checkpoint.label, dataset, result.n_samples, result.n_new
    )


def texts_left(
    study: SeedStudy, checkpoint: Checkpoint, dataset: str, results: Path, samples: dict | None = None
) -> tuple[int, int]:
    """(texts left, texts) of ``checkpoint``'s collection of ``dataset``: the collection planner's
    sample (:func:`~headstats.jobs.collect.collection_sample`, kept in ``samples`` per dataset when
    given) counted against its partition; no model loaded."""
    from headstats.jobs.collect_plan import collection_sample
    from headstats.jobs.collect_plan import texts_left as collection_left

    samples = {} if samples is None else samples
    if dataset not in samples:
        samples[dataset] = collection_sample(dataset, study.collect)
    return collection_left(study.seed_results(checkpoint.seed, results), str(checkpoint.path), samples[dataset])


# --- the decision's inputs --------------------------------------------------------------------------


def _recollect(study: SeedStudy, seed: int) -> str:
    return f"move it away and score it again (headstats run {study.path} --stages collect --seeds {seed})"


def _table_checkpoint(study: SeedStudy, seed: int, partition: store.Partition) -> tuple[str, int] | None:
    """The (stage, step) a table under ``RESULTS/seed-N/`` records, checked against the design before
    it is read: a table of another seed, recipe or collection settings is refused, naming it; one of a
    stage end the design does not list is left out (None)."""
    info = (partition.provenance or {}).get("checkpoint") or {}
    if not info.get("stage") or info.get("seed") is None:
        raise ValueError(f"{partition.path}: its provenance records no checkpoint stage and seed; not a chain's table")
    if int(info["seed"]) != seed:
        raise ValueError(f"{partition.path} records seed {info['seed']}, not {seed}: {_recollect(study, seed)}")
    recipe = info.get("recipe_hash")
    if recipe is not None and recipe != study.design.recipe_hash:
        raise ValueError(
            f"{partition.path} records recipe {recipe}, the design's is {study.design.recipe_hash}: it is another "
            f"study's table; {_recollect(study, seed)}"
        )
    from headstats.jobs.collect_plan import recorded_changes

    changed = recorded_changes(partition.provenance or {}, study.collect, f"in {study.path.name}")
    if changed:
        raise ValueError(
            f"{partition.path} was scored with other settings ({'; '.join(changed)}): {_recollect(study, seed)}"
        )
    stage, step = str(info["stage"]), int(info.get("step") or 0)
    if stage != BASE and info.get("step") is not None and (stage, step) not in study.stage_ends:
        logger.info("%s: %s@%d is not a stage end of the design; left out", partition.path, stage, step)
        return None
    return stage, step


def _check_same_texts(scores: pd.DataFrame, tables: dict[tuple[str, str], tuple[int, Path]], study: SeedStudy) -> None:
    """Every checkpoint holds the texts of a dataset that most of them hold (the distances pair them):
    a table scored on another sample is refused, naming it."""
    for dataset, rows in scores.groupby("dataset", observed=True):
        held = rows.groupby("model", observed=True)["sample_id"].agg(frozenset)
        common = held.value_counts().index[0]
        for model, ids in held.items():
            if common - ids:  # more texts than the others is a larger limit's table: it holds theirs too
                seed, path = tables[(str(model), str(dataset))]
                raise ValueError(
                    f"{path} holds other texts of {dataset} than the study's other tables ({len(common - ids)} of "
                    f"their {len(common)} are not in it): it was scored on another sample; {_recollect(study, seed)}"
                )


def seed_tables(study: SeedStudy, results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(score rows of the study's seeds, one row per checkpoint: ``model``, ``stage``, ``seed``), read
    from ``RESULTS/seed-N/`` alone; each table's stage and seed come from its provenance (the
    checkpoint's record), checked against the design (:func:`_table_checkpoint`), and every
    checkpoint must hold the same texts. A checkpoint enters once every dataset's table holds the
    design's texts (one still collecting is named and left out). Empty frames before any table."""
    columns = ["model", "dataset", "sample_id", "layer", "head", *(study.collect.scores or ()), "subject"]
    frames, rows, tables = [], [], {}
    for seed in study.design.seeds:
        folder = study.seed_results(seed, results)
        found = store.find_partitions(folder, "scores")[0] if folder.is_dir() else []
        kept = []
        for p in found:
            checkpoint = _table_checkpoint(study, seed, p)
            if checkpoint is not None:
                rows.append((p.model, checkpoint[0], seed))
                tables[(p.model, p.name)] = (seed, p.path)
                kept.append(p.model)
        if kept:
            table = store.read_scores(folder, columns=columns)
            # no subject column outside MMLU
            frames.append(table.loc[table["model"].astype(str).isin(kept)].reindex(columns=columns))
    checkpoints = pd.DataFrame(sorted(set(rows)), columns=["model", "stage", "seed"])
    scores = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    texts = scores.groupby(["model", "dataset"], observed=True)["sample_id"].nunique()
    whole = texts[texts >= study.design.texts].reset_index().groupby("model")["dataset"].nunique()
    complete = set(whole[whole >= len(study.datasets)].index.astype(str))
    partial = sorted(set(checkpoints["model"]) - complete)
    if partial:  # a table still collecting would cut every distance to the texts it holds
        logger.info("left out until every dataset holds its %d texts: %s", study.design.texts, ", ".join(partial))
    checkpoints = checkpoints[checkpoints["model"].isin(complete)].reset_index(drop=True)
    scores = scores[scores["model"].astype(str).isin(complete)]
    _check_same_texts(scores, tables, study)
    return scores, checkpoints


def seed_cells(
    study: SeedStudy, results: Path, kept: pd.DataFrame | None = None, tables: tuple | None = None
) -> dict[tuple[str, str, str], seed_margin.Cell]:
    """Per (stage, dataset, score) cell: the base's and each seed's stage end scores on the texts all
    of them hold (:class:`headstats.stats.seed_margin.Cell`; MMLU's subjects its clusters), from the
    seeds ``kept`` keeps at the stage (:func:`headstats.stats.seeds.seeds_kept`; every seed without
    it). ``tables``: :func:`seed_tables`' output when the caller has read it. Empty before the base
    is scored."""
    from headstats.stats import seed_margin  # scipy: for the decision, not for loading or planning a study

    scores, checkpoints = tables if tables is not None else seed_tables(study, results)
    bases = checkpoints.loc[checkpoints["stage"] == BASE, "model"].astype(str).tolist()
    if not bases:
        return {}
    ok = None if kept is None else set(kept.loc[kept["kept"].astype(bool), ["seed", "stage"]].itertuples(index=False))
    cells = {}
    for dataset, table in scores.groupby("dataset", observed=True):
        for stage, _ in study.stage_ends:
            ends = checkpoints[checkpoints["stage"] == stage].sort_values("seed")
            pairs = zip(ends["model"], ends["seed"], strict=True)
            chosen = [str(m) for m, seed in pairs if ok is None or (int(seed), stage) in ok]
            if not chosen:
                continue
            for score in study.collect.scores or ():
                cells[(stage, str(dataset), score)] = seed_margin.cell_arrays(table, bases[0], chosen, score)
    return cells


def model_provenance(study: SeedStudy) -> str:
    """The base model every chain starts from, as a report names it: an embedded model with where its
    weights come from, anything else by its portable name."""
    from headstats.io.assets import EMBEDDED_MODELS, portable_name

    name = study.design.base_model or study.base_slug
    embedded = EMBEDDED_MODELS.get(name)
    return f"{name}, {embedded.description}" if embedded else portable_name(name)


def chain_metrics(study: SeedStudy, results: Path) -> dict[int, dict]:
    """Each seed's ``metrics.json`` as the collection copied it to ``RESULTS/seed-N/_chain/`` (the
    chain's learning when its checkpoints were scored); a seed with none is absent. The chain itself
    is not read even where it is here, so a report built beside the chains is the one a clean clone
    of the results rebuilds."""
    metrics = {}
    for seed in study.design.seeds:
        fix = (
            "copy the chain's metrics.json there again (the collect stage does, with the chain here: headstats run "
            f"{study.path} --stages collect --seeds {seed}), or restore it from version control"
        )
        record = layout.read_metrics(study.seed_results(seed, results) / store.CHAIN_RECORDS / layout.METRICS_FILE, fix)
        if record:
            metrics[seed] = record
    return metrics


MACHINE_FILE = "machine.txt"  # RESULTS/seed-N/_chain/: the training driver's record ("cpu: ..." first)


def chain_machines(study: SeedStudy, results: Path, metrics: Mapping[int, dict] | None = None) -> dict[int, str]:
    """Per seed, the CPU (or GPU) its chain trained on: the driver's ``RESULTS/seed-N/_chain/machine.txt``
    (analyses/finetuning_confirm_train.sh writes it), else the machines the chain's ``metrics.json``
    recorded per stage (``metrics``: :func:`chain_metrics`), joined with " + " when they differ. A
    seed with neither is absent."""
    metrics = chain_metrics(study, results) if metrics is None else metrics
    machines = {}
    for seed in study.design.seeds:
        record = study.seed_results(seed, results) / store.CHAIN_RECORDS / MACHINE_FILE
        lines = record.read_text().splitlines() if record.is_file() else []
        named = [line.split(":", 1)[1].strip() for line in lines[:1] if line.startswith("cpu:")]
        for stage in (metrics.get(seed) or {}).values() if not named else ():
            machine = (stage.get("run") or {}).get("machine") or {}
            name = machine.get("gpu") or machine.get("cpu")
            if name and name not in named:
                named.append(name)
        if named:
            machines[seed] = " + ".join(named)
    return machines


__all__ = [
    "Checkpoint",
    "SeedStudy",
    "amendments",
    "chain_machines",
    "chain_metrics",
    "chain_recipe",
    "collect_checkpoint",
    "copy_chain_records",
    "load_seed_study",
    "register",
    "registered",
    "registration",
    "seconds_per_step",
    "seconds_per_text",
    "seed_tables",
    "steps_left",
    "texts_left",
    "train_seed",
]
