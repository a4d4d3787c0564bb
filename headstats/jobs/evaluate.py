"""Log-likelihood multiple-choice evaluation: one row per question, batched, intervention-aware.

The numbers are lm-evaluation-harness's: each choice's log-likelihood is the sum of the log-softmax
(fp32) of its continuation tokens after the context, contexts and continuations tokenised by
lm-eval's rule (:mod:`headstats.io.tasks.formats`), too-long inputs cut from the left as lm-eval does.

Work is organised in *sequences*. When every choice of a question shares the context and differs
only in its last continuation token (MMLU's " A".." D"), one sequence (the context, plus whatever
continuation tokens the choices share) serves all choices: one forward pass per question, and only
the logits of the positions read are computed.
Otherwise (answer texts, WinoGrande's per-choice contexts) each (question, choice) is its own
sequence, and only the logits of its continuation positions are computed. Sequences are batched by
length with explicit position ids and attention masks, so results do not depend on the batch size
or the padding side.

Under an intervention, pass its probe (``probe=ablation.probe`` inside ``headstats.ablate_heads``):
each forward pass then runs through ``probe.forward`` with the questions' ``sample_key`` as sample keys
(the question id; for MMLU the index in the all-subjects test set, so subjects do not share draws), so
random zeroing draws depend on the question, never on the batch; ``n_zeroed`` is the number of
zeroed (layer, head) pairs of the question (the mean over its sequences when it has several).

Few-shot sequences that share a prefix (MMLU's header and dev shots, per subject) run it once
(``share_prefix``, on by default; :mod:`headstats.engine.prefix`): its keys and values are cached and
each sequence runs only its own tokens, through the same attention function, which gives the same
log-likelihoods (to fp32 round-off). This serves plain passes, the baseline and calibration passes
and static zeroing; dynamic and random zeroing decide heads from the whole sequence and keep full
forward passes (random is refused up front, dynamic falls back at its first disagreement).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import transformers.modeling_utils
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine.batching import Batch, PaddingSide
from headstats.engine.prefix import PrefixMismatch, PrefixRunner, SharedPrefix, continue_inputs
from headstats.engine.probe import ForwardRecord, Probe
from headstats.io.tasks import PromptFormat, PromptRenderer, Question, TaskSlice, load_task
from headstats.jobs.checkpoint import DoneBatch, PassCheckpoint, advance_restored
from headstats.jobs.sequences import (  # noqa: F401  (planning lives there; callers find it here too)
    ScoringSequence,
    format_for_model,
    model_max_length,
    model_name,
    model_sequences,
    plan_sequences,
)

# One question's answer under one intervention: the columns every per-question table shares.
ANSWER_COLUMNS = ("correct", "correct_norm", "gold_loglik", "pred", "n_choices", "n_zeroed")
RESULT_COLUMNS = ("task", "subject", "question_id", *ANSWER_COLUMNS)


@dataclass
class QuestionLogliks:
    """Every choice's log-likelihood of one question, and what the intervention did to it."""

    question: Question
    logliks: np.ndarray  # (n_choices,) float64
    n_zeroed: float
    n_sequences: int  # 1 when one forward pass served all choices

    @property
    def pred(self) -> int:
        return int(np.argmax(self.logliks))  # first maximum, as lm-eval's np.argmax

    @property
    def pred_norm(self) -> int:
        lengths = np.array([float(len(t)) for t in self.question.choice_texts])
        return int(np.argmax(self.logliks / lengths))


def _keeps_2d_positions(model: PreTrainedModel) -> bool:
    # transformers' slice_logits_to_keep accepts a (batch, positions) index tensor; older releases
    # sliced with a 1-D tensor only. The output shape is checked after the call as well.
    return hasattr(transformers.modeling_utils, "slice_logits_to_keep") and _accepts_logits_to_keep(model)


def _accepts_logits_to_keep(model: PreTrainedModel) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def _position_logits(
    model: PreTrainedModel, call: Callable[..., object], inputs: dict[str, torch.Tensor], positions: torch.Tensor
) -> torch.Tensor:
    """The logits at ``positions`` ((B, P) column indices) -> (B, P, V) in the model's dtype, computing
    as few as the model allows. ``call(inputs, **kwargs)`` runs the model (plainly or through a probe)."""
    b, p = positions.shape
    logits = None
    if _keeps_2d_positions(model):
        out = call(inputs, logits_to_keep=positions)
        if out.logits.shape[:2] == (b, p):
            logits = out.logits
    if logits is None and _accepts_logits_to_keep(model):
        columns = positions.unique(sorted=True)
        out = call(inputs, logits_to_keep=columns)
        if out.logits.shape[:2] == (b, columns.numel()):
            logits = out.logits.gather(
                1, torch.searchsorted(columns, positions)[..., None].expand(b, p, out.logits.shape[-1])
            )
    if logits is None:
        out = call(inputs)
        logits = out.logits.gather(1, positions[..., None].expand(b, p, out.logits.shape[-1]))
    return logits


