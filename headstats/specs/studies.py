"""The sections of study files (analysis, confirmation, frontier) and of ``headstats run``: each
table a spec, so a misspelt key fails when the file loads."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from headstats.names import check_name
from headstats.options import Spec, SpecError, compose, option
from headstats.specs.commands import CollectSpec, SweepSpec
from headstats.specs.groups import (
    AccuracyMetric,
    Batching,
    Calibration,
    Datasets,
    LoadOptions,
    Models,
    Progress,
    Prompting,
    Questions,
    Results,
    Sampling,
    ScoredZeroing,
    Seed,
    Stages,
    Task,
    needs_names,
)
from headstats.specs.values import RUN_STAGES, SAVE_DTYPES, STAGES, WHAT_TO_RUN, check_drop_points, check_unit_interval


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


@compose(LoadOptions, Models)
class ModelsSection(Spec):
    """``[models]`` of an analysis file: the models, how they load, and the optional ones."""

    WHAT: ClassVar[str] = "models"
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    optional: tuple[str, ...] = option((), "models run with --all-models", cli=False)

    def check(self) -> None:
        needs_names(self)


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
    drop: float = option(1.0, "tolerated drop in accuracy points", each=check_drop_points)
    confidence: float = option(
        0.95,
        "one-sided confidence of the drop bound, family-wise over the claims (Bonferroni)",
        each=check_unit_interval,
    )

    def check(self) -> None:
        if not self.kernels or not self.dtypes:
            raise SpecError("kernels", "a confirmation needs at least one attention kernel and one dtype")


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
