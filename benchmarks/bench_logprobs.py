"""Reading the continuation log-probabilities: blockwise fp32 normalisers vs a whole fp32 log-softmax.

    python benchmarks/bench_logprobs.py [--models smollm2-135m,gemma3-270m] [--task piqa] [--limit 100]
                                        [--dtypes bfloat16,float32] [--batch-size 16] [--repeats 2]

The evaluator (``question_logliks``, the un-zeroed baseline of a sweep) reads each choice's
continuation tokens from the LM head's logits. ``blockwise`` is what it does: per row of a batch,
only that row's continuation positions, the largest logit and the fp32 log-sum-exp a few positions
at a time (``_log_normalisers``). ``log-softmax`` is what it did before (and what lm-eval's HFLM
does): an fp32 log-softmax over the whole (batch, positions, vocabulary) block, padding positions
included. Both run in this process, interleaved repeat by repeat; the median repeat is printed with
the largest |delta log-likelihood| between them. Gemma-3's 262k-entry vocabulary is where this
matters; SmolLM2's is 49k. Run nothing else meanwhile (see bench_bf16_sweep.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import numpy as np
import torch

import headstats.jobs.evaluate as ev
from headstats import load_model
from headstats.io.tasks import load_task

POSITION_LOGITS, LOG_NORMALISERS = ev._position_logits, ev._log_normalisers


@contextmanager
def whole_log_softmax() -> Iterator[None]:
    """The former reading, exactly: the fp32 log-softmax of the whole (batch, positions, vocabulary)
    block is what the evaluator reads log-probabilities from (its normalisers then are 0)."""

    def table(*args: object) -> torch.Tensor:
        return torch.log_softmax(POSITION_LOGITS(*args).float(), dim=-1)

    def zero(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(rows.shape[0]), torch.zeros(rows.shape[0])

    ev._position_logits, ev._log_normalisers = table, zero
    try:
        yield
    finally:
        ev._position_logits, ev._log_normalisers = POSITION_LOGITS, LOG_NORMALISERS


def timed(model, tok, questions, batch_size: int) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = ev.question_logliks(model, tok, questions, batch_size=batch_size, progress=False)
    return time.perf_counter() - start, np.concatenate([q.logliks for q in out])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--task", default="piqa")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    questions = load_task(args.task, limit=args.limit).questions
    variants = {"blockwise": nullcontext, "log-softmax": whole_log_softmax}
    threads = torch.get_num_threads()
    print(f"{args.task}: {len(questions)} sampled questions, batch {args.batch_size}, {threads} threads")
    print(f"{'model':>14} {'dtype':>9} {'blockwise s':>12} {'log-softmax s':>14} {'speed-up':>9} {'max |dLL|':>10}")
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            model, tok = load_model(name, dtype=dtype, device="cpu")
            seconds: dict[str, list[float]] = {v: [] for v in variants}
            values: dict[str, np.ndarray] = {}
            for _ in range(args.repeats):
                for variant, patch in variants.items():
                    with patch():
                        s, values[variant] = timed(model, tok, questions, args.batch_size)
                    seconds[variant].append(s)
            fast, slow = (statistics.median(seconds[v]) for v in variants)
            delta = float(np.abs(values["blockwise"] - values["log-softmax"]).max())
            print(f"{name:>14} {dtype:>9} {fast:12.2f} {slow:14.2f} {slow / fast:8.2f}x {delta:10.2e}")
            del model


if __name__ == "__main__":
    main()
