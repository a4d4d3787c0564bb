"""``headstats prune``: choose a static head set by a score's mean over a calibration set, remove it
physically (:mod:`headstats.engine.prune`), optionally certify the share on a held-out task, and save
the smaller model.

Selection: every (layer, head) gets the mean of the score over the calibration sequences (scored on
the unpruned model, whole sequences); the ``share`` of all heads that look most inactive by the
score's direction (lowest ``ahon_ln``, highest ``awft``) go, ties in (layer, head) order. ``random``
draws U(0, 1) per (sequence, layer, head) with the seed, so its means rank heads in a seeded random
order.

Certification (``certify=TASK``): the shares of ``shares`` are tested in increasing order on the
task's questions (never seen by the selection, which reads only the calibration set); a share is
certified when the one-sided 95% upper bound of the paired accuracy drop (Tango's score bound,
:func:`headstats.stats.paired.drop_bound`) is at most ``max_drop``. Testing stops at the first share
that is not certified, so "the largest certified share" is a fixed-sequence test: the 5% level holds
for the whole sequence without a multiplicity adjustment.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.prune import CONFIG_KEY, count_parameters, geometry, layer_plans, prune_heads
from headstats.io.store import write_json_atomic
from headstats.options import narrow
from headstats.specs import DEFAULT_PRUNE_SHARES, FrontierSpec, LoadOptions, PruneSpec
from headstats.stats.paired import drop_bound

logger = logging.getLogger("headstats")

REMOTE_CODE_FILE = "modeling_headstats_pruned.py"
REMOTE_CLASS = "HeadstatsPrunedForCausalLM"
RECORD_FILE = "pruning.json"


@dataclass(frozen=True)
class Calibration:
    """Token sequences a selection reads, and what identifies them (dataset, sample, content hash)."""

    sequences: list[list[int]]
    identity: dict


def calibration_set(
    tokenizer: PreTrainedTokenizerBase,
    dataset: str = "wikipedia",
    *,
    limit: int = 64,
    max_length: int = 256,
    seed: int = 0,
    prompt_format: str = "tokenizer",
    model_name: str = "",
    data_dir: str | None = None,
) -> Calibration:
    """A seeded random sample of ``limit`` documents of a collection dataset (a bundled name such as
    ``wikipedia``, a text file, or ``hf:...``), tokenised and cut to ``max_length`` tokens."""
    from headstats.io.tasks import collection_source

    source = collection_source(dataset, data_dir=data_dir)
    pairs = list(
        source.iter_sequences(
            tokenizer,
            prompt_format=prompt_format,
            limit=limit,
            max_length=max_length,
            model_name=model_name,
            sample="random",
            seed=seed,
        )
    )
    if not pairs:
        raise ValueError(f"calibration dataset {dataset!r} yielded no sequences")
    digest = hashlib.sha256(json.dumps([ids for _, ids in pairs]).encode()).hexdigest()
    identity = {
        "dataset": source.name,
        "source": source.identity,
        "sample": "random",
        "seed": seed,
        "limit": limit,
        "max_length": max_length,
        "prompt_format": prompt_format,
        "n_sequences": len(pairs),
        "n_tokens": sum(len(ids) for _, ids in pairs),
        "sample_ids": [int(k) for k, _ in pairs],
        "tokens_sha256": digest,
    }
    return Calibration([ids for _, ids in pairs], identity)


def spec_calibration(
    spec: PruneSpec | FrontierSpec, tokenizer: PreTrainedTokenizerBase, model_name: str
) -> Calibration:
    """The calibration set a prune or frontier spec names (its calibration, truncation and run options)."""
    return calibration_set(
        tokenizer,
        spec.calibration or "wikipedia",
        limit=spec.calibration_limit or 64,
        max_length=spec.max_length,
        seed=spec.seed,
        prompt_format=spec.prompt_format,
        model_name=model_name,
        data_dir=spec.data_dir,
    )


def head_means(
    model: PreTrainedModel,
    calibration: Calibration,
    score: str,
    *,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """One row per (layer, head): the mean of ``score`` over the calibration sequences."""
    from headstats.engine.scoring import score_sequences

    sid = S.get_score(score).id
    table = score_sequences(model, calibration.sequences, batch_size, scores=(sid,), seed=seed, progress=progress)
    return table.groupby(["layer", "head"], as_index=False)[sid].mean().rename(columns={sid: "mean"})


def select_heads(means: pd.DataFrame, score: str, share: float) -> list[tuple[int, int]]:
    """The ``round(share x heads)`` heads whose mean looks most inactive by ``score``'s direction."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share {share:g} is outside [0, 1]: give a fraction of all heads (0.1 = 10%)")
    n = round(share * len(means))
    descending = S.get_score(score).inactive_when == "above"
    ranked = means.assign(key=-means["mean"] if descending else means["mean"])
    ranked = ranked.sort_values(["key", "layer", "head"], kind="stable")
    return sorted((int(r.layer), int(r.head)) for r in ranked.head(n).itertuples())


