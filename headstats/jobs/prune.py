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
import inspect
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.prune import CONFIG_KEY, count_parameters, geometry, layer_plans, prune_heads
from headstats.io import store
from headstats.io.assets import portable_name
from headstats.io.store import write_json_atomic
from headstats.jobs.frontier_plan import task_options
from headstats.options import narrow
from headstats.specs import DEFAULT_PRUNE_SHARES, UNITS, FrontierSpec, LoadOptions, PruneSpec
from headstats.specs import Calibration as CalibrationOptions
from headstats.stats.paired import drop_bound

if TYPE_CHECKING:
    from headstats.io.tasks import TaskSlice

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
    options = CalibrationOptions(calibration=dataset, calibration_limit=limit)
    return ranking_calibration(
        options,
        tokenizer,
        max_length=max_length,
        seed=seed,
        prompt_format=prompt_format,
        model_name=model_name,
        data_dir=data_dir,
    )


def ranking_calibration(
    options: CalibrationOptions,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_length: int | None,
    seed: int,
    prompt_format: str,
    model_name: str,
    data_dir: str | None,
) -> Calibration:
    """The sequences heads are ranked on: a seeded random sample of the calibration dataset that
    ``options`` names (:meth:`headstats.specs.Calibration.sequences`), cut to ``max_length`` tokens,
    with what identifies it."""
    source, pairs = options.sequences(
        tokenizer,
        prompt_format=prompt_format,
        model_name=model_name,
        data_dir=data_dir,
        sample="random",
        seed=seed,
        max_length=max_length,
    )
    if not pairs:
        raise ValueError(f"calibration dataset {options.calibration!r} yielded no sequences")
    digest = hashlib.sha256(json.dumps([ids for _, ids in pairs]).encode()).hexdigest()
    # The dataset and its size are recorded as dataset, source and limit; any other option of the group
    # under its own name.
    others = {k: v for k, v in options.settings().items() if k not in ("calibration", "calibration_limit")}
    identity = {
        "dataset": source.name,
        "source": source.identity,
        "sample": "random",
        "seed": seed,
        "limit": options.calibration_limit,
        "max_length": max_length,
        "prompt_format": prompt_format,
        **others,
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
    return ranking_calibration(
        narrow(spec, CalibrationOptions),
        tokenizer,
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


def select_heads(
    means: pd.DataFrame, score: str, share: float, *, unit: str = "head", group_size: int = 1
) -> list[tuple[int, int]]:
    """The heads that look most inactive by ``score``'s direction, ties in (layer, head) order.

    ``unit="head"``: the ``round(share x heads)`` query heads with the most inactive means.
    ``unit="kv-group"``: whole KV groups (``group_size`` consecutive query heads sharing a KV head;
    1 for multi-head attention, where a group is one head), ranked by the mean of their query heads'
    means; ``round(share x groups)`` groups go (the nearest whole number of groups, halves to even
    as Python's ``round``), so the share of query heads removed is the share asked for, to the
    nearest group."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share {share:g} is outside [0, 1]: give a fraction of all heads (0.1 = 10%)")
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}: choose from {', '.join(UNITS)}")
    descending = S.get_score(score).inactive_when == "above"
    size = group_size if unit == "kv-group" else 1
    groups = means.assign(group=means["head"] // size).groupby(["layer", "group"], as_index=False)["mean"].mean()
    n = round(share * len(groups))
    ranked = groups.assign(key=-groups["mean"] if descending else groups["mean"])
    ranked = ranked.sort_values(["key", "layer", "group"], kind="stable").head(n)
    return sorted((int(r.layer), int(r.group) * size + i) for r in ranked.itertuples() for i in range(size))


def selection_rule(score: str, unit: str = "head") -> str:
    """How :func:`select_heads` chose, in words (recorded in ``pruning.json``)."""
    end = "highest" if S.get_score(score).inactive_when == "above" else "lowest"
    if unit == "kv-group":
        return (
            f"mean of {score} over the calibration sequences per head; whole KV groups ranked by the mean of their "
            f"query heads' means, the {end} go"
        )
    return f"mean of {score} over the calibration sequences; the {end} go"


def kv_group_size(model: PreTrainedModel) -> int:
    """Query heads per KV head of the unpruned ``model`` (1 for multi-head attention)."""
    _, heads, kv_heads, _ = geometry(model)
    return heads // kv_heads


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
    questions: TaskSlice,
    *,
    max_drop: float = 1.0,
    batch_size: int = 8,
    progress: bool = False,
    unit: str = "head",
    prompt_format: str = "tokenizer",
) -> Certification:
    """Fixed-sequence certification of ``shares`` (increasing) on a task's selected ``questions``
    (:func:`headstats.io.tasks.load_task`) in ``prompt_format``, each removing the heads
    :func:`select_heads` picks by ``unit``: see the module docstring."""
    from headstats.jobs.evaluate import evaluate

    how = dict(batch_size=batch_size, prompt_format=prompt_format, progress=progress, share_prefix=False)
    base = evaluate(model, tokenizer, questions, **how)
    result = Certification(questions.name, len(base), float(base["correct"].mean()), max_drop)
    for share in sorted(set(shares)):
        heads = select_heads(means, score, share, unit=unit, group_size=kv_group_size(model))
        clone = pruned_copy(model, heads)
        frame = evaluate(clone, tokenizer, questions, **how)
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


def base_class(model: PreTrainedModel) -> type[PreTrainedModel]:
    """The transformers class a pruned model is built on (the unpruned model's class)."""
    cls = type(model)
    return cls.__mro__[1] if cls.__name__.startswith("HeadstatsPruned") else cls


def remote_code(model: PreTrainedModel) -> str:
    """The modeling file a saved pruned model carries for ``trust_remote_code=True``: the source of
    :mod:`headstats.engine.pruned_model` (torch and transformers only), then a subclass of the
    model's transformers class that cuts its attention to the config's recorded heads."""
    from headstats.engine import pruned_model

    base = base_class(model)
    if not base.__module__.startswith("transformers."):
        raise ValueError(
            f"{base.__name__} comes from {base.__module__}, not transformers: headstats prune saves models whose "
            "class transformers defines (its modeling file subclasses it)"
        )
    footer = f"""

# -- The class transformers loads (config.json's auto_map), written by headstats prune ---------------

from {base.__module__} import {base.__name__}  # noqa: E402


class {REMOTE_CLASS}({base.__name__}):
    \"\"\"{base.__name__} with the attention heads listed in config.headstats_pruning removed.\"\"\"

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        shrink_to_config(self)
"""
    return inspect.getsource(pruned_model).rstrip("\n") + "\n" + footer


SAVE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def write_weights(model: PreTrainedModel, folder: Path, dtype: str | None = None) -> None:
    """``model.save_pretrained(folder)`` with the floating-point weights in ``dtype`` (float32,
    bfloat16 or float16; None = as they are), leaving ``model`` itself as it is. Weights that share
    storage (tied embeddings) stay one tensor."""
    if dtype is None:
        model.save_pretrained(folder)
        return
    target = SAVE_DTYPES[dtype]
    converted: dict[tuple, torch.Tensor] = {}
    state = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in converted:
            converted[key] = tensor.to(target) if tensor.is_floating_point() else tensor
        state[name] = converted[key]
    before = model.config.dtype
    try:
        model.save_pretrained(folder, state_dict=state)
    finally:
        model.config.dtype = before
    # save_pretrained records the dtype of the model's parameters; from_pretrained's "auto" reads this one.
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dtype": dtype}, indent=2, sort_keys=True) + "\n")


def with_umask(folder: Path) -> None:
    """Folders and files under ``folder`` (itself included) as the user's umask makes new ones: 0755 and
    0644 under the usual 022, 0700 and 0600 under a careful user's 077. What wrote them (a temporary
    folder, a library) may have made them private; the umask, not headstats, says who may read them."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.rglob("*"):
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def write_pruned_files(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    folder: Path,
    record: dict,
    dtype: str | None = None,
) -> None:
    """What a pruned folder holds, written into ``folder``: the weights (safetensors, in ``dtype``) and
    config with an ``auto_map`` to the self-contained modeling file, the tokenizer, that file, and
    ``pruning.json``; created with the user's umask (:func:`with_umask`)."""
    model.config.auto_map = {"AutoModelForCausalLM": f"{REMOTE_CODE_FILE[:-3]}.{REMOTE_CLASS}"}
    write_weights(model, folder, dtype)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    (folder / REMOTE_CODE_FILE).write_text(remote_code(model))
    write_json_atomic(record, folder / RECORD_FILE)
    with_umask(folder)


def save_pruned(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    out: str | Path,
    record: dict,
    dtype: str | None = None,
) -> Path:
    """Write the pruned ``model`` (:func:`write_pruned_files`; weights in ``dtype``, None = as they
    are) to ``out``, all at once (:func:`replace_model_folder`)."""

    return replace_model_folder(out, lambda folder: write_pruned_files(model, tokenizer, folder, record, dtype))


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
    unit: str = "head",
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
        "unit": unit,
        "selection": selection_rule(score, unit),
        "calibration": calibration.identity,
        "certification": None if certification is None else certification_record(certification),
        "params_before": params_before,
        "params_after": count_parameters(model),
        "geometry": {"layers": layers, "heads": n_heads, "kv_heads": n_kv, "head_dim": head_dim},
        "query_heads_per_layer": [len(p.q) for p in plans],
        "kv_heads_per_layer": [len(p.kv) if p.removed else n_kv for p in plans],
        "kv_heads_removed": sum(n_kv - len(p.kv) for p in plans if p.removed),  # the KV cache's share: / layers x n_kv
        "attention_free_layers": [i for i, p in enumerate(plans) if not p.q],
        "headstats_version": headstats.__version__,
    }


def run_prune(spec: PruneSpec) -> dict:
    """Load the spec's model, rank its heads on the calibration set, remove the ``share`` (or the
    largest share certified on the ``certify`` task) and write the pruned model to ``out``.
    Returns the ``pruning.json`` record."""
    from headstats.io.identity import model_identity
    from headstats.io.models import load_model
    from headstats.io.tasks import load_task

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
            load_task(spec.certify, **task_options(spec)),
            max_drop=spec.max_drop,
            batch_size=spec.batch_size,
            progress=spec.progress,
            unit=spec.unit,
            prompt_format=spec.prompt_format,
        )
        share = certification.certified_share
        if share is None:
            first = certification.points[0]
            raise ValueError(
                f"no share is certified on {spec.certify}: at {first['share']:g} the drop's upper bound is "
                f"{100 * first['upper_bound']:.2f} points > {spec.max_drop:g} ({certification.n_questions} "
                "questions); give smaller --share fractions, more questions (--limit), or a larger --max-drop"
            )
    assert share is not None
    heads = select_heads(means, score, share, unit=spec.unit, group_size=kv_group_size(model))
    before = count_parameters(model)
    prune_heads(model, heads)
    record = pruning_record(model, heads, score, share, calibration, before, name, certification, spec.unit)
    record["model_revision"] = revision
    record["calibration_means"] = [[int(r.layer), int(r.head), float(r.mean)] for r in means.itertuples()]
    save_pruned(model, tokenizer, str(spec.out), record, spec.save_dtype)
    return record
