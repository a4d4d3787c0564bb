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

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from headstats.io import store
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
    head_summary: pd.DataFrame  # head_changes' per (other, dataset, score) rows; empty across architectures
    heads: pd.DataFrame  # every head's test row
    same_architecture: dict[str, bool]
    timings: dict[str, float] = field(default_factory=dict)
    # the models' facts (series_facts): slug, name, role, replicate_of, params, stage, step, label, position
    facts: pd.DataFrame = field(default_factory=pd.DataFrame)
    series: list[str] = field(default_factory=list)  # the series in its order (slugs); empty without --series
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # step_distances of the series
    replicates: pd.DataFrame = field(default_factory=pd.DataFrame)  # replicate_distances (every pair of seeds)
    seeds: pd.DataFrame = field(default_factory=pd.DataFrame)  # seed_yardstick per group, dataset and score
    learning: pd.DataFrame = field(default_factory=pd.DataFrame)  # learning_verdicts of each fine-tuning chain

    @property
    def moved_heads(self) -> pd.DataFrame:
        """The heads that moved on at least one head-local score (:func:`~headstats.stats.compare.moved_heads`)."""
        from headstats.stats.compare import moved_heads

        return moved_heads(self.heads)


def is_comparison(path: str | os.PathLike) -> bool:
    """Whether a study file is a comparison (it has a ``[compare]`` table)."""
    from headstats.jobs.analysis import top_level_keys

    return "compare" in top_level_keys(Path(path))


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


DTYPE_SUFFIXES = ("float32", "bfloat16", "float16")


def split_dtype(name: str) -> tuple[str, str | None]:
    """``"smollm2-135m@bfloat16"`` -> (``"smollm2-135m"``, ``"bfloat16"``): a model compared with itself
    in another dtype (the numerical-noise yardstick); a name without such a suffix is itself."""
    base, sep, suffix = name.rpartition("@")
    return (base, suffix) if sep and base and suffix in DTYPE_SUFFIXES else (name, None)


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
    """The collections of a comparison, in the order :func:`collect_all` runs them: every model (the
    replicates included) on every dataset under the compared format, and the reference under the
    format change (``auto`` is resolved when the reference loads; listed here as ``auto``)."""
    root = results_root(spec)
    units = [Unit(m, d, spec.prompt_format, root / COMPARED) for m in all_models(spec) for d in spec.data]
    return units + [Unit(spec.models[0], d, spec.format_change, root / FORMAT_CHANGE) for d in spec.data]


STEP_NAME = re.compile(r"(?:step|checkpoint|ckpt|iter)[-_]?0*(\d+)$", re.IGNORECASE)


def checkpoint_step(path: str) -> tuple[str | None, int | None]:
    """(stage, step) of a model folder: what ``headstats finetune`` wrote beside it, else the step of a
    folder named like ``step-00040`` / ``checkpoint-500``, else a ``trainer_state.json``'s
    ``global_step``; (None, None) for anything else (an embedded name, a Hub id)."""
    from headstats.io.models import checkpoint_info

    folder = Path(path)
    if not folder.is_dir():
        return None, None
    info = checkpoint_info(folder)
    if info.get("stage") is not None:
        return str(info["stage"]), int(info.get("step") or 0)
    match = STEP_NAME.search(folder.name)
    if match:
        return None, int(match.group(1))
    state = folder / "trainer_state.json"
    try:
        step = json.loads(state.read_text()).get("global_step") if state.is_file() else None
    except (OSError, ValueError):
        step = None
    return None, (int(step) if isinstance(step, int) else None)


def chain_root(path: str) -> Path | None:
    """The ``headstats finetune`` chain a model folder belongs to (its base or a checkpoint): the folder
    above it that holds the chain's ``metrics.json``; None for any other model."""
    from headstats.jobs.finetune.layout import METRICS_FILE

    folder = Path(path)
    for parent in (folder.parent, folder.parent.parent):
        if (parent / METRICS_FILE).is_file():
            return parent
    return None


