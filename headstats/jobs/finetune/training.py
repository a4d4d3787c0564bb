"""Training one stage of a chain with TRL: SFT, DPO or GRPO, checkpointed at the recipe's steps.

**What trains.** The transformer blocks train in full; the token embeddings (tied to the LM head in
Gemma and SmolLM2) are frozen (``Recipe.freeze_embeddings``). Two reasons. (1) Speed: the
262k-token vocabulary is most of Gemma-3 270M's parameters; freezing it removes their gradient,
their Adam state and their update, which made most of a CPU step's cost. (2) The measurement: the
study asks whether fine-tuning moves attention heads, and the public fine-tunes it compares are
full-rank updates of every block. LoRA would also be cheap, but it restricts each head's update to a
low-rank subspace, which biases the answer towards "heads barely move"; freezing the embeddings
leaves every head's weights free.

While a stage trains, the trainer's own state (optimizer, scheduler, data position, random state) is
saved at every checkpoint step and at least every :data:`RESUME_EVERY` steps, so an interrupted stage
resumes from its last save with the same updates it would have made; a finished stage deletes it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from headstats.jobs import finetune_data as fd
from headstats.jobs.finetune import layout
from headstats.jobs.finetune.layout import TRAINER_DIR
from headstats.jobs.finetune.recipe import Recipe, StageRecipe

# Steps between saves of the trainer state: a stage with few checkpoints loses at most this many
# steps to an interruption (a save of Gemma-3 270M's weights and Adam state takes seconds).
RESUME_EVERY = 10


def load_for_training(path: str, chat_template: str, device: torch.device | None = None):
    """A model in fp32 (trainable copy) and its tokenizer with the chat template set.

    Training and the learning metrics use PyTorch's SDPA attention; headstats' own attention is for
    scoring (``headstats.load_model`` on a checkpoint selects it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from headstats.io.models import default_device, resolve_model_path

    resolved = resolve_model_path(path)
    tokenizer = AutoTokenizer.from_pretrained(resolved)
    tokenizer.chat_template = chat_template
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(resolved, dtype=torch.float32, attn_implementation="sdpa")
    model.to(device or default_device())
    # Generation stops at the end of the model's turn when that marker is one token of the vocabulary.
    eot = tokenizer.convert_tokens_to_ids(fd.END_OF_TURN)
    if isinstance(eot, int) and eot != tokenizer.unk_token_id:
        eos = model.generation_config.eos_token_id
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        model.generation_config.eos_token_id = [*dict.fromkeys([*eos, eot])]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def freeze_embeddings(model) -> int:
    """Freeze the input embeddings and the LM head (one matrix when tied); returns trainable parameters."""
    for module in (model.get_input_embeddings(), model.get_output_embeddings()):
        if module is not None:
            for p in module.parameters():
                p.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def verifiable_reward(completions, answer, reward_kind=None, **_) -> list[float]:
    """TRL reward function: each completion's verifiable reward (:func:`finetune_data.reward`)."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    kinds = reward_kind or ["exact_number"] * len(texts)
    return [fd.reward(k, t, a) for k, t, a in zip(kinds, texts, answer, strict=True)]


def _columns(data, keep: Sequence[str]):
    return data.remove_columns([c for c in data.column_names if c not in keep])


def _exporter(tokenizer, targets: dict[int, Path], info: dict):
    """A TrainerCallback (defined here: transformers is imported only when training) that writes the
    stage's checkpoints at their steps and times every step."""
    from transformers import TrainerCallback

    class Exporter(TrainerCallback):
        def __init__(self):
            self.step_times: list[float] = []
            self.step_cpu: list[float] = []  # process CPU seconds: what a step costs on a shared machine
            self._t0 = self._c0 = 0.0

        def on_step_begin(self, args, state, control, **kw):
            self._t0, self._c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, model=None, **kw):
            self.step_times.append(time.perf_counter() - self._t0)
            self.step_cpu.append(time.process_time() - self._c0)
            path = targets.get(state.global_step)
            if path is not None and model is not None:
                layout.write_checkpoint(model, tokenizer, path, {**info, "step": state.global_step})

    return Exporter()


