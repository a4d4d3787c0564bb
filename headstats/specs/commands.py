"""The specs of the single commands, each a flat composition of option groups: collect, ablate,
summary, report, paper, list, compare, inactive, and the lm-eval model's zeroing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headstats.engine import scores as S
from headstats.options import Spec, SpecError, compose, option
from headstats.specs.groups import (
    AccuracyMetric,
    Batching,
    Calibration,
    Datasets,
    Equivalence,
    Figures,
    LoadOptions,
    Models,
    Output,
    OutputFormat,
    Progress,
    Prompting,
    Questions,
    Results,
    Sampling,
    ScoredZeroing,
    Scoring,
    Seed,
    Shares,
    Truncation,
)
from headstats.specs.values import (
    ATTENTION_KERNELS,
    DATA,
    DEFAULT_SWEEP_SCORES,
    DEFAULT_TARGETS,
    OUTPUT,
    RESOURCES,
    STATISTICS,
    SUMMARY_TABLES,
    WHAT_TO_RUN,
    ZEROING,
    check_format_change,
    check_fraction,
    check_score_id,
    dataset_names,
    head_pairs,
    rank_metrics,
    score_ids,
)


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
        each=check_fraction,
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
        choices=rank_metrics,
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
    rates: tuple[float, ...] = option(
        (0.05, 0.10, 0.20), "selection rates of the score-overlap table", each=check_fraction
    )
    figure_scores: tuple[str, ...] = option(
        ("awft", "ahon_ln"),
        "scores drawn in the per-dataset figures",
        choices=score_ids,
        noun="score id",
        each=check_score_id,
        group=OUTPUT,
    )


@compose(Figures, Progress, defaults={"dpi": 80})
class PaperSpec(Spec):
    """Options of :func:`headstats.report.paper.write_paper`."""

    WHAT: ClassVar[str] = "paper"


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
        choices=dataset_names,
        strict=False,
        metavar="NAMES",
    )
    format_change: str = option(
        "auto",
        "the other prompt format of the margin's yardstick: auto = chat when the reference has a chat template "
        "(plain when the comparison already uses chat), else plain (or bos when the comparison uses plain)",
        each=check_format_change,
    )
    rate: float = option(
        0.1, "share of heads a score selects as inactive for the overlap of inactive sets", each=check_fraction
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
