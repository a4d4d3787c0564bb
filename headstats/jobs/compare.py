"""``headstats compare``: a reference model against other models on the same texts, answer first.

One comparison is three steps, each done by the module that owns it:

1. **collect** what is missing (:func:`headstats.jobs.collect.collect_scores`, resumable): every model
   on every dataset into ``RESULTS/compared/``, and the reference once more under another prompt format
   into ``RESULTS/format-change/`` (the margin's yardstick, on the same texts);
2. **compare** (:mod:`headstats.stats.compare`): per (other model, dataset, score) the distance, the
   movement test, the equivalence verdict; per head when the architectures match;
3. **report** (:func:`headstats.report.compare.write_comparison`): an answer-first report in ``OUT``
   (:func:`headstats.pipeline.compare` runs the three).

A study file with a ``[compare]`` table (the options of :class:`~headstats.specs.CompareSpec`, with
``models = [reference, other, ...]``) runs the same steps under ``headstats run FILE``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from headstats.io import store
from headstats.jobs.compare_identity import (
    check_given_once,
    check_identities,
    check_same_weights,
    check_table,
    dataset_partition,
    split_dtype,
    stored_slug,
)
from headstats.jobs.finetune.records import CHAIN_SLUG, chain_learning, checkpoint_step, record_chains
from headstats.options import narrow
from headstats.specs import AnalysisHeader, CollectSpec, CompareSpec, LoadOptions

log = logging.getLogger("headstats")

COMPARED = "compared"  # RESULTS/compared/: every model under the compared prompt format
FORMAT_CHANGE = "format-change"  # RESULTS/format-change/: the reference under the other format


@dataclass
class Comparison:
    """A finished comparison: what the report renders (every table is a statistic's output)."""

    spec: CompareSpec
    reference: str  # the reference's model slug (the ``model`` column of the score tables)
    others: list[str]  # the other models' slugs, in the order given
    names: dict[str, str]  # slug -> the name the user gave
    datasets: list[str]
    format_change: str  # the yardstick's other prompt format
    distances: pd.DataFrame  # compare_distributions
    yardstick: pd.DataFrame  # the reference under the format change (w1_iqr per dataset x score)
    left_out: dict[str, dict[str, str]]  # other slug -> score -> reason
    head_summary: pd.DataFrame  # compare_heads' per (other, dataset, score) rows; empty across architectures
    heads: pd.DataFrame  # compare_heads' cells: every (other, dataset, score, layer, head) shift and verdict
    same_architecture: dict[str, bool]
    timings: dict[str, float] = field(default_factory=dict)
    # the models' facts (series_facts): slug, name, role, replicate_of, params, stage, step, label, position
    facts: pd.DataFrame = field(default_factory=pd.DataFrame)
    series: list[str] = field(default_factory=list)  # the series in its order (slugs); empty without --series
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # step_distances of the series
    replicates: pd.DataFrame = field(default_factory=pd.DataFrame)  # replicate_distances (every pair of seeds)
    seeds: pd.DataFrame = field(default_factory=pd.DataFrame)  # seed_yardstick per group, dataset and score
    learning: pd.DataFrame = field(default_factory=pd.DataFrame)  # learning_verdicts of each fine-tuning chain
    # texts_constant: the (model, dataset, score) whose score is the same on every text
    constant_texts: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def head_verdicts(self) -> pd.DataFrame:
        """One verdict per head of each compared model of the same architecture, over its head-local
        cells (:func:`~headstats.stats.heads.head_verdicts`); empty across architectures."""
        from headstats.stats.heads import head_verdicts

        return head_verdicts(self.heads) if not self.heads.empty else pd.DataFrame()


def load_comparison(path: str | os.PathLike) -> tuple[CompareSpec, AnalysisHeader, Path]:
    """A comparison study file's options (``[compare]``, checked before any model loads), its header
    and the report folder (``report =``, default reports/NAME; tables in ``results =``, default
    results/NAME)."""
    from headstats.jobs.analysis import read_analysis_file, section_table

    path = Path(path)
    raw, header = read_analysis_file(
        path, ("compare",), what="comparison file", example="analyses/compare_embedded.toml"
    )
    spec = CompareSpec.from_toml(section_table(raw, "compare", path), f"{path}: [compare]")
    if not spec.models:
        raise ValueError(f"{path}: [compare] needs models = [reference, other, ...]")
    _, results, report = header.folders(path)
    return replace(spec, scores_dir=spec.scores_dir or str(results)), header, report


def results_root(spec: CompareSpec) -> Path:
    """Where a comparison's score tables go: ``scores_dir``, else ``OUT/results``."""
    return Path(spec.scores_dir) if spec.scores_dir else Path(spec.out or ".") / "results"


def _partition_value(partition: Path) -> str:
    return partition.name.split("=", 1)[1]


def auto_format_change(spec: CompareSpec, tokenizer) -> str:
    """The yardstick's other prompt format (``format_change``, or for ``auto``): the chat template when
    the reference has one (plain when the comparison already uses it), else no special tokens, or a
    BOS first when the compared format already puts none there."""
    from headstats.io.tasks import PromptRenderer, resolve_format
    from headstats.io.tasks.formats import starts_with_bos

    if spec.format_change != "auto":
        return spec.format_change
    if getattr(tokenizer, "chat_template", None):
        return "plain" if spec.prompt_format == "chat" else "chat"
    fmt = resolve_format(spec.prompt_format, tokenizer)
    has_bos = starts_with_bos(PromptRenderer(fmt, tokenizer).encode("The first token."), tokenizer)
    return "plain" if has_bos or tokenizer.bos_token_id is None else "bos"


def replicate_groups(spec: CompareSpec) -> dict[str, list[str]]:
    """``--replicates`` by the model they replicate (a name of ``models``): REPLICATE is one of the
    reference, MODEL=REPLICATE one of MODEL. Each group lists the replicated model first."""
    groups: dict[str, list[str]] = {}
    for entry in spec.replicates:
        model, sep, replicate = entry.partition("=")
        if not sep:
            model, replicate = spec.models[0], entry
        if model not in spec.models:
            raise ValueError(
                f"replicate {entry!r} names {model!r}, which is not a compared model: write REPLICATE for one "
                f"of the reference or MODEL=REPLICATE with MODEL one of {', '.join(spec.models)}"
            )
        groups.setdefault(model, [model]).append(replicate)
    return groups


def given_models(spec: CompareSpec) -> list[str]:
    """Every model as the user gave it, in order: the compared ones, then each replicate (a name given
    twice stays twice, so that it can be refused)."""
    return [*spec.models, *(r for members in replicate_groups(spec).values() for r in members[1:])]


def all_models(spec: CompareSpec) -> list[str]:
    """Every model a comparison scores: the compared ones, then the replicates, each once."""
    extra = [r for members in replicate_groups(spec).values() for r in members[1:]]
    return list(dict.fromkeys([*spec.models, *extra]))


@dataclass(frozen=True)
class Unit:
    """One collection a comparison runs: a model on a dataset under a prompt format, into ``root``."""

    model: str
    dataset: str
    prompt_format: str
    root: Path


def plan_units(spec: CompareSpec) -> list[Unit]:
    """The collections of a comparison, in the order they run, a model's together: every model (the
    replicates included) on every dataset under the compared format, the reference first and then
    under the format change as well (``auto`` is resolved when the reference loads; listed here as
    ``auto``)."""
    root = results_root(spec)
    units = []
    for i, name in enumerate(all_models(spec)):
        units += [Unit(name, d, spec.prompt_format, root / COMPARED) for d in spec.data]
        if i == 0:
            units += [Unit(name, d, spec.format_change, root / FORMAT_CHANGE) for d in spec.data]
    return units


def check_models(spec: CompareSpec) -> list[Path]:
    """Before any collection: the results folder writable, every model found, none of them another
    one itself (:func:`~headstats.jobs.compare_identity.check_identities`), every dataset readable and no
    two models sharing a table name. Returns the models' folders."""
    from headstats.io.identity import model_slug
    from headstats.io.model_paths import resolve_model_path
    from headstats.io.tasks import collection_source

    names = all_models(spec)
    paths = [resolve_model_path(split_dtype(name)[0]) for name in names]  # unknown names fail first
    # every model as given, a replicate that names a compared model again included
    check_identities(spec, given_models(spec), [paths[names.index(name)] for name in given_models(spec)])
    store.ensure_writable(results_root(spec))
    for name in spec.data:
        collection_source(name, data_dir=spec.data_dir, text_column=spec.text_column)
    slugs = [model_slug(name) for name in names]
    duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
    if duplicates:
        raise ValueError(f"two of the models share the table name {duplicates[0]!r}: give folders with different names")
    return paths


def collect_unit(spec: CompareSpec, unit: Unit, model, tokenizer) -> None:
    """One collection of :func:`plan_units`, resuming what is there, with ``unit.model`` loaded; the
    format change's ``auto`` resolved from its tokenizer."""
    from headstats.jobs.collect import collect_scores

    if split_dtype(unit.model)[1]:  # its own tables: the name (and so the slug) says the dtype
        model.headstats_name = unit.model
    collect = narrow(spec, CollectSpec)
    if unit.root.name == FORMAT_CHANGE:
        collect = replace(collect, prompt_format=auto_format_change(spec, tokenizer))
    done = collect_scores(model, tokenizer, unit.dataset, unit.root, spec=collect)
    log.info(
        "%s on %s as %s: %d texts (%d new)", unit.model, unit.dataset, collect.prompt_format, done.n_samples, done.n_new
    )


def collect_all(spec: CompareSpec) -> None:
    """Collect every model (replicates included) on every dataset, resuming what is there, and the
    reference under the format change (:func:`plan_units`, each model loaded once); record the
    fine-tuning chains the models belong to."""
    import torch

    from headstats.io.models import load_model

    paths = check_models(spec)
    load = narrow(spec, LoadOptions)
    loaded = None
    for unit in plan_units(spec):
        if loaded is None or loaded[0] != unit.model:
            loaded = None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            base, dtype = split_dtype(unit.model)
            loaded = (unit.model, *load_model(base, **{**load.kwargs(), **({"dtype": dtype} if dtype else {})}))
        collect_unit(spec, unit, loaded[1], loaded[2])
    record_chains(list(map(str, paths)), results_root(spec))


@dataclass(frozen=True)
class Stored:
    """What the score tables of a comparison hold, found without loading a model: per user name its
    table name (slug) and provenance, the dataset partitions, the format change."""

    slugs: dict[str, str]  # user name -> model slug
    provenance: dict[str, dict]  # user name -> the provenance of its first dataset's table
    datasets: list[str]  # the dataset partitions, in the order of spec.data
    format_change: str


def stored_tables(spec: CompareSpec, collect_with: str) -> Stored:
    """The comparison's score tables under its results folder, checked before any statistic: each
    missing one is refused in one line that names it and ``collect_with`` (the command that collects
    it). Reads the tables' folders and records only; no model is loaded."""
    root = results_root(spec)
    tables = root / COMPARED

    def missing(what: str) -> ValueError:
        return ValueError(f"{what} is not collected: run {collect_with} first")

    check_given_once(spec, given_models(spec))
    if not tables.is_dir():
        raise missing(f"no score table under {tables}")
    slugs, provenance, datasets = {}, {}, []
    for i, name in enumerate(all_models(spec)):
        slug = stored_slug(name, tables)
        for dataset in spec.data:
            partition = dataset_partition(tables / f"model={slug}", dataset)
            if partition is None or not store.has_data(partition):
                raise missing(f"the score table of {name} on {dataset} ({tables}/model={slug})")
            record = store.read_provenance(partition) or {}
            fmt = (record.get("settings") or {}).get("prompt_format", spec.prompt_format)
            if fmt != spec.prompt_format:
                raise ValueError(
                    f"{partition} holds prompt format {fmt!r}, the comparison asks for {spec.prompt_format!r}: "
                    "give another results folder, or the format the tables hold"
                )
            check_table(spec, name, partition, record)
            provenance.setdefault(name, record)
            if i == 0:
                datasets.append(_partition_value(partition))
        slugs[name] = slug
    check_same_weights(spec, provenance)
    reference = slugs[spec.models[0]]
    changes = set()
    for dataset in datasets:
        partition = root / FORMAT_CHANGE / f"model={reference}" / f"dataset={dataset}"
        if not store.has_data(partition):
            raise missing(f"the format-change table of {spec.models[0]} on {dataset} ({partition})")
        record = store.read_provenance(partition) or {}
        check_table(spec, spec.models[0], partition, record, what="format-change")
        changes.add(str((record.get("settings") or {}).get("prompt_format", spec.format_change)))
    (change,) = changes if len(changes) == 1 else (None,)
    if change is None or spec.format_change not in ("auto", change):
        raise ValueError(
            f"{root / FORMAT_CHANGE} holds the format change {', '.join(sorted(changes))}, the comparison asks "
            f"for {spec.format_change!r}: give another results folder, or format_change = the one it holds"
        )
    return Stored(slugs, provenance, datasets, change)


def series_facts(spec: CompareSpec, stored: Stored) -> pd.DataFrame:
    """One row per model, from what its tables record: ``slug``, ``name``, ``role`` (reference, compared,
    replicate), ``replicate_of``, ``params``, ``stage``, ``step``, ``chain``, ``seed`` and ``label``
    (``SFT 40`` for a fine-tuning checkpoint, ``SFT 40 (seed 1)`` for a replicate's, else the slug);
    :func:`order_series` adds ``order`` and ``position`` to a series."""
    from headstats.stats.learning import STAGES

    of = {r: model for model, members in replicate_groups(spec).items() for r in members[1:]}
    rows = []
    for name, slug in stored.slugs.items():
        role = "reference" if name == spec.models[0] else "compared" if name in spec.models else "replicate"
        record = stored.provenance.get(name, {})
        info = record.get("checkpoint") or {}
        stage, step = checkpoint_step(name, slug, record)
        match = CHAIN_SLUG.match(slug)
        chain = info.get("chain") or (match["chain"] if match else None)
        seed = info.get("seed")
        label = slug if stage is None else "base" if stage == "base" else f"{stage.upper()} {step}"
        if role == "replicate" and stage is not None and seed is not None:
            label += f" (seed {seed})"
        rows.append(
            {
                "slug": slug, "name": name, "role": role, "replicate_of": stored.slugs.get(of.get(name, ""), ""),
                "params": record.get("n_parameters"), "stage": stage, "step": step, "chain": chain, "seed": seed,
                "label": label,
            }
        )  # fmt: skip
    frame = pd.DataFrame(rows)
    order = {None: -1, "base": -1, **{stage: i for i, stage in enumerate(STAGES)}}
    frame["stage_order"] = [order.get(s, len(STAGES)) for s in frame["stage"]]
    return frame


def order_series(spec: CompareSpec, facts: pd.DataFrame, outside: set[str] = frozenset()) -> pd.DataFrame:
    """The compared models (the reference included) in the series' order, with ``order`` and
    ``position``; refused in one line when the order needs a fact a model lacks. ``outside``: slugs of
    models of another architecture; by step, those without a step stand beside the series (another
    family, a yardstick), not in it."""
    members = facts[facts["role"] != "replicate"].reset_index(drop=True)
    if spec.series == "step":
        members = members[~(members["slug"].isin(outside) & members["step"].isna())]
    if spec.series == "params":
        members = members.sort_values("params", kind="stable").assign(position=lambda f: f["params"].astype(float))
    elif spec.series == "step":
        missing = members.loc[members["step"].isna() & members["stage"].ne("base"), "name"]
        if len(missing):
            raise ValueError(
                f"--series step needs a checkpoint step for every model; {missing.iloc[0]!r} has none (a folder "
                "named step-N / checkpoint-N, a trainer_state.json or a headstats finetune checkpoint): "
                "give --series given to keep the order of the command line"
            )
        members = members.assign(step=members["step"].fillna(0).astype(int))
        members = members.sort_values(["stage_order", "step"], kind="stable")
        # across a chain's stages the step counts on: each stage starts where the one before ended
        ends = members.groupby("stage_order", sort=True)["step"].max()
        before = {o: int(ends[ends.index < o].clip(lower=0).sum()) for o in ends.index}
        members = members.assign(position=members["step"] + members["stage_order"].map(before))
    else:
        members = members.assign(position=range(len(members)))
    return members.assign(order=range(len(members))).reset_index(drop=True)


def _same_architecture(scores: pd.DataFrame, a: str, b: str) -> bool:
    heads = [
        set(map(tuple, scores.loc[scores["model"] == m, ["layer", "head"]].drop_duplicates().to_numpy()))
        for m in (a, b)
    ]
    return heads[0] == heads[1]


def check_two(spec: CompareSpec) -> None:
    """Refuse a comparison of fewer than two models."""
    if len(spec.models) < 2:
        raise ValueError("a comparison needs a reference and at least one other model: headstats compare REF OTHER")


def run_comparison(spec: CompareSpec) -> Comparison:
    """Collect what is missing (:func:`collect_all`), then compute every statistic of the comparison
    from its tables (:func:`read_comparison`; no report)."""
    check_two(spec)
    started = time.perf_counter()
    collect_all(spec)
    result = read_comparison(spec)
    result.timings["collect_s"] = time.perf_counter() - started - result.timings["statistics_s"]
    return result


COLLECT_WITH = "headstats compare with the same models and --data"


def read_comparison(spec: CompareSpec, collect_with: str = COLLECT_WITH) -> Comparison:
    """Every statistic of the comparison, from its score tables and their records alone (no model is
    loaded, nothing under the results folder is written); a table that is not there is refused in one
    line naming it and ``collect_with``."""
    from headstats.stats import compare as stats
    from headstats.stats.compare import compare_distributions
    from headstats.stats.constant import texts_constant

    check_two(spec)
    started = time.perf_counter()
    stored = stored_tables(spec, collect_with)
    slugs, datasets, change = stored.slugs, stored.datasets, stored.format_change
    root = results_root(spec)
    reference, others = slugs[spec.models[0]], [slugs[m] for m in spec.models[1:]]
    scores = store.read_scores(root / COMPARED)
    scores = scores[scores["dataset"].astype(str).isin(datasets) & scores["model"].isin(list(slugs.values()))]
    scores = _common_texts(scores)
    yardstick = _format_yardstick(spec, root, scores, reference, f"{reference} ({change})", datasets)
    margins = spec.margin if spec.margin is not None else yardstick.margins
    how = {"alpha": spec.alpha, "n_boot": spec.n_resamples, "seed": spec.seed}
    distances, left = compare_distributions(scores, reference, others, datasets, spec.scores, margins=margins, **how)
    table = series_facts(spec, stored)
    unit = stats.reference_unit(distances)
    same = {other: _same_architecture(scores, reference, other) for other in others}
    series, steps = [], pd.DataFrame()
    if spec.series:
        ordered = order_series(spec, table, {o for o in others if not same[o]})
        table = table.merge(ordered[["slug", "order", "position"]], on="slug", how="left")
        series = list(ordered["slug"])
        steps = stats.step_distances(scores, series, datasets, unit, margins, **how)
    groups = {slugs[m]: [slugs[r] for r in members] for m, members in replicate_groups(spec).items()}
    replicates = stats.replicate_distances(scores, groups, datasets, unit, **how)
    seeds = stats.seed_yardstick(replicates)
    if not seeds.empty:
        distances = stats.beside_seeds(distances, seeds, reference)
    alike = [other for other in others if same[other]]
    head_summary, heads = _head_comparisons(spec, scores, reference, alike, datasets, distances, yardstick)
    finished = time.perf_counter()
    return Comparison(
        spec=spec,
        reference=reference,
        others=others,
        names={slug: name for name, slug in slugs.items()},
        datasets=datasets,
        format_change=change,
        distances=distances,
        yardstick=yardstick.distances,
        left_out=left,
        head_summary=head_summary,
        heads=heads,
        same_architecture=same,
        timings={"statistics_s": finished - started},
        facts=table,
        series=series,
        steps=steps,
        replicates=replicates,
        seeds=seeds,
        learning=chain_learning([c for c in table["chain"] if isinstance(c, str)], root, seed=spec.seed),
        constant_texts=texts_constant(
            pd.concat([scores, yardstick.rows[yardstick.rows["model"] == yardstick.model]]),
            [reference, yardstick.model, *others],
            datasets,
            list(distances["score"].unique()),
        ),
    )


@dataclass(frozen=True)
class _Yardstick:
    """The margin's yardstick: the reference against itself under the other prompt format (scored as
    ``model``) on the same texts."""

    distances: pd.DataFrame  # its W1 per dataset and score (empty when the reference has no score left)
    rows: pd.DataFrame  # the score rows of both formats: the reference's, then ``model``'s
    model: str
    margins: pd.DataFrame | None  # the margins it gives, where the spec states none


def _format_yardstick(
    spec: CompareSpec, root: Path, scores: pd.DataFrame, reference: str, yard_model: str, datasets: list[str]
) -> _Yardstick:
    """The reference's distance to itself under the other prompt format (:class:`_Yardstick`), from
    the format-change tables under ``root``."""
    from headstats.stats.compare import left_out_scores, yardstick_distances

    ref_left = left_out_scores(scores, [reference], spec.scores)
    ref_scores = [s for s in _present(scores, reference) if s not in ref_left]
    if not ref_scores:
        return _Yardstick(pd.DataFrame(), scores.iloc[:0], yard_model, None)
    changed = store.read_scores(root / FORMAT_CHANGE)
    changed = changed[(changed["model"] == reference) & changed["dataset"].astype(str).isin(datasets)]
    both = pd.concat([scores[scores["model"] == reference], _common_texts(changed).assign(model=yard_model)])
    both["model"] = both["model"].astype(str)
    yard = yardstick_distances(
        both, reference, yard_model, datasets, ref_scores, alpha=spec.alpha, n_boot=spec.n_resamples, seed=spec.seed
    )
    return _Yardstick(yard, both, yard_model, yard.assign(margin=yard["w1_iqr"]) if spec.margin is None else None)


def _head_comparisons(
    spec: CompareSpec,
    scores: pd.DataFrame,
    reference: str,
    alike: list[str],
    datasets: list[str],
    distances: pd.DataFrame,
    yardstick: _Yardstick,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Which heads moved, for each model of the reference's architecture (``alike``): the summary and
    the per-head rows (:func:`headstats.stats.heads.compare_heads`), empty when no model is alike.
    Without a margin in the spec, each head's margin comes from its own shift under the format
    change (the ``yardstick``'s rows and margins)."""
    from headstats.stats import heads as head_stats

    head_margins = spec.margin
    margins = yardstick.margins
    if spec.margin is None and margins is not None and alike:
        sids = list(margins["score"].unique())
        shifts = head_stats.format_change_shifts(yardstick.rows, reference, yardstick.model, datasets, sids)
        head_margins = head_stats.head_margins(shifts, margins)
    summaries, heads = [], []
    for other in alike:
        tested = list(distances.loc[distances["model_b"] == other, "score"].drop_duplicates())
        summary, per_head = head_stats.compare_heads(
            scores, reference, other, datasets, tested, head_margins, rate=spec.rate, alpha=spec.alpha,
            n_perm=spec.head_permutations, n_boot=spec.n_resamples, seed=spec.seed,
        )  # fmt: skip
        summaries.append(summary)
        heads.append(per_head)
    if not summaries:
        return pd.DataFrame(), pd.DataFrame()
    return pd.concat(summaries, ignore_index=True), pd.concat(heads, ignore_index=True)


def _present(scores: pd.DataFrame, model: str) -> list[str]:
    from headstats.stats.tables import score_columns

    return score_columns(scores[scores["model"] == model])


def _common_texts(scores: pd.DataFrame) -> pd.DataFrame:
    """The rows of the texts (dataset, sample id) that every model of ``scores`` scored: a table
    collected earlier with a larger limit holds more texts, and a comparison pairs texts."""
    keys = pd.MultiIndex.from_arrays([scores["dataset"].astype(str).to_numpy(), scores["sample_id"].to_numpy()])
    common = None
    for model in pd.unique(scores["model"]):
        mine = set(keys[(scores["model"] == model).to_numpy()].unique())
        common = mine if common is None else common & mine
    return scores[keys.isin(list(common or []))]