def _trainer_args(config_cls, stage: StageRecipe, recipe: Recipe, trainer_dir: Path, save_every: int, **extra):
    settings = dict(
        output_dir=str(trainer_dir),
        max_steps=stage.steps,
        per_device_train_batch_size=stage.batch_size,
        learning_rate=stage.learning_rate,
        lr_scheduler_type="linear",
        seed=recipe.seed,
        data_seed=recipe.seed,
        bf16=recipe.bf16,
        use_cpu=not torch.cuda.is_available(),
        save_strategy="steps",
        save_steps=save_every,
        save_total_limit=1,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    # transformers 5.25 renamed gradient_checkpointing (a deprecated alias now, warning on every stage).
    fields = {f.name for f in dataclasses.fields(config_cls)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    settings[checkpointing] = recipe.gradient_checkpointing
    return config_cls(**{**settings, **extra})


def _sft_trainer(trl, model, tokenizer, train, stage: StageRecipe, args: Callable):
    config = args(trl.SFTConfig, max_length=stage.max_length, completion_only_loss=True)
    data = _columns(train, ("prompt", "completion"))
    return trl.SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)


def _dpo_trainer(trl, model, tokenizer, train, stage: StageRecipe, args: Callable, chat_template: str):
    # An explicit, frozen reference: the stage's starting weights (DPOTrainer cannot re-load a model
    # that was not loaded from a path).
    ref, _ = load_for_training(str(model.config._name_or_path), chat_template, model.device)
    ref.requires_grad_(False).eval()
    config = args(trl.DPOConfig, max_length=stage.max_length, beta=stage.beta)
    data = _columns(train, ("prompt", "chosen", "rejected"))
    return trl.DPOTrainer(model=model, ref_model=ref, args=config, train_dataset=data, processing_class=tokenizer)


def _grpo_trainer(trl, model, tokenizer, train, stage: StageRecipe, args: Callable):
    config = args(
        trl.GRPOConfig,
        beta=stage.beta,
        num_generations=stage.num_generations,
        max_completion_length=stage.max_completion_length,
        temperature=stage.temperature,
    )
    data = _columns(train, ("prompt", "answer", "reward_kind"))
    return trl.GRPOTrainer(
        model=model, reward_funcs=verifiable_reward, args=config, train_dataset=data, processing_class=tokenizer
    )


def build_trainer(name: str, model, tokenizer, train, recipe: Recipe, trainer_dir: Path, save_every: int):
    """The TRL trainer of stage ``name`` on ``train``, saving its state every ``save_every`` steps."""
    try:
        import trl
    except ImportError as err:
        raise RuntimeError(f"fine-tuning needs TRL: pip install 'headstats[train]' ({err})") from err

    stage = recipe.stage(name)

    def args(config_cls, **extra):
        return _trainer_args(config_cls, stage, recipe, trainer_dir, save_every, **extra)

    if name == "dpo":
        return _dpo_trainer(trl, model, tokenizer, train, stage, args, recipe.chat_template)
    build = {"sft": _sft_trainer, "grpo": _grpo_trainer}[name]
    return build(trl, model, tokenizer, train, stage, args)


def _run_facts(trainer, result, exporter, seconds: float, trainable: int) -> dict:
    """What a stage's run cost and logged: times per step, loss, tokens, the trainer's log."""
    times = exporter.step_times[1:] or exporter.step_times  # the first step pays for warm-up
    # TRL logs the cumulative number of (non-padding) tokens the model was trained on.
    tokens = max((float(e.get("num_tokens", 0)) for e in trainer.state.log_history), default=0.0)
    return {
        "train_seconds": seconds,
        "steps_run": len(exporter.step_times),
        "seconds_per_step": float(np.median(times)) if times else math.nan,
        "cpu_seconds_per_step": float(np.median(exporter.step_cpu[1:] or exporter.step_cpu)),
        "train_loss": float(result.training_loss),
        "trainable_parameters": int(trainable),
        "tokens": tokens,
        "tokens_per_second": tokens / sum(exporter.step_times) if exporter.step_times else math.nan,
        "log_history": json.loads(json.dumps(trainer.state.log_history, default=float)),
    }


def train_stage(name: str, start: str, root: Path, recipe: Recipe, train, log=print) -> dict:
    """Train one stage from the checkpoint (or base) at ``start``, writing its checkpoints; resumes
    from the trainer state of its last finished checkpoint. Returns run-time facts and the machine
    (:func:`headstats.io.models.machine_info`)."""
    from transformers.trainer_utils import get_last_checkpoint

    from headstats.io.models import machine_info

    stage = recipe.stage(name)
    targets = {c.step: c.path for c in layout.stage_checkpoints(root, recipe, name)}
    trainer_dir = root / name / TRAINER_DIR
    model, tokenizer = load_for_training(start, recipe.chat_template)
    model.config._name_or_path = start
    trainable = freeze_embeddings(model) if recipe.freeze_embeddings else sum(p.numel() for p in model.parameters())
    trainer = build_trainer(name, model, tokenizer, train, recipe, trainer_dir, save_every=min(*targets, RESUME_EVERY))
    exporter = _exporter(
        tokenizer, targets, {"stage": name, "steps": stage.steps, "start": str(start), **layout.provenance(root)}
    )
    trainer.add_callback(exporter)
    resume = get_last_checkpoint(str(trainer_dir)) if trainer_dir.is_dir() else None
    log(
        f"headstats finetune: {name}: {stage.steps} steps x {stage.batch_size} from {start}"
        + (f", resuming {Path(resume).name}" if resume else "")
    )
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume)
    seconds = time.perf_counter() - t0
    for step, path in targets.items():  # a resumed run that had passed a target before it stopped
        if not layout.is_complete(path):
            raise RuntimeError(f"{name}: checkpoint at step {step} was not written ({path})")
    shutil.rmtree(trainer_dir, ignore_errors=True)
    return {**_run_facts(trainer, result, exporter, seconds, trainable), "machine": machine_info(model.device)}