def position_logprobs(
    model: PreTrainedModel, call: Callable[..., object], inputs: dict[str, torch.Tensor], positions: torch.Tensor
) -> torch.Tensor:
    """fp32 log-softmax at ``positions`` -> (B, P, V): whole rows, for readers that need more than
    the targets' log-probabilities (lm-eval's greedy check)."""
    return torch.log_softmax(_position_logits(model, call, inputs, positions).float(), dim=-1)


LSE_BLOCK = 8  # rows per fp32 block on a CPU: a few MB even for a 262k-entry vocabulary


def log_normalisers(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's largest logit and fp32 log-sum-exp of the logits minus it, for (N, V) logits: the
    log-probability of entry t is ``(rows[:, t] - peak) - log_sum``, subtracted in that order as
    log-softmax does (adding peak and log_sum first would round to the precision of large logits).
    On a CPU a few rows at a time, so that no (N, V) fp32 copy and no log-softmax table exist: for
    Gemma's 262k-entry vocabulary those cost more than the LM head (3.4x slower measured on 480 rows)."""
    if rows.device.type != "cpu":
        peak = rows.amax(dim=-1).float()
        return peak, (rows.float() - peak[:, None]).exp().sum(dim=-1).log()
    peak = torch.empty(rows.shape[0], dtype=torch.float32)
    log_sum = torch.empty(rows.shape[0], dtype=torch.float32)
    for start in range(0, rows.shape[0], LSE_BLOCK):
        block = rows[start : start + LSE_BLOCK].to(torch.float32, copy=True)
        top = block.amax(dim=-1, keepdim=True)
        peak[start : start + LSE_BLOCK] = top.squeeze(-1)
        log_sum[start : start + LSE_BLOCK] = block.sub_(top).exp_().sum(dim=-1).log_()
    return peak, log_sum


def question_logliks(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[Question],
    *,
    batch_size: int = 8,
    prompt_format: str | PromptFormat = "tokenizer",
    padding_side: PaddingSide = "right",
    one_pass_per_question: bool = True,
    probe: Probe | None = None,
    progress: bool = True,
    desc: str = "evaluating",
    share_prefix: bool = True,
    sequences: Sequence[ScoringSequence] | None = None,
    checkpoint: PassCheckpoint | None = None,
) -> list[QuestionLogliks]:
    """Each question's per-choice log-likelihoods (see :func:`evaluate` for the table).

    ``share_prefix`` runs a prefix shared by several sequences once (see the module docstring); the
    numbers are those of whole passes either way. ``sequences``: the questions' planned inputs
    (:func:`model_sequences` with the same format and ``one_pass_per_question``), when a caller that
    evaluates the same questions many times (a sweep) tokenised them once. ``checkpoint``
    (:class:`~headstats.jobs.checkpoint.PassCheckpoint`): batches it holds are taken from it instead of
    run, and batches run are added to it, so a pass stopped part way resumes where it stopped."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if not questions:
        raise ValueError("no questions to evaluate")
    if sequences is None:
        sequences = model_sequences(
            model, tokenizer, questions, prompt_format, one_pass_per_question=one_pass_per_question
        )
    tally = _Tally(questions, sequences)
    device = next(model.parameters()).device
    history = probe is not None and probe.keep_history  # a calibration pass: its records are kept too
    was_training = model.training
    model.eval()
    bar = tqdm(total=len(sequences), desc=desc, unit="seq", disable=not progress)
    runner = PrefixRunner(model, probe, enabled=share_prefix)
    restored_unshown = False  # restored sequences the bar has counted but not yet drawn
    try:
        with torch.inference_mode():
            for batch, prefix in runner.batches(
                [s.input_ids for s in sequences],
                batch_size,
                padding_side=padding_side,
                device=device,
                keep=[s.n_read for s in sequences],
                keys=[questions[s.question].sample_key for s in sequences],
            ):
                done = None if checkpoint is None else checkpoint.restore(batch.indices)
                if done is not None and (done.record is not None or not history):
                    tally.take(done)
                    if history:
                        probe.history.append(done.record)  # type: ignore[union-attr]  # as if it had run
                    advance_restored(bar, len(done.rows))
                    restored_unshown = True
                    continue
                if restored_unshown:  # drawn before the next batch's work, which may take minutes
                    bar.refresh()
                    restored_unshown = False
                rows = [sequences[i] for i in batch.indices]
                keys = [questions[s.question].sample_key for s in rows]
                try:
                    done = _run_batch(model, probe, prefix, batch, rows, keys, keep_record=history)
                except PrefixMismatch as error:
                    runner.fall_back(error)  # these rows come back as whole sequences
                    continue
                tally.take(done)
                if checkpoint is not None:
                    checkpoint.add(done)
                bar.update(len(rows))
    finally:
        bar.close()
        model.train(was_training)
        if checkpoint is not None:
            checkpoint.save()  # what finished survives an error or an interrupt
    return tally.results()


class _Tally:
    """Each question's per-choice log-likelihoods and zeroed-head counts, gathered from the finished
    batches of its sequences (one per question, or one per choice)."""

    def __init__(self, questions: Sequence[Question], sequences: Sequence[ScoringSequence]) -> None:
        self.questions, self.sequences = questions, sequences
        self.logliks = [np.zeros(q.n_choices, dtype=np.float64) for q in questions]
        self.zeroed = np.zeros(len(questions), dtype=np.float64)
        self.counts = np.zeros(len(questions), dtype=np.int64)

    def take(self, done: DoneBatch) -> None:
        for r, i in enumerate(done.rows):
            s = self.sequences[i]
            self.logliks[s.question][s.choices] = done.logliks[r]
            self.zeroed[s.question] += done.zeroed[r]
            self.counts[s.question] += 1

    def results(self) -> list[QuestionLogliks]:
        """Per question: its log-likelihoods, and heads zeroed averaged over its sequences."""
        return [
            QuestionLogliks(q, self.logliks[i], float(self.zeroed[i] / self.counts[i]), int(self.counts[i]))
            for i, q in enumerate(self.questions)
        ]


def _run_batch(
    model: PreTrainedModel,
    probe: Probe | None,
    prefix: SharedPrefix | None,
    batch: Batch,
    rows: Sequence[ScoringSequence],
    keys: list[int],
    *,
    keep_record: bool,
) -> DoneBatch:
    """One batch run (through ``probe`` where there is one, continuing ``prefix`` where one is shared):
    its rows' log-likelihoods and zeroed-head counts, and the probe's record when ``keep_record``.
    A :class:`~headstats.engine.prefix.PrefixMismatch` propagates, for the caller to fall back."""
    records: list[ForwardRecord] = []
    call = _plain_call(model, prefix) if probe is None else _probed_call(probe, keys, records, prefix)
    values = _batch_logliks(model, call, batch, rows)
    record = records[-1] if records else None
    kept = record if keep_record else None
    return DoneBatch(np.asarray(batch.indices, dtype=np.int64), values, _zero_counts(record, len(rows)), kept)


def _batch_logliks(
    model: PreTrainedModel, call: Callable[..., object], batch: Batch, rows: Sequence[ScoringSequence]
) -> list[np.ndarray]:
    """Each row's per-choice log-likelihoods (float64, in the order of its ``choices``) from one
    forward pass over ``batch``; only the rows' continuation positions get logits."""
    # The last real token of each row, whichever side the batch is padded on (suffix batches of
    # sliding-window models are always right-padded, see engine/prefix.py).
    mask = batch.attention_mask
    device = mask.device
    last = mask.shape[1] - 1 - mask.flip(-1).int().argmax(-1)
    n_read = max(s.n_read for s in rows)
    # Positions of each row's continuation, right-aligned on its last token; rows with fewer
    # continuation tokens repeat their first position (read, then ignored).
    offsets = torch.arange(n_read - 1, -1, -1, device=device)
    positions = (last[:, None] - offsets[None, :]).clamp_min(0)
    for r, s in enumerate(rows):
        positions[r, : n_read - s.n_read] = positions[r, n_read - s.n_read]
    logits = _position_logits(model, call, batch.model_inputs(), positions)
    out = []
    for r, s in enumerate(rows):
        row = logits[r, n_read - s.n_read :]  # (n_read, V): only this row's real positions
        peak, log_sum = log_normalisers(row)  # fp32, as the log-softmax of the row
        values = np.empty(len(s.choices), dtype=np.float64)
        for j, target in enumerate(s.targets):
            index = torch.as_tensor(target, device=row.device)[:, None]
            picked = (row.gather(1, index).squeeze(1).float() - peak) - log_sum
            values[j] = float(picked.sum().double())
        out.append(values)
    return out


# A call continuing a shared prefix builds its cache afresh each time (the model appends to it).
def _plain_call(model: PreTrainedModel, prefix: SharedPrefix | None = None) -> Callable[..., object]:
    if prefix is None:
        return lambda inputs, **kwargs: model(**inputs, use_cache=False, **kwargs)
    return lambda inputs, **kwargs: model(**continue_inputs(prefix, inputs), use_cache=True, **kwargs)


def _probed_call(
    probe: Probe, keys: list[int], records: list[ForwardRecord], prefix: SharedPrefix | None = None
) -> Callable[..., object]:
    def call(inputs: dict[str, torch.Tensor], **kwargs: object) -> object:
        if prefix is not None:
            inputs = continue_inputs(prefix, inputs)  # type: ignore[assignment]
            kwargs["prefix"] = prefix.stats
        output, record = probe.forward(inputs, keys, **kwargs)
        records.append(record)
        return output

    return call


def _zero_counts(record: ForwardRecord | None, rows: int) -> np.ndarray:
    """Zeroed (layer, head) pairs per row of a forward pass, 0 without an intervention."""
    mask = None if record is None else record.zero_mask
    if mask is None:
        return np.zeros(rows)
    return mask.reshape(mask.shape[0], -1).sum(-1).cpu().numpy().astype(np.float64)


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: str | TaskSlice,
    *,
    batch_size: int = 8,
    prompt_format: str = "tokenizer",
    padding_side: PaddingSide = "right",
    probe: Probe | None = None,
    progress: bool = True,
    share_prefix: bool = True,
    sequences: Sequence[ScoringSequence] | None = None,
    checkpoint: PassCheckpoint | None = None,
    desc: str | None = None,
) -> pd.DataFrame:
    """Evaluate ``model`` on a task (a registered name, or a :func:`headstats.io.tasks.load_task` slice).

    One row per question: ``task, subject`` (None without subjects), ``question_id`` (int64, index
    in the source split; MMLU: within the subject's test split), ``correct`` (bool), ``correct_norm``
    (pandas nullable boolean: length-normalised accuracy as lm-eval's acc_norm, NA where the task
    does not report it), ``gold_loglik`` (float64), ``pred`` (int16, chosen answer), ``n_choices``
    (int16), ``n_zeroed`` (float64, zeroed (layer, head) pairs; 0 without a ``probe``). With
    ``probe`` (e.g. ``ablation.probe`` of :func:`headstats.ablate_heads`) every pass runs through it.
    ``DataFrame.attrs["headstats"]`` records the task options and the resolved prompt format.
    ``share_prefix`` runs few-shot prefixes shared by several questions once (same numbers; see the
    module docstring). ``sequences``: the task's inputs already planned by :func:`model_sequences`
    (a sweep plans them once for all its passes). ``checkpoint``: resume a stopped pass from its
    finished batches (see :func:`question_logliks`). ``desc``: the progress bar's label (default:
    the task's name).
    """
    selected = task if isinstance(task, TaskSlice) else load_task(task)
    fmt = format_for_model(prompt_format, model, tokenizer)
    scores = question_logliks(
        model,
        tokenizer,
        selected.questions,
        batch_size=batch_size,
        prompt_format=fmt,
        padding_side=padding_side,
        probe=probe,
        progress=progress,
        desc=desc or selected.name,
        share_prefix=share_prefix,
        sequences=sequences,
        checkpoint=checkpoint,
    )
    frame = results_frame(scores, reports_norm=selected.task.reports_norm)
    renderer = PromptRenderer(fmt, tokenizer)
    first = renderer.requests(selected.questions[0])[0][0]
    frame.attrs["headstats"] = {
        "task": selected.name,
        "task_options": dict(selected.options),
        **fmt.provenance(),
        "first_token_is_bos": bool(first) and first[0] == tokenizer.bos_token_id,
        "n_sequences": int(sum(s.n_sequences for s in scores)),
    }
    return frame