def chain_learning(paths: list[str], seed: int = 0) -> pd.DataFrame:
    """:func:`~headstats.stats.learning.learning_verdicts` of every fine-tuning chain that ``paths``
    (model folders) belong to, with the chain's folder name and seed: did each stage learn on its
    held-out examples? Empty when no model is a chain's."""
    from headstats.jobs.finetune.layout import METRICS_FILE, RECIPE_FILE
    from headstats.stats.learning import learning_verdicts

    frames = []
    for root in dict.fromkeys(r for r in map(chain_root, paths) if r is not None):
        metrics = json.loads((root / METRICS_FILE).read_text())
        record = json.loads((root / RECIPE_FILE).read_text()) if (root / RECIPE_FILE).is_file() else {}
        chain_seed = (record.get("recipe") or {}).get("seed")
        frames.append(learning_verdicts(metrics, seed=seed).assign(chain=root.name, chain_seed=chain_seed))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def collect_all(spec: CompareSpec) -> tuple[dict[str, str], list[str], str, dict[str, dict]]:
    """Collect every model (replicates included) on every dataset, resuming what is there, and the
    reference under the format change; returns (user name -> model slug, dataset partition names, the
    format change, user name -> its facts: ``params``, ``stage``, ``step``)."""
    import torch

    from headstats.io.models import load_model, resolve_model_path
    from headstats.io.tasks import collection_source
    from headstats.jobs.collect import collect_scores

    root = results_root(spec)
    store.ensure_writable(root)
    names = all_models(spec)
    paths = {name: resolve_model_path(split_dtype(name)[0]) for name in names}  # unknown names fail first
    for name in spec.data:
        collection_source(name, data_dir=spec.data_dir, text_column=spec.text_column)
    collect, load = narrow(spec, CollectSpec), narrow(spec, LoadOptions)
    slugs: dict[str, str] = {}
    facts: dict[str, dict] = {}
    datasets: list[str] = []
    change = spec.format_change
    for i, name in enumerate(names):
        base, dtype = split_dtype(name)
        model, tokenizer = load_model(base, **{**load.kwargs(), **({"dtype": dtype} if dtype else {})})
        if dtype:  # its own tables: the name (and so the slug) says the dtype
            model.headstats_name = name
        stage, step = checkpoint_step(paths[name])
        facts[name] = {
            "params": sum(p.numel() for p in model.parameters()), "stage": stage, "step": step, "path": paths[name],
        }  # fmt: skip
        for dataset in spec.data:
            done = collect_scores(model, tokenizer, dataset, root / COMPARED, spec=collect)
            slugs[name] = _partition_value(done.partition.parent)
            if i == 0:
                datasets.append(_partition_value(done.partition))
            log.info("%s on %s: %d texts (%d new)", name, dataset, done.n_samples, done.n_new)
        if i == 0:
            change = auto_format_change(spec, tokenizer)
            other = replace(collect, prompt_format=change)
            for dataset in spec.data:
                done = collect_scores(model, tokenizer, dataset, root / FORMAT_CHANGE, spec=other)
                log.info("%s on %s as %s: %d texts (%d new)", name, dataset, change, done.n_samples, done.n_new)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    duplicates = {s for s in slugs.values() if list(slugs.values()).count(s) > 1}
    if duplicates:
        raise ValueError(
            f"two of the models share the table name {sorted(duplicates)[0]!r}: give folders with different names"
        )
    return slugs, datasets, change, facts


