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
:func:`headstats.stats.paired.drop_bound`) is at most ``max_drop`` points. Testing stops at the first share
that is not certified, so "the largest certified share" is a fixed-sequence test: the 5% level holds
for the whole sequence without a multiplicity adjustment.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.prune import CONFIG_KEY, count_parameters, geometry, layer_plans, prune_heads
from headstats.io import store
from headstats.io.assets import portable_name
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
    max_drop: float = 1.0,
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
        ok = bound.upper <= max_drop / 100  # max_drop in points, the bound a fraction
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
    transformers' ``trust_remote_code`` and ``pruning.json`` to ``out``, all at once
    (:func:`replace_model_folder`)."""

    def write(folder: Path) -> None:
        model.config.auto_map = {"AutoModelForCausalLM": f"{REMOTE_CODE_FILE[:-3]}.{REMOTE_CLASS}"}
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        (folder / REMOTE_CODE_FILE).write_text(remote_code(model))
        write_json_atomic(record, folder / RECORD_FILE)

    return replace_model_folder(out, write)


def claim_model_folder(out: str | Path) -> store.OutputFolder:
    """Claim ``out`` for a pruned model (:func:`headstats.io.store.claim_output_folder`): refused with
    one line when it is a file, cannot be created, or holds the user's files where the model's go.
    A folder with ``pruning.json`` and no manifest is an earlier prune's: its files may be replaced."""
    return store.claim_output_folder(out, marker=RECORD_FILE)


def check_model_folder(out: str | Path | None) -> None:
    """Refuse, before any model work, an ``out`` a pruned model cannot be written to (a file, a folder
    that cannot be made, the user's files where the model's go); creates nothing."""
    path = Path(str(out)).expanduser()
    if path.is_dir():
        claim_model_folder(path)
    elif path.exists():
        raise store.OutputFolderError(f"--out {out} is a file, not a folder; give a new folder or one headstats wrote")
    else:
        store.ensure_writable(path, create=False)
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
        try:  # a folder can be made there (a writable bit does not say so on /proc or a read-only mount)
            Path(tempfile.mkdtemp(prefix=".headstats-probe-", dir=parent)).rmdir()
        except OSError as err:
            raise store.OutputFolderError(
                f"--out {out} cannot be created ({err.strerror or err} in {parent}); give a folder you can write"
            ) from None


def replace_model_folder(out: str | Path, write: Callable[[Path], object]) -> Path:
    """Replace the pruned model in ``out`` by what ``write`` writes into a folder: staged inside
    ``out`` and moved in file by file with ``pruning.json`` last (:func:`headstats.io.store.replace_folder`).
    Only the files an earlier prune wrote are replaced or removed; the user's own stay. A staging
    folder that a killed run left, inside ``out`` or beside it, is removed first."""
    folder = claim_model_folder(out)
    clean_killed_copies(folder.root)
    store.replace_folder(folder, write, last=RECORD_FILE)
    return folder.root


def clean_killed_copies(out: Path) -> list[Path]:
    """Remove the hidden copies ``.<out name>.<8 characters>`` beside ``out`` that a prune killed
    while saving left there (empty, or holding a config with ``headstats_pruning`` or a
    ``pruning.json``); returns them. Anything else of that name is left alone."""
    removed = []
    pattern = re.compile(rf"\.{re.escape(out.name)}\.[A-Za-z0-9_]{{8}}")
    for path in out.parent.iterdir():
        if not pattern.fullmatch(path.name) or path.is_symlink() or not path.is_dir():
            continue
        config = path / "config.json"
        ours = (
            not any(path.iterdir())
            or (path / RECORD_FILE).is_file()
            or (config.is_file() and CONFIG_KEY in config.read_text(encoding="utf-8", errors="replace"))
        )
        if ours:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        logger.info("removed %d copy(ies) a killed prune left: %s", len(removed), ", ".join(p.name for p in removed))
    return removed


def certification_record(certification: Certification) -> dict:
    return {
        "task": certification.task,
        "n_questions": certification.n_questions,
        "baseline_accuracy": certification.baseline_accuracy,
        "max_drop": certification.max_drop,
        "max_drop_unit": "accuracy points",
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
        "model": portable_name(source),
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
    from headstats.io.models import load_model, model_identity

    name, score = spec.names[0], spec.scores[0]  # type: ignore[index]
    check_model_folder(spec.out)
    model, tokenizer = load_model(name, **narrow(spec, LoadOptions).kwargs())
    revision = model_identity(model)["revision"]  # the unpruned weights, by content or Hub commit
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
                f"{100 * first['upper_bound']:.2f} points > {spec.max_drop:g} ({certification.n_questions} "
                "questions); give smaller --shares, more questions (--limit), or a larger --max-drop"
            )
    assert share is not None
    heads = select_heads(means, score, share)
    before = count_parameters(model)
    prune_heads(model, heads)
    record = pruning_record(model, heads, score, share, calibration, before, name, certification)
    record["model_revision"] = revision
    record["calibration_means"] = [[int(r.layer), int(r.head), float(r.mean)] for r in means.itertuples()]
    save_pruned(model, tokenizer, str(spec.out), record)
    return record
