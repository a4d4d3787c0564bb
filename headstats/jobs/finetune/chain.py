"""Build (or finish) a chain: the base, then SFT -> DPO -> GRPO, each stage from the last one's end.

Re-running the same spec resumes: the chain's directory is named by the hash of its recipe and base
(:mod:`~headstats.jobs.finetune.layout`), a finished checkpoint is never written again, a finished
stage is not trained again, an interrupted one resumes from its trainer state
(:mod:`~headstats.jobs.finetune.training`), and a learning metric measured before on as many held-out
examples is not measured again (:mod:`~headstats.jobs.finetune.evidence`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from headstats.io import store
from headstats.jobs import finetune_data as fd
from headstats.jobs.finetune import evidence, layout, training
from headstats.jobs.finetune.layout import METRICS_FILE, RECIPE_FILE, Chain, Checkpoint
from headstats.jobs.finetune.recipe import STAGES, Recipe, recipe_of
from headstats.specs import FinetuneSpec

# Held-out examples per learning metric (the first ones of each held-out part): enough for intervals of a
# few points, cheap enough on 2 CPU cores (a DPO pair costs two sequences on the policy and the reference).
DEFAULT_EVAL_SIZE = {"sft": 150, "dpo": 200, "grpo": 200}
TRAINING_PACKAGES = ("headstats", "torch", "transformers", "trl", "datasets", "accelerate")


def finetune(
    spec: FinetuneSpec | None = None,
    *,
    recipe: Recipe | None = None,
    log: Callable[[str], None] | None = None,
    **options: object,
) -> Chain:
    """Build (or finish) the chain SFT -> DPO -> GRPO from ``spec.base`` under ``spec.out``.

    The options are :class:`~headstats.specs.FinetuneSpec`'s (``spec``, or its fields by name):
    ``base``, an embedded model name or a ``save_pretrained`` directory; ``stages``, a leading part of
    the chain to build; ``measure``, where each stage's learning metrics are computed on its held-out
    part (``"ends"``: its start and its last checkpoint; ``"all"``: every checkpoint, a learning curve;
    ``"none"``); ``eval_size``, held-out examples per metric (default :data:`DEFAULT_EVAL_SIZE`). The
    recipe is :func:`~headstats.jobs.finetune.recipe.recipe_of` the spec, or ``recipe`` (with the spec's
    seed and bf16 on top). Metrics go to ``metrics.json``. Returns the :class:`Chain`; a finished chain
    is returned without training anything.
    """
    spec = FinetuneSpec.from_kwargs(options, base=spec)  # every option checked here, before any work
    recipe = recipe_of(spec, recipe)
    log = log or (lambda msg: print(msg, file=sys.stderr))
    root = layout.chain_dir(spec.base, spec.out, recipe)
    root.mkdir(parents=True, exist_ok=True)
    record = chain_record(root, spec.base, recipe)
    store.write_json_atomic(record, root / RECIPE_FILE)
    chain = Chain(root, spec.base, recipe, [save_base(root, spec.base, recipe)], layout.read_json(root / METRICS_FILE))
    start = spec.base
    for name in spec.stages:
        chain.checkpoints += build_stage(chain, name, start, record, spec, log)
        start = str(chain.final(name).path)
    return chain


def chain_record(root, base: str, recipe: Recipe) -> dict:
    """The chain's ``recipe.json``: the recipe with its provenance (package versions and data splits
    kept from an earlier run of the same chain). A directory that holds another recipe is refused."""
    earlier = layout.read_json(root / RECIPE_FILE)
    if earlier and Recipe.from_dict(earlier["recipe"]) != recipe:
        raise ValueError(f"{root} holds another recipe (hash collision or an edited recipe.json): remove it")
    identity = layout.base_identity(base)
    return {
        "recipe": recipe.to_dict(),
        "hash": recipe.digest(identity),
        "recipe_hash": recipe.recipe_digest(identity),
        "base": base,
        "base_identity": identity,
        "chain": list(STAGES),
        "checkpoint_steps": {s: recipe.checkpoint_steps(s) for s in STAGES},
        "trainable": "transformer blocks; embeddings and LM head frozen" if recipe.freeze_embeddings else "all",
        "trainer": {
            "optimizer": "AdamW (transformers' default)",
            "scheduler": "linear decay, no warm-up",
            "precision": "bf16 autocast" if recipe.bf16 else "fp32",
            "attention": "sdpa",
        },
        "versions": earlier.get("versions") or store.package_versions(TRAINING_PACKAGES, missing="not installed"),
        "splits": earlier.get("splits", {}),
    }


def save_base(root, base: str, recipe: Recipe) -> Checkpoint:
    """The base itself, saved with the chain's chat template, so every stage (base included) can be
    scored in one prompt format."""
    path = root / "base"
    if not layout.is_complete(path):
        model, tokenizer = training.load_for_training(base, recipe.chat_template)
        info = {"stage": "base", "step": 0, "steps": 0, "source": base, **layout.provenance(root)}
        layout.write_checkpoint(model, tokenizer, path, info)
    return Checkpoint("base", 0, 0, path)


def stage_data(name: str, recipe: Recipe) -> fd.StageData:
    """The stage's train and held-out parts under ``recipe``."""
    return fd.stage_data(
        name,
        eval_fraction=recipe.eval_fraction,
        seed=recipe.split_seed,
        hellaswag_rows=recipe.hellaswag_rows,
        data_dir=recipe.data_dir,
        sources=recipe.grpo_sources if name == "grpo" else None,
        rejected=recipe.dpo_rejected,
        evidence_seed=recipe.evidence_seed,
    )