def series_facts(spec: CompareSpec, slugs: dict[str, str], facts: dict[str, dict]) -> pd.DataFrame:
    """One row per model: ``slug``, ``name``, ``role`` (reference, compared, replicate), ``replicate_of``,
    ``params``, ``stage``, ``step``, ``label`` (``SFT 40`` for a fine-tuning checkpoint, else the slug)
    and, with ``--series``, ``order`` and ``position`` (the x of the series figure: the order given,
    the parameter count, or the step, counted on across a chain's stages)."""
    from headstats.stats.learning import STAGES

    of = {r: model for model, members in replicate_groups(spec).items() for r in members[1:]}
    rows = []
    for name, slug in slugs.items():
        role = "reference" if name == spec.models[0] else "compared" if name in spec.models else "replicate"
        f = facts.get(name, {})
        stage, step = f.get("stage"), f.get("step")
        label = slug if stage is None else "base" if stage == "base" else f"{stage.upper()} {step}"
        rows.append(
            {
                "slug": slug, "name": name, "role": role, "replicate_of": slugs.get(of.get(name, ""), ""),
                "params": f.get("params"), "stage": stage, "step": step, "label": label,
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


def run_comparison(spec: CompareSpec) -> Comparison:
    """Collect what is missing, then compute every statistic of the comparison (no report)."""
    from headstats.stats import compare as stats
    from headstats.stats.compare import compare_distributions, head_changes, left_out_scores, yardstick_distances

    if len(spec.models) < 2:
        raise ValueError("a comparison needs a reference and at least one other model: headstats compare REF OTHER")
    started = time.perf_counter()
    slugs, datasets, change, facts = collect_all(spec)
    collected = time.perf_counter()
    root = results_root(spec)
    reference, others = slugs[spec.models[0]], [slugs[m] for m in spec.models[1:]]
    scores = store.read_scores(root / COMPARED)
    scores = scores[scores["dataset"].astype(str).isin(datasets) & scores["model"].isin(list(slugs.values()))]
    scores = _common_texts(scores)
    yard_model = f"{reference} ({change})"
    margins = None
    yard = pd.DataFrame()
    ref_left = left_out_scores(scores, [reference], spec.scores)
    ref_scores = [s for s in _present(scores, reference) if s not in ref_left]
    if ref_scores:
        changed = store.read_scores(root / FORMAT_CHANGE)
        changed = changed[(changed["model"] == reference) & changed["dataset"].astype(str).isin(datasets)]
        both = pd.concat([scores[scores["model"] == reference], _common_texts(changed).assign(model=yard_model)])
        both["model"] = both["model"].astype(str)
        yard = yardstick_distances(
            both, reference, yard_model, datasets, ref_scores, alpha=spec.alpha, n_boot=spec.n_resamples, seed=spec.seed
        )
        if spec.margin is None:
            margins = yard.assign(margin=yard["w1_iqr"])
    distances, left = compare_distributions(
        scores,
        reference,
        others,
        datasets,
        spec.scores,
        margins=spec.margin if spec.margin is not None else margins,
        alpha=spec.alpha,
        n_boot=spec.n_resamples,
        seed=spec.seed,
    )
    table = series_facts(spec, slugs, facts)
    unit = stats.reference_unit(distances)
    step_margins = spec.margin if spec.margin is not None else margins
    same = {other: _same_architecture(scores, reference, other) for other in others}
    series, steps = [], pd.DataFrame()
    if spec.series:
        ordered = order_series(spec, table, {o for o in others if not same[o]})
        table = table.merge(ordered[["slug", "order", "position"]], on="slug", how="left")
        series = list(ordered["slug"])
        steps = stats.step_distances(
            scores, series, datasets, unit, step_margins, alpha=spec.alpha, n_boot=spec.n_resamples, seed=spec.seed
        )
    groups = {slugs[m]: [slugs[r] for r in members] for m, members in replicate_groups(spec).items()}
    replicates = stats.replicate_distances(
        scores, groups, datasets, unit, alpha=spec.alpha, n_boot=spec.n_resamples, seed=spec.seed
    )
    seeds = stats.seed_yardstick(replicates)
    if not seeds.empty:
        distances = stats.beside_seeds(distances, seeds, reference)
    summaries, heads = [], []
    for other in others:
        if not same[other]:
            continue
        tested = list(distances.loc[distances["model_b"] == other, "score"].drop_duplicates())
        summary, per_head = head_changes(
            scores,
            reference,
            other,
            datasets,
            tested,
            rate=spec.rate,
            alpha=spec.alpha,
            n_perm=spec.head_permutations,
            n_boot=spec.n_resamples,
            seed=spec.seed,
        )
        summaries.append(summary)
        heads.append(per_head)
    finished = time.perf_counter()
    return Comparison(
        spec=spec,
        reference=reference,
        others=others,
        names={slug: name for name, slug in slugs.items()},
        datasets=datasets,
        format_change=change,
        distances=distances,
        yardstick=yard,
        left_out=left,
        head_summary=pd.concat(summaries, ignore_index=True) if summaries else pd.DataFrame(),
        heads=pd.concat(heads, ignore_index=True) if heads else pd.DataFrame(),
        same_architecture=same,
        timings={"collect_s": collected - started, "statistics_s": finished - collected},
        facts=table,
        series=series,
        steps=steps,
        replicates=replicates,
        seeds=seeds,
        learning=chain_learning([f["path"] for f in facts.values()], seed=spec.seed),
    )


def _present(scores: pd.DataFrame, model: str) -> list[str]:
    from headstats.stats.distances import score_columns

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
