"""A fine-tuning chain as a comparison sees its checkpoints: which stage and step a compared model is
(:func:`checkpoint_step`), the chain a model folder belongs to (:func:`chain_root`), its recipe and
metrics copied beside the score tables (:func:`record_chains`, ``RESULTS/chains/<chain>/``), and
whether each stage learned, read from those copies alone (:func:`chain_learning`)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from headstats.io import store
from headstats.jobs.compare_identity import split_dtype
from headstats.jobs.finetune.layout import METRICS_FILE, RECIPE_FILE, read_json, read_metrics
from headstats.stats.learning import learning_verdicts

STEP_NAME = re.compile(r"(?:step|checkpoint|ckpt|iter)[-_]?0*(\d+)$", re.IGNORECASE)
# the table name model_slug gives a checkpoint of ``headstats finetune``: <chain>-<stage>-<step>, or <chain>-base
CHAIN_SLUG = re.compile(r"^(?P<chain>.+)-(?:(?P<stage>sft|dpo|grpo)-(?P<step>\d+)|(?P<base>base))$")
CHAINS = "chains"  # RESULTS/chains/<chain>/: each fine-tuning chain's recipe and metrics, as collected


def checkpoint_step(name: str, slug: str, provenance: dict) -> tuple[str | None, int | None]:
    """(stage, step) of a compared model, from what its score tables record: the ``headstats finetune``
    checkpoint record (``HEADSTATS_CHECKPOINT.json``, kept in the provenance), else a table named like a
    chain's checkpoint (``<chain>-sft-40``, ``<chain>-base``), else the step of a folder named like
    ``step-00040`` / ``checkpoint-500``, else a ``trainer_state.json``'s ``global_step``; (None, None) for
    anything else (an embedded name, a Hub id)."""
    info = provenance.get("checkpoint") or {}
    if info.get("stage") is not None:
        return str(info["stage"]), int(info.get("step") or 0)
    match = CHAIN_SLUG.match(slug)
    if match:
        return ("base", 0) if match["base"] else (match["stage"], int(match["step"]))
    match = STEP_NAME.search(Path(split_dtype(name)[0].rstrip("/")).name)
    if match:
        return None, int(match.group(1))
    step = provenance.get("trainer_step")
    return None, (int(step) if isinstance(step, int) else None)


def chain_root(path: str) -> Path | None:
    """The ``headstats finetune`` chain a model folder belongs to (its base or a checkpoint): the folder
    above it that holds the chain's ``metrics.json``; None for any other model."""
    folder = Path(path)
    for parent in (folder.parent, folder.parent.parent):
        if (parent / METRICS_FILE).is_file():
            return parent
    return None


def record_chains(paths: list[str], root: Path) -> None:
    """Copy the recipe and metrics of every fine-tuning chain that ``paths`` (model folders) belong to
    into ``root/chains/<chain>/``, so that the report reads whether each stage learned from the results
    alone, wherever the checkpoints are."""
    for chain in dict.fromkeys(r for r in map(chain_root, paths) if r is not None):
        folder = root / CHAINS / chain.name
        folder.mkdir(parents=True, exist_ok=True)
        for name in (METRICS_FILE, RECIPE_FILE):
            source, target = chain / name, folder / name
            data = source.read_bytes() if source.is_file() else None
            if data is not None and (not target.is_file() or target.read_bytes() != data):
                store.write_atomic(target, lambda tmp, data=data: tmp.write_bytes(data))


def chain_learning(chains: list[str], root: Path, seed: int = 0) -> pd.DataFrame:
    """:func:`~headstats.stats.learning.learning_verdicts` of the fine-tuning chains named ``chains``,
    from their metrics recorded under ``root/chains/`` (:func:`record_chains`), with the chain's name and
    seed: did each stage learn on its held-out examples? Empty when none is recorded."""
    frames = []
    for chain in dict.fromkeys(chains):
        folder = root / CHAINS / chain
        if not (folder / METRICS_FILE).is_file():
            continue
        fix = "restore it from version control, or move it away and collect the chain's checkpoints again"
        metrics = read_metrics(folder / METRICS_FILE, fix)
        record = read_json(folder / RECIPE_FILE, fix)
        chain_seed = (record.get("recipe") or {}).get("seed")
        frames.append(learning_verdicts(metrics, seed=seed).assign(chain=chain, chain_seed=chain_seed))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