def to_measure(stage_metrics: dict, steps: list[int], measure: str) -> list[int]:
    """The steps (0: the stage's start) whose learning metrics ``measure`` asks for and
    ``stage_metrics`` does not hold yet."""
    wanted = {"none": [], "ends": [0, steps[-1]], "all": [0, *steps]}[measure]
    return [k for k in wanted if str(k) not in stage_metrics["checkpoints"]]


def build_stage(chain: Chain, name: str, start: str, record: dict, spec: FinetuneSpec, log) -> list[Checkpoint]:
    """Stage ``name`` of ``chain`` from the weights at ``start``: its split recorded, its start measured,
    trained unless finished, its checkpoints measured. Returns its checkpoints."""
    recipe, root = chain.recipe, chain.root
    data = stage_data(name, recipe)
    record["splits"][name] = {
        "sizes": data.sizes(),
        "train": len(data.train),
        "eval": len(data.eval),
        "trained_examples": recipe.examples(name),
    }
    store.write_json_atomic(record, root / RECIPE_FILE)
    held_out = data.eval.select(range(min(spec.eval_size or DEFAULT_EVAL_SIZE[name], len(data.eval))))
    stage_metrics = chain.metrics.setdefault(name, {"checkpoints": {}})
    if spec.measure != "none" and stage_metrics.get("eval_examples") != len(held_out):  # other examples: again
        stage_metrics.update(eval_examples=len(held_out), checkpoints={})
    checkpoints = layout.stage_checkpoints(root, recipe, name)
    todo = to_measure(stage_metrics, [c.step for c in checkpoints], spec.measure)
    ref_logps = None  # DPO: the starting weights' log-probabilities of the held-out pairs
    if todo and (0 in todo or name == "dpo"):
        ref_logps = measure_start(chain, name, start, held_out, record=0 in todo)
    if not layout.is_complete(checkpoints[-1].path):
        train = fd.training_order(data.train, recipe.examples(name), recipe.seed)
        facts = training.train_stage(name, start, root, recipe, train, log)
        stage_metrics["run"] = {k: v for k, v in facts.items() if k != "log_history"}
        stage_metrics["log_history"] = facts["log_history"]
        save_metrics(chain)
    for ckpt in checkpoints:
        if ckpt.step in todo and ckpt.step > 0:
            measure_checkpoint(chain, ckpt, held_out, ref_logps)
    return checkpoints


def save_metrics(chain: Chain) -> None:
    store.write_json_atomic(chain.metrics, chain.root / METRICS_FILE)


def record_metrics(chain: Chain, name: str, step: int, model, tokenizer, held_out, ref_logps) -> None:
    """Stage ``name``'s learning metrics of ``model`` at ``step``, into the chain's ``metrics.json``."""
    values = evidence.measure_stage(name, model, tokenizer, held_out, chain.recipe, ref_logps)
    chain.metrics[name]["checkpoints"][str(step)] = values
    save_metrics(chain)


def measure_start(chain: Chain, name: str, start: str, held_out, *, record: bool):
    """The weights stage ``name`` starts from: its metrics at step 0 when ``record``; returns DPO's
    reference log-probabilities of the held-out pairs (None for the other stages)."""
    recipe = chain.recipe
    model, tokenizer = training.load_for_training(start, recipe.chat_template)
    ref_logps = None
    if name == "dpo":  # DPO's implicit reward is measured against its starting weights
        ref_logps = evidence.reference_logps(
            model, tokenizer, held_out, max_length=recipe.dpo.max_length, bf16=recipe.bf16
        )
    if record:
        record_metrics(chain, name, 0, model, tokenizer, held_out, ref_logps)
    return ref_logps


def measure_checkpoint(chain: Chain, ckpt: Checkpoint, held_out, ref_logps) -> None:
    """A checkpoint's learning metrics, into the chain's ``metrics.json``."""
    model, tokenizer = training.load_for_training(str(ckpt.path), chain.recipe.chat_template)
    record_metrics(chain, ckpt.stage, ckpt.step, model, tokenizer, held_out, ref_logps)
