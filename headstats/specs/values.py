"""What an option may hold: the fixed choices and defaults, the names the registries hold, the
sections of ``--help``, and the checks of one value, shared by every spec."""

from __future__ import annotations

from pathlib import Path

from headstats.engine import scores as S
from headstats.names import canonical_name

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


def score_ids() -> tuple[str, ...]:
    """The registered score ids (:data:`headstats.engine.scores.SCORES`)."""
    return tuple(S.SCORES)


def task_names() -> tuple[str, ...]:
    """The registered tasks (:data:`headstats.io.tasks.TASKS`)."""
    from headstats.io.tasks import TASKS

    return tuple(TASKS)


def dataset_names() -> tuple[str, ...]:
    """The built-in collection datasets (:data:`headstats.io.tasks.COLLECTION_DATASETS`)."""
    from headstats.io.tasks import COLLECTION_DATASETS

    return tuple(COLLECTION_DATASETS)


def prompt_formats() -> tuple[str, ...]:
    """The prompt formats (:data:`headstats.io.tasks.PROMPT_FORMATS`)."""
    from headstats.io.tasks import PROMPT_FORMATS

    return tuple(PROMPT_FORMATS)


def sample_methods() -> tuple[str, ...]:
    """How ``limit`` takes documents or questions (:data:`headstats.io.tasks.SAMPLE_METHODS`)."""
    from headstats.io.tasks import SAMPLE_METHODS

    return tuple(SAMPLE_METHODS)


def rank_metrics() -> tuple[str, ...]:
    """The curve areas that rank score functions (:data:`headstats.stats.RANK_METRICS`)."""
    from headstats.stats import RANK_METRICS

    return tuple(RANK_METRICS)


def check_score_id(score_id: str) -> None:
    """Refuse anything but a registered score id ('baseline' is always run, never listed)."""
    if score_id == "baseline":
        raise ValueError("'baseline' is always run; list only score ids")
    S.get_score(score_id)


def check_calibration_source(value: str) -> None:
    """What ``calibration`` names exists: eval, a folder, a file, a collection dataset or a Hub dataset."""
    builtin = canonical_name(value, dataset_names()) in dataset_names()
    if value == "eval" or builtin or value.startswith("hf:") or Path(value).expanduser().exists():
        return
    raise ValueError(
        f"unknown calibration {value!r}: give eval (the scores of the evaluation prompts themselves, the study's "
        "choice), a folder of score tables written by headstats collect, or a collection dataset "
        f"({', '.join(dataset_names())}, or a .jsonl/.parquet/.txt file)"
    )


def check_fraction(value: float) -> None:
    """Refuse a fraction of heads outside [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"target fraction {value:g} is outside [0, 1]: give a fraction (0.1 = 10% of heads)")


DROP_POINTS = (0.1, 50.0)  # a tolerated accuracy drop, in points: below, a fraction given by mistake


def check_drop_points(value: float) -> None:
    """Refuse an accuracy drop outside :data:`DROP_POINTS` (a fraction given for points, most often)."""
    low, high = DROP_POINTS
    if not low <= value <= high:
        raise ValueError(
            f"an accuracy drop is in points (1 = one point of accuracy), between {low:g} and {high:g}, not {value:g}"
            + (f"; for the fraction {value:g}, give {100 * value:g}" if 0 < value < low else "")
        )


def check_unit_interval(value: float) -> None:
    """Refuse a confidence outside (0, 1)."""
    if not 0.0 < value < 1.0:
        raise ValueError(f"a confidence lies strictly between 0 and 1, not {value:g}")


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


def check_format_change(value: str) -> None:
    """Refuse a prompt format other than auto or a registered one."""
    if value != "auto" and value not in prompt_formats():
        raise ValueError(f"unknown prompt format {value!r}: choose auto or one of {', '.join(prompt_formats())}")
