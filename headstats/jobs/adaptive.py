"""Heads chosen per prompt, measured: what each selection of heads to skip keeps of a task's answers
(docs/guides/skipping.md).

An item is a prompt and its continuations: a multiple-choice question (PIQA's goal and solutions,
HellaSwag's context and endings) or a passage cut in two (its first ``prompt_tokens`` as the prompt,
the next ``continuation_tokens`` scored). The prompt runs once with every head and is scored in the
same pass (:func:`headstats.engine.skip.score_prompt`); each selection then chooses the same number of
heads (``round(share x heads)``), which are zeroed at the continuation's positions only, what
:func:`headstats.engine.skip.skipping` computes without them (tests/test_skip.py):

- ``per-prompt``: the heads that look most inactive on this prompt, by the score;
- ``static``: the heads that look most inactive on average over the calibration items (disjoint from
  the measured ones: a seeded sample, with every item of its source documents, held out);
- ``random``: heads drawn per prompt (seeded by the item);
- ``oracle``: the heads that look most inactive on the whole text, continuation included: it sees
  what it is judged on, an upper bound, not a method.

One row per (item, selection, share): the answer's correctness (``correct``, ``correct_norm``) or the
continuation's mean loss per token (``loss``), and how many of the per-prompt heads the static set
also holds (``overlap_static``). Rows go to the results folder in chunks (:func:`run_items`), so a
stopped run resumes at its last finished chunk.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine.probe import Probe
from headstats.engine.pruned_model import geometry
from headstats.engine.skip import score_prompt, select_heads
from headstats.engine.zeroing import ablate_heads
from headstats.io import store
from headstats.io.tasks import load_task
from headstats.io.tasks.collection import collection_source
from headstats.io.tasks.formats import PromptRenderer, resolve_format
from headstats.jobs.evaluate import log_normalisers

logger = logging.getLogger("headstats")

SELECTIONS = ("per-prompt", "static", "random", "oracle")
FULL = "full"
TEXT_TASKS = ("wikipedia", "books")
LOGIT_BUDGET = 40_000_000  # logits computed at once (rows x positions x vocabulary): ~160 MB in fp32


@dataclass(frozen=True)
class Item:
    """One prompt and its continuations (token ids); ``gold`` is the right choice (None: a passage,
    scored by loss), ``lengths`` the choices' lengths in characters (for ``correct_norm``), ``cluster``
    its source document (items of one document are resampled together)."""

    key: int
    cluster: str
    prompt: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    gold: int | None = None
    lengths: tuple[int, ...] = ()


def question_items(questions: Sequence, renderer: PromptRenderer) -> list[Item]:
    """Items of multiple-choice questions whose choices share one context (PIQA, HellaSwag, ARC)."""
    items = []
    for q in questions:
        pairs = renderer.requests(q)
        contexts = {tuple(ctx) for ctx, _ in pairs}
        if len(contexts) != 1:
            raise ValueError(f"{q.task}: choices with different contexts have no one prompt to decide from")
        cluster = q.document if q.document is not None else f"{q.task}-{q.question_id}"
        lengths = tuple(len(t) for t in q.choice_texts)
        items.append(
            Item(q.sample_key, cluster, tuple(pairs[0][0]), tuple(tuple(c) for _, c in pairs), q.gold, lengths)
        )
    return items


def task_items(
    task: str,
    tokenizer: PreTrainedTokenizerBase,
    *,
    limit: int,
    calibration_limit: int,
    seed: int,
    model_name: str = "",
    prompt_tokens: int = 64,
    continuation_tokens: int = 32,
) -> tuple[list[Item], list[Item]]:
    """(measured items, calibration items) of ``task``: the calibration items are the seeded sample of
    ``calibration_limit``; the measured ones a seeded sample of ``limit`` from the rest, which holds no
    calibration item and nothing of their source documents."""
    renderer = PromptRenderer(resolve_format("tokenizer", tokenizer, model_name=model_name), tokenizer)
    if task in TEXT_TASKS:
        return passage_items(task, renderer, limit, calibration_limit, seed, prompt_tokens, continuation_tokens)
    calibration = load_task(task, limit=calibration_limit, sample="random", seed=seed)
    measured = load_task(
        task, limit=limit, sample="random", seed=seed + 1, exclude_limit=calibration_limit, exclude_seed=seed
    )
    return question_items(measured.questions, renderer), question_items(calibration.questions, renderer)


def passage_items(
    name: str, renderer: PromptRenderer, limit: int, calibration_limit: int, seed: int, prompt: int, continuation: int
) -> tuple[list[Item], list[Item]]:
    """Passages at least ``prompt + continuation`` tokens long, cut there; a seeded permutation's first
    ``calibration_limit`` calibrate, the next ``limit`` are measured (each passage its own cluster)."""
    source = collection_source(name)
    long_enough = []
    for sample_id, ids in source.iter_sequences(renderer.tokenizer):
        if len(ids) >= prompt + continuation:
            ids = ids[: prompt + continuation]
            long_enough.append(Item(sample_id, f"{name}-{sample_id}", tuple(ids[:prompt]), (tuple(ids[prompt:]),)))
    order = torch.randperm(len(long_enough), generator=torch.Generator().manual_seed(seed)).tolist()
    if calibration_limit + limit > len(order):
        raise ValueError(
            f"{name} has {len(order)} passages of at least {prompt + continuation} tokens: "
            f"{calibration_limit} to calibrate and {limit} to measure need {calibration_limit + limit}; give fewer"
        )
    picked = [long_enough[i] for i in order[: calibration_limit + limit]]
    calibration, measured = picked[:calibration_limit], picked[calibration_limit:]
    return sorted(measured, key=lambda it: it.key), sorted(calibration, key=lambda it: it.key)


def calibration_means(model: PreTrainedModel, items: Sequence[Item], score: str) -> torch.Tensor:
    """Each head's mean score over the calibration items' prompts, (layers, heads)."""
    total = None
    with torch.no_grad():
        for item in items:
            values = score_prompt(model, {"input_ids": torch.tensor([item.prompt])}, score).scores
            total = values if total is None else total + values
    assert total is not None
    return total / len(items)


def static_sets(means: torch.Tensor, shares: Sequence[float], score: str, unit: str, kv: int) -> dict:
    return {share: select_heads(means, share, score=score, unit=unit, kv_heads=kv) for share in shares}


def _mask(heads: Sequence[tuple[int, int]], shape: tuple[int, int]) -> torch.Tensor:
    mask = torch.zeros(shape, dtype=torch.bool)
    for layer, head in heads:
        mask[layer, head] = True
    return mask


def oracle_scores(model: PreTrainedModel, item: Item, score: str) -> torch.Tensor:
    """Each choice's head scores on its whole text (prompt and continuation), (choices, layers, heads)."""
    texts = [list(item.prompt) + list(c) for c in item.continuations]
    width = max(map(len, texts))
    ids = torch.tensor([t + [0] * (width - len(t)) for t in texts])
    mask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in texts])
    with torch.no_grad(), Probe(model, (score,)) as probe:
        _, record = probe.forward({"input_ids": ids, "attention_mask": mask}, body=True)
    return record.scores[score].float()


