"""Did a stage learn? Its learning metrics, measured on held-out examples the trainers never see.

Each stage has its own metric (:func:`measure_stage`): SFT the held-out answer loss, DPO the implicit
reward margin against the stage's starting weights and the preference accuracy, GRPO the verifiable
reward of greedy and of sampled completions. Every value is a mean with a bootstrap interval over
examples or a share with a Wilson interval (:mod:`headstats.stats.learning`), kept with its per-example
values so that :func:`headstats.stats.learning.learning_verdicts` can pair a stage's start and end.
Everything runs in the chain's chat format, with PyTorch's SDPA attention.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch

from headstats.jobs import finetune_data as fd
from headstats.jobs.finetune.recipe import Recipe
from headstats.stats.learning import mean_interval, proportion

LOGPROB_BATCH = 8  # sequences per forward pass of the log-probability metrics


def autocast(enabled: bool, device: torch.device):
    """bf16 autocast on ``device`` when ``enabled``, else nothing."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def _render(tokenizer, messages: list[dict], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def completion_ids(
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


def _batch(chunk: list[tuple[list[int], int, int]], pad: int) -> dict[str, torch.Tensor]:
    """Padded ids, attention mask and the masks of every completion token and of its content."""
    width = max(len(ids) for ids, _, _ in chunk)
    ids = torch.full((len(chunk), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    every, content = torch.zeros_like(ids, dtype=torch.bool), torch.zeros_like(ids, dtype=torch.bool)
    for i, (seq, begin, content_end) in enumerate(chunk):
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        every[i, begin : len(seq)] = True
        content[i, begin:content_end] = True
    return {"ids": ids, "mask": mask, "all": every, "content": content}


@torch.no_grad()
def logprob_sums(model, tokenizer, prompts, completions, *, max_length: int, bf16: bool) -> dict[str, np.ndarray]:
    """Per example: the summed log-probabilities and counts of all completion tokens (``all``,
    ``n_all``) and of its content (``content``, ``n_content``)."""
    model.eval()
    device = next(model.parameters()).device
    encoded = [completion_ids(tokenizer, p, c, max_length) for p, c in zip(prompts, completions, strict=True)]
    n = len(encoded)
    out = {k: np.zeros(n) for k in ("all", "content")} | {f"n_{k}": np.zeros(n, np.int64) for k in ("all", "content")}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, n, LOGPROB_BATCH):
        batch = _batch(encoded[start : start + LOGPROB_BATCH], pad)
        ids = batch["ids"].to(device)
        with autocast(bf16, device):
            logits = model(input_ids=ids, attention_mask=batch["mask"].to(device)).logits[:, :-1].float()
        # position t predicts token t + 1; log p = logit - logsumexp (no full log-softmax over the vocabulary)
        tok = logits.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        rows = slice(start, start + len(ids))
        for name in ("all", "content"):
            keep = batch[name][:, 1:].to(device)
            out[name][rows] = (tok * keep).sum(1).cpu().numpy()
            out[f"n_{name}"][rows] = keep.sum(1).cpu().numpy()
    return out


def completion_logprobs(
    model,
    tokenizer,
    prompts: Sequence[list[dict]],
    completions: Sequence[list[dict]],
    *,
    max_length: int = 256,
    bf16: bool = False,
    content_only: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Sum of the completion tokens' log-probabilities given the prompt, and their number, per example
    (``content_only``: the answer's own tokens, without the end-of-turn marker the template adds)."""
    sums = logprob_sums(model, tokenizer, prompts, completions, max_length=max_length, bf16=bf16)
    key = "content" if content_only else "all"
    return sums[key], sums[f"n_{key}"]


def sft_losses(model, tokenizer, examples, *, max_length: int = 256, bf16: bool = False, seed: int = 0) -> dict:
    """Held-out SFT loss: mean negative log-likelihood per token of the answer (``answer_loss``: its own
    tokens; ``completion_loss``: with the end-of-turn marker, which a base model has never produced and
    learns first), in the chat format, with bootstrap intervals over questions."""
    sums = logprob_sums(model, tokenizer, examples["prompt"], examples["completion"], max_length=max_length, bf16=bf16)
    out, per_example = {}, {}
    for name, key in (("answer_loss", "content"), ("completion_loss", "all")):
        counts = sums[f"n_{key}"]
        losses = -sums[key] / np.maximum(counts, 1)
        out[name] = mean_interval(losses, counts, seed=seed)
        per_example[name], per_example[f"{name}_tokens"] = losses.tolist(), counts.tolist()
    return {**out, "per_example": per_example}


def reference_logps(model, tokenizer, pairs, *, max_length: int = 256, bf16: bool = False) -> tuple[np.ndarray, ...]:
    """Log-probabilities of the chosen and the rejected answers of ``pairs`` (DPO's reference)."""
    return tuple(
        completion_logprobs(model, tokenizer, pairs["prompt"], pairs[side], max_length=max_length, bf16=bf16)[0]
        for side in ("chosen", "rejected")
    )


def preference_metrics(
    model,
    ref_logps: tuple[np.ndarray, ...],
    tokenizer,
    pairs,
    *,
    beta: float,
    max_length: int = 256,
    bf16: bool = False,
    seed: int = 0,
) -> dict:
    """DPO evidence on held-out pairs: the implicit reward margin ``beta * ((log pi - log ref)(chosen)
    - (log pi - log ref)(rejected))`` (mean, bootstrap interval), the preference accuracy (share of
    pairs with margin > 0, Wilson interval), and the plain likelihood preference (share of pairs whose
    chosen answer is more likely than the rejected one, which is comparable before and after)."""
    chosen, rejected = reference_logps(model, tokenizer, pairs, max_length=max_length, bf16=bf16)
    margin = beta * ((chosen - ref_logps[0]) - (rejected - ref_logps[1]))
    prefers = (chosen > rejected).astype(float)
    return {
        "reward_margin": mean_interval(margin, seed=seed),
        "preference_accuracy": proportion(int((margin > 0).sum()), len(margin)),
        "likelihood_preference": proportion(int(prefers.sum()), len(chosen)),
        "per_example": {"reward_margin": margin.tolist(), "likelihood_preference": prefers.tolist()},
    }


@torch.no_grad()
def generate(model, tokenizer, prompts, *, max_new_tokens: int, bf16: bool, samples: int = 0, temperature=1.0):
    """Completions of chat prompts: greedy (``samples`` = 0, one per prompt) or ``samples`` sampled
    ones per prompt at ``temperature`` (returned prompt-major)."""
    device = next(model.parameters()).device
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tokenizer(texts, add_special_tokens=False, return_tensors="pt", padding=True).to(device)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if samples else {}
    with autocast(bf16, device):
        out = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            num_return_sequences=max(samples, 1),
            **(sampling or {"do_sample": False}),
        )
    return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def _rewards(model, tokenizer, rows: dict, kinds: list[str], samples: int, **generation) -> tuple[list, list]:
    """One batch of problems: the greedy completion's reward and the mean reward of ``samples`` drawn
    completions, per problem."""
    answers = generate(model, tokenizer, rows["prompt"], **generation)
    greedy = [fd.reward(k, a, gold) for k, a, gold in zip(kinds, answers, rows["answer"], strict=True)]
    if not samples:
        return greedy, []
    drawn = generate(model, tokenizer, rows["prompt"], samples=samples, **generation)
    sampled = [
        float(np.mean([fd.reward(k, a, gold) for a in drawn[i * samples : (i + 1) * samples]]))
        for i, (k, gold) in enumerate(zip(kinds, rows["answer"], strict=True))
    ]
    return greedy, sampled


@torch.no_grad()
def verifiable_rewards(
    model,
    tokenizer,
    problems,
    *,
    max_new_tokens: int = 8,
    batch_size: int = 16,
    bf16: bool = False,
    samples: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict:
    """GRPO's held-out evidence: ``accuracy``, the share of problems whose greedy completion earns the
    full reward (Wilson interval), ``greedy_reward``, its mean reward (partial credit included), and
    ``sampled_reward``, the mean reward of ``samples`` completions per problem drawn as GRPO draws them
    (bootstrap intervals over problems), with each per problem."""
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    kinds = problems["reward_kind"] if "reward_kind" in problems.column_names else ["exact_number"] * len(problems)
    greedy, sampled = [], []
    torch.manual_seed(seed)
    try:
        for start in range(0, len(problems), batch_size):
            rows, kind = problems[start : start + batch_size], kinds[start : start + batch_size]
            got = _rewards(
                model, tokenizer, rows, kind, samples, max_new_tokens=max_new_tokens, bf16=bf16, temperature=temperature
            )
            greedy, sampled = greedy + got[0], sampled + got[1]
    finally:
        tokenizer.padding_side = side
    exact = [float(r == 1.0) for r in greedy]
    out = {
        "accuracy": proportion(int(sum(exact)), len(exact)),
        "greedy_reward": mean_interval(np.asarray(greedy), seed=seed),
        "per_example": {"accuracy": exact, "greedy_reward": greedy},
    }
    if samples:
        out["sampled_reward"] = mean_interval(np.asarray(sampled), seed=seed)
        out["per_example"]["sampled_reward"] = sampled
    return out


def measure_stage(name: str, model, tokenizer, held_out, recipe: Recipe, ref_logps=None) -> dict:
    """The stage's learning metric(s) on held-out examples (DPO: against the stage's starting weights,
    whose log-probabilities ``ref_logps`` are)."""
    stage = recipe.stage(name)
    if name == "sft":
        return sft_losses(model, tokenizer, held_out, max_length=stage.max_length, bf16=recipe.bf16)
    if name == "dpo":
        return preference_metrics(
            model, ref_logps, tokenizer, held_out, beta=stage.beta, max_length=stage.max_length, bf16=recipe.bf16
        )
    return verifiable_rewards(
        model,
        tokenizer,
        held_out,
        max_new_tokens=stage.max_completion_length,
        bf16=recipe.bf16,
        samples=stage.num_generations,
        temperature=stage.temperature,
        seed=recipe.seed,
    )