def pruned_copy(model: PreTrainedModel, heads: Sequence[tuple[int, int]]) -> PreTrainedModel:
    """A deep copy of ``model`` with ``heads`` removed (the original is untouched)."""
    clone = copy.deepcopy(model)
    prune_heads(clone, heads)
    return clone


@dataclass
class Certification:
    """The tested shares in order, each with its drop bound, and the largest certified one."""

    task: str
    n_questions: int
    baseline_accuracy: float
    max_drop: float
    points: list[dict] = field(default_factory=list)

    @property
    def certified_share(self) -> float | None:
        certified = [p["share"] for p in self.points if p["certified"]]
        return max(certified) if certified else None


def certify(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    means: pd.DataFrame,
    score: str,
    shares: Sequence[float],
    task: str,
    *,
    limit: int | None = None,
    seed: int = 0,
    max_drop: float = 0.01,
    batch_size: int = 8,
    progress: bool = False,
    sample: str = "random",
    data_dir: str | None = None,
) -> Certification:
    """Fixed-sequence certification of ``shares`` (increasing) on ``task``: see the module docstring."""
    from headstats.io.tasks import load_task
    from headstats.jobs.evaluate import evaluate

    questions = load_task(task, limit=limit, sample=sample, seed=seed, data_dir=data_dir)
    base = evaluate(model, tokenizer, questions, batch_size=batch_size, progress=progress, share_prefix=False)
    result = Certification(task, len(base), float(base["correct"].mean()), max_drop)
    for share in sorted(set(shares)):
        heads = select_heads(means, score, share)
        clone = pruned_copy(model, heads)
        frame = evaluate(clone, tokenizer, questions, batch_size=batch_size, progress=progress, share_prefix=False)
        del clone
        merged = base.merge(frame, on=["question_id"], suffixes=("_base", "_pruned"))
        bound = drop_bound(merged["correct_base"].to_numpy(), merged["correct_pruned"].to_numpy())
        ok = bound.upper <= max_drop
        result.points.append(
            {
                "share": share,
                "n_removed": len(heads),
                "accuracy": float(frame["correct"].mean()),
                "drop": bound.drop,
                "upper_bound": bound.upper,
                "lost": bound.lost,
                "gained": bound.gained,
                "certified": ok,
            }
        )
        logger.info("share %.3f: drop %.4f, upper bound %.4f -> %s", share, bound.drop, bound.upper, ok)
        if not ok:
            break
    return result


def remote_code(model: PreTrainedModel) -> str:
    """The modeling file a saved pruned model carries for ``trust_remote_code=True``."""
    base = type(model).__mro__[1] if type(model).__name__.startswith("HeadstatsPruned") else type(model)
    return (
        '"""A model pruned by headstats prune; needs headstats installed (pip install headstats).\n\n'
        "The class rebuilds the pruned head counts from config.headstats_pruning before the weights load.\n"
        '"""\n\n'
        f"from transformers import {base.__name__}\n\n"
        "from headstats.engine.prune import pruned_class\n\n"
        f"{REMOTE_CLASS} = pruned_class({base.__name__})\n"
    )