def continuation_logprobs(
    model: PreTrainedModel, item: Item, cache: object, first: torch.Tensor, masks: torch.Tensor, choices: Sequence[int]
) -> torch.Tensor:
    """Per row, the summed log-probability of its choice's continuation after the prompt's ``cache``,
    the heads of its (layers, heads) mask zeroed at the continuation's positions; the first token's
    comes from the prompt's last position (``first``: its log-softmax), where every head ran."""
    conts = [item.continuations[c] for c in choices]
    width = max(map(len, conts))
    vocab = first.shape[-1]
    rows_at_once = max(1, LOGIT_BUDGET // (width * vocab))
    out = []
    for start in range(0, len(conts), rows_at_once):
        part, part_masks = conts[start : start + rows_at_once], masks[start : start + rows_at_once]
        n = len(part)
        ids = torch.tensor([list(c) + [0] * (width - len(c)) for c in part])
        attention = torch.ones(n, len(item.prompt) + width, dtype=torch.long)
        for r, c in enumerate(part):
            attention[r, len(item.prompt) + len(c) :] = 0
        batch_cache = copy.deepcopy(cache)
        batch_cache.batch_repeat_interleave(n)
        with ablate_heads(model, mask=part_masks):
            logits = model(input_ids=ids, attention_mask=attention, cache=batch_cache, use_cache=True).logits
        for r, c in enumerate(part):
            later = 0.0
            if len(c) > 1:  # no log-softmax table: each row's normaliser, as the evaluator reads answers
                row = logits[r, : len(c) - 1]
                peak, log_sum = log_normalisers(row)
                picked = row.gather(1, torch.tensor(c[1:]).unsqueeze(-1)).squeeze(1).float()
                later = float(((picked - peak) - log_sum).double().sum())
            out.append(float(first[c[0]]) + later)
    return torch.tensor(out, dtype=torch.float64)


@dataclass(frozen=True)
class Design:
    """What one model's measurement needs beside its items."""

    score: str
    shares: tuple[float, ...]
    unit: str
    seed: int
    static: dict  # share -> the static selection's heads


def item_rows(model: PreTrainedModel, item: Item, design: Design) -> list[dict]:
    """The rows of one item: the full model's answer, and each selection's at each share."""
    layers, heads, kv, _ = geometry(model)
    shape = (layers, heads)
    with torch.no_grad():
        decision = score_prompt(model, {"input_ids": torch.tensor([item.prompt])}, design.score)
        first = torch.log_softmax(decision.output.logits[0, -1].float(), dim=-1)
        oracle = oracle_scores(model, item, design.score)
    draws = torch.rand(shape, generator=torch.Generator().manual_seed(design.seed * 1_000_003 + item.key))
    n_choices = len(item.continuations)
    plans: list[tuple[str, float, int, torch.Tensor]] = []
    for c in range(n_choices):
        plans.append((FULL, 0.0, c, torch.zeros(shape, dtype=torch.bool)))
    overlap = {}
    for share in design.shares:
        prompt_heads = select_heads(decision.scores, share, score=design.score, unit=design.unit, kv_heads=kv)
        static = design.static[share]
        overlap[share] = len(set(prompt_heads) & set(static)) / len(static) if static else 1.0
        chosen = {
            "per-prompt": prompt_heads,
            "static": static,
            "random": select_heads(draws, share, score="random", unit=design.unit, kv_heads=kv),
        }
        for c in range(n_choices):
            for name in ("per-prompt", "static", "random"):
                plans.append((name, share, c, _mask(chosen[name], shape)))
            seen = select_heads(oracle[c], share, score=design.score, unit=design.unit, kv_heads=kv)
            plans.append(("oracle", share, c, _mask(seen, shape)))
    masks = torch.stack([p[3] for p in plans])
    with torch.no_grad():
        logprobs = continuation_logprobs(
            model, item, decision.output.past_key_values, first, masks, [p[2] for p in plans]
        )
    return _answers(item, plans, logprobs, overlap)


def _answers(item: Item, plans: list, logprobs: torch.Tensor, overlap: dict) -> list[dict]:
    by_cell: dict[tuple[str, float], dict[int, float]] = {}
    for (name, share, choice, _), value in zip(plans, logprobs.tolist(), strict=True):
        by_cell.setdefault((name, share), {})[choice] = value
    rows = []
    for (name, share), values in by_cell.items():
        row = {"item": item.key, "cluster": item.cluster, "selection": name, "share": share}
        if item.gold is None:
            row["loss"] = -values[0] / len(item.continuations[0])
        else:
            scores = [values[c] for c in range(len(values))]
            normed = [s / max(n, 1) for s, n in zip(scores, item.lengths, strict=True)]
            row["correct"] = int(max(range(len(scores)), key=scores.__getitem__) == item.gold)
            row["correct_norm"] = int(max(range(len(normed)), key=normed.__getitem__) == item.gold)
        row["overlap_static"] = overlap.get(share, 1.0)
        rows.append(row)
    return rows


def chunks(items: Sequence[Item], size: int) -> Iterator[tuple[int, Sequence[Item]]]:
    for start in range(0, len(items), size):
        yield start, items[start : start + size]


def run_items(
    model: PreTrainedModel, items: Sequence[Item], design: Design, folder, *, chunk: int = 25, progress=None
) -> pd.DataFrame:
    """Every item's rows, measured chunk by chunk into ``folder`` (a finished chunk is not measured
    again), then read back whole."""
    for start, part in chunks(items, chunk):
        path = store.adaptive_chunk(folder, start)
        if path.is_file():
            continue
        rows = [row for item in part for row in item_rows(model, item, design)]
        store.write_csv_atomic(pd.DataFrame(rows), path)
        if progress is not None:
            progress(start + len(part), len(items))
    return store.read_adaptive_chunks(folder)


def json_heads(static: dict) -> dict:
    """The static sets as JSON reads them back: share -> [[layer, head], ...]."""
    return {str(share): [list(h) for h in heads] for share, heads in static.items()}


def run_task(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    model_name: str,
    task: str,
    limit: int,
    settings,
    results,
    *,
    progress=None,
) -> pd.DataFrame:
    """One model's rows on one task (``settings``: the study's [adaptive] table), resumed from its
    finished chunks; the static selection's heads and the calibration items are recorded beside them."""
    folder = store.adaptive_folder(results, model_name, task)
    items, calibration = task_items(
        task,
        tokenizer,
        limit=limit,
        calibration_limit=settings.calibration_limit,
        seed=settings.seed,
        model_name=model_name,
        prompt_tokens=settings.prompt_tokens,
        continuation_tokens=settings.continuation_tokens,
    )
    overlap = {it.cluster for it in items} & {it.cluster for it in calibration}
    if overlap:
        raise RuntimeError(f"{task}: {len(overlap)} source documents are both calibrated on and measured")
    _, _, kv, _ = geometry(model)
    means = calibration_means(model, calibration, settings.score)
    static = static_sets(means, settings.shares, settings.score, settings.unit, kv)
    record = {
        "calibration_items": [it.key for it in calibration],
        "measured_items": [it.key for it in items],
        "static_heads": json_heads(static),
        "calibration_means": means.tolist(),
    }
    folder.mkdir(parents=True, exist_ok=True)
    recorded = folder / "calibration.json"
    if recorded.is_file():
        before = store.read_json_object(recorded, f"remove {folder} to measure again")
        if before["measured_items"] != record["measured_items"] or before["static_heads"] != json_heads(static):
            raise RuntimeError(
                f"{folder} was measured with other items or another static set: its settings changed since; "
                "give the study another results folder, or remove this one to measure again"
            )
    else:
        store.write_json_atomic(record, recorded)
    design = Design(settings.score, tuple(settings.shares), settings.unit, settings.seed, static)
    return run_items(model, items, design, folder, chunk=8, progress=progress)