def results_frame(scores: Sequence[QuestionLogliks], *, reports_norm: bool) -> pd.DataFrame:
    """The per-question table of :func:`evaluate` from scored questions (:data:`RESULT_COLUMNS`,
    then ``document`` where the task's questions come from source documents)."""
    preds = np.array([s.pred for s in scores], dtype=np.int16)
    gold = np.array([s.question.gold for s in scores], dtype=np.int16)
    if reports_norm:
        norm = pd.array([s.pred_norm == s.question.gold for s in scores], dtype="boolean")
    else:
        norm = pd.array([None] * len(scores), dtype="boolean")
    frame = pd.DataFrame(
        {
            "task": [s.question.task for s in scores],
            "subject": pd.Series([s.question.subject for s in scores], dtype=object),
            "question_id": np.array([s.question.question_id for s in scores], dtype=np.int64),
            "correct": preds == gold,
            "correct_norm": norm,
            "gold_loglik": np.array([s.logliks[s.question.gold] for s in scores], dtype=np.float64),
            "pred": preds,
            "n_choices": np.array([s.question.n_choices for s in scores], dtype=np.int16),
            "n_zeroed": np.array([s.n_zeroed for s in scores], dtype=np.float64),
        },
        columns=list(RESULT_COLUMNS),
    )
    if any(s.question.document is not None for s in scores):
        frame["document"] = pd.Series([s.question.document for s in scores], dtype=object)
    return frame