def save_pruned(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None, out: str | Path, record: dict
) -> Path:
    """Write the pruned ``model`` (safetensors + config), its tokenizer, the modeling file for
    transformers' ``trust_remote_code`` and ``pruning.json`` to ``out``, all at once: the files are
    written to a temporary folder next to ``out`` that replaces it when complete."""
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()) and not (out / RECORD_FILE).is_file():
        raise ValueError(f"{out} exists and holds other files (no {RECORD_FILE}); give a new or empty --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.config.auto_map = {"AutoModelForCausalLM": f"{REMOTE_CODE_FILE[:-3]}.{REMOTE_CLASS}"}
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / REMOTE_CODE_FILE).write_text(remote_code(model))
        write_json_atomic(record, tmp / RECORD_FILE)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def certification_record(certification: Certification) -> dict:
    return {
        "task": certification.task,
        "n_questions": certification.n_questions,
        "baseline_accuracy": certification.baseline_accuracy,
        "max_drop": certification.max_drop,
        "bound": "one-sided 95% Tango score bound of the paired drop; shares tested in increasing order, stopping "
        "at the first one not certified (fixed-sequence test)",
        "points": certification.points,
        "certified_share": certification.certified_share,
    }


def pruning_record(
    model: PreTrainedModel,
    heads: Sequence[tuple[int, int]],
    score: str,
    share: float,
    calibration: Calibration,
    params_before: int,
    source: str,
    certification: Certification | None = None,
) -> dict:
    """What ``pruning.json`` holds: the removed heads, how they were chosen, and the size change."""
    import headstats

    layers, n_heads, n_kv, head_dim = geometry(model)
    entry = getattr(model.config, CONFIG_KEY)
    plans = layer_plans(model, [tuple(pair) for pair in entry["removed_heads"]])
    return {
        "model": source,
        "removed_heads": [list(pair) for pair in entry["removed_heads"]],
        "n_removed": len(heads),
        "n_heads": layers * n_heads,
        "share": share,
        "score": score,
        "selection": f"mean of {score} over the calibration sequences; the {'highest' if S.get_score(score).inactive_when == 'above' else 'lowest'} go",  # noqa: E501
        "calibration": calibration.identity,
        "certification": None if certification is None else certification_record(certification),
        "params_before": params_before,
        "params_after": count_parameters(model),
        "geometry": {"layers": layers, "heads": n_heads, "kv_heads": n_kv, "head_dim": head_dim},
        "query_heads_per_layer": [len(p.q) - (p.placeholder is not None) for p in plans],
        "kv_heads_per_layer": [len(p.kv) if p.removed else n_kv for p in plans],
        "kept_for_shape": [[i, p.placeholder] for i, p in enumerate(plans) if p.placeholder is not None],
        "headstats_version": headstats.__version__,
    }


def run_prune(spec: PruneSpec) -> dict:
    """Load the spec's model, rank its heads on the calibration set, remove the ``share`` (or the
    largest share certified on the ``certify`` task) and write the pruned model to ``out``.
    Returns the ``pruning.json`` record."""
    from headstats.io.models import load_model

    name, score = spec.names[0], spec.scores[0]  # type: ignore[index]
    model, tokenizer = load_model(name, **narrow(spec, LoadOptions).kwargs())
    calibration = spec_calibration(spec, tokenizer, name)
    means = head_means(model, calibration, score, batch_size=spec.batch_size, seed=spec.seed, progress=spec.progress)
    certification, share = None, (spec.shares or (None,))[0]
    if spec.certify is not None:
        certification = certify(
            model,
            tokenizer,
            means,
            score,
            spec.shares or DEFAULT_PRUNE_SHARES,
            spec.certify,
            limit=spec.limit,
            seed=spec.seed,
            max_drop=spec.max_drop,
            batch_size=spec.batch_size,
            progress=spec.progress,
            sample=spec.sample,
            data_dir=spec.data_dir,
        )
        share = certification.certified_share
        if share is None:
            first = certification.points[0]
            raise ValueError(
                f"no share is certified on {spec.certify}: at {first['share']:g} the drop's upper bound is "
                f"{first['upper_bound']:.4f} > {spec.max_drop:g} ({certification.n_questions} questions); give smaller "
                "--share fractions, more questions (--limit), or a larger --max-drop"
            )
    assert share is not None
    heads = select_heads(means, score, share)
    before = count_parameters(model)
    prune_heads(model, heads)
    record = pruning_record(model, heads, score, share, calibration, before, name, certification)
    record["calibration_means"] = [[int(r.layer), int(r.head), float(r.mean)] for r in means.itertuples()]
    save_pruned(model, tokenizer, str(spec.out), record)
    return record
