"""Pre-registered confirmatory runs (``headstats run analyses/confirm.toml``): the file and its paths' sweeps.

A confirmation file states claims before they are tested (docs/statistics.md#confirmation-verdicts):
each ``[[claims]]`` names a
model, a score and the target fraction at which the exploratory run certified zeroing within the
tolerated drop; ``[confirm]`` names the held-out questions (a seeded sample of a task, leaving out
the exploratory run's sample by content and source document: ``exclude_limit`` / ``exclude_seed``),
the computation paths (every attention kernel x model dtype listed) and the rule (the drop's
one-sided upper bound at most ``drop`` points on every path, family-wise over the claims:
:mod:`headstats.stats.confirm`). Layout::

    name = "confirm"
    results = "results/confirm"        # one folder per path: results/confirm/<kernel>-<dtype>/
    report = "reports/confirm"
    [confirm]
    task = "hellaswag"
    limit = 3000
    seed = 1
    exclude_limit = 2000
    kernels = ["explicit", "fused"]
    dtypes = ["float32", "bfloat16"]
    [[claims]]
    model = "smollm2-135m"
    score = "ahon_ln"
    target = 0.05

Each (path, model) is an ordinary analysis (:func:`expand`): one sweep of the model's claimed scores
at target 0 and the claimed targets, its kernel pinned (``attention_kernel``), into the path's own
results folder, so every path resumes point by point and ``run --dry-run`` sizes it with the same
probe as any sweep. A claim whose score reads the attention probabilities runs on the explicit
kernel only (the fused kernel cannot compute it): its paths are the explicit ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from headstats.engine import scores as S
from headstats.io import store
from headstats.jobs.analysis import (
    AnalysisSpec,
    merged_load,
    read_analysis_file,
    section_table,
)
from headstats.jobs.registration import Registered
from headstats.jobs.registration import amendments as registration_amendments
from headstats.jobs.registration import register as register_keys
from headstats.options import SpecError, check_device, narrow
from headstats.specs import (
    STAGES,
    AblateSection,
    Claim,
    CollectSection,
    ConfirmSection,
    ModelsSection,
    RunSpec,
    SweepSpec,
)

logger = logging.getLogger("headstats")
SECTIONS = ("confirm", "claims")
FROM_CLAIMS = ("scores", "targets", "attention_kernel")  # sweep options the claims and paths decide


@dataclass(frozen=True)
class ComputePath:
    """One way of computing every pass: an attention kernel and a model body dtype."""

    kernel: str
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.kernel}-{self.dtype}"


@dataclass
class ConfirmPlan:
    """A checked confirmation file."""

    name: str
    path: Path
    description: str
    results: Path
    report: Path
    section: ConfirmSection
    claims: list[Claim]

    @property
    def paths(self) -> list[ComputePath]:
        return [ComputePath(k, d) for k in self.section.kernels for d in self.section.dtypes]

    def claim_paths(self, claim: Claim) -> list[ComputePath]:
        """The paths ``claim`` runs on: all of them, or the explicit kernel's for a score that reads
        the attention probabilities."""
        needs_explicit = S.reads_weights([claim.score])
        return [p for p in self.paths if not (needs_explicit and p.kernel == "fused")]

    def results_of(self, path: ComputePath) -> Path:
        return self.results / path.name

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(c.model for c in self.claims))


def load_confirmation(path: str | Path) -> ConfirmPlan:
    """Parse and check a confirmation file, every key and name, before any model loads."""
    path = Path(path)
    raw, header = read_analysis_file(path, SECTIONS, what="confirmation file", example="analyses/confirm.toml")
    table = section_table(raw, "confirm", path)
    fixed = sorted(set(table) & set(FROM_CLAIMS))
    if fixed:
        raise SpecError(
            fixed[0],
            f"{path}: [confirm] {', '.join(fixed)}: set by the claims (scores, targets) and the paths (kernels), "
            "not here",
            label="",
        )
    section = ConfirmSection.from_toml(table, f"{path}: [confirm]")
    name, results, report = header.folders(path)
    plan = ConfirmPlan(name, path, header.description, results, report, section, read_claims(raw, path))
    for claim in plan.claims:
        if not plan.claim_paths(claim):
            raise ValueError(
                f"{path}: {claim.score} reads the attention probabilities and runs on the explicit kernel only; "
                'add "explicit" to kernels'
            )
    return plan


def read_claims(raw: Mapping[str, Any], path: Path) -> list[Claim]:
    """The ``[[claims]]`` of a confirmation file, each checked, none stated twice."""
    entries = raw.get("claims", [])
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise SpecError("claims", f"{path}: state the claims as [[claims]] sections (model, score, target)", label="")
    claims = [Claim.from_toml(e, f"{path}: [[claims]] #{i + 1}") for i, e in enumerate(entries)]
    seen: set[tuple[str, str, float]] = set()
    for claim in claims:
        key = (claim.model, claim.score, claim.target)
        if key in seen:
            raise ValueError(f"{path}: the claim {claim.model} {claim.score}@{claim.target:g} is stated twice")
        seen.add(key)
    return claims


def expand(plan: ConfirmPlan) -> list[tuple[ComputePath, AnalysisSpec]]:
    """One ordinary analysis per (path, model): the model's claims that run on the path as one sweep
    (target 0, which reuses the baseline, and the claimed targets), its kernel pinned and its dtype
    set, into the path's results folder. No report: :func:`headstats.pipeline.run_confirmation` writes one
    for all. Model by model, in the file's order, every path of one model before the next: a claim is
    decided only once all its paths are in, so a run stopped part way has whole verdicts for its first
    models rather than one path of every claim."""
    sec = plan.section
    out = []
    for model in plan.models:
        for path in plan.paths:
            mine = [c for c in plan.claims if c.model == model and path in plan.claim_paths(c)]
            if not mine:
                continue
            ablate = narrow(
                sec,
                AblateSection,
                scores=tuple(dict.fromkeys(c.score for c in mine)),
                targets=(0.0, *sorted({c.target for c in mine})),
                attention_kernel=path.kernel,
            )
            spec = AnalysisSpec(
                name=f"{plan.name} {path.name} {model}",
                path=plan.path,
                description=plan.description,
                results=plan.results_of(path),
                report=plan.report,
                models_section=ModelsSection(names=(model,), dtype=path.dtype),
                collect_section=CollectSection(),
                ablate=[ablate],
            )
            out.append((path, spec))
    return out


def claims_table(plan: ConfirmPlan) -> pd.DataFrame:
    """The claims as :func:`headstats.stats.confirm.claim_bounds` reads them (models as the
    results' slugs), with the exploratory % of heads zeroed and source."""
    from headstats.io.identity import model_slug

    return pd.DataFrame(
        [
            {
                "claim": f"{model_slug(c.model)} {plan.section.task} {c.score}@{c.target:g}",
                "model": model_slug(c.model),
                "task": plan.section.task,
                "score": c.score,
                "target": c.target,
                "zeroed_pct": c.zeroed_pct,
                "paths": [p.name for p in plan.claim_paths(c)],
                "source": c.source,
            }
            for c in plan.claims
        ]
    )


REGISTRATION_FILE = store.REGISTRATION_FILE  # under the results folder: the keys as the first pass found them
UNDECIDING = ("batch_size", "data_dir")  # [confirm] keys that change neither the questions nor the rule


def decision_keys(section: ConfirmSection) -> dict:
    """The ``[confirm]`` settings that decide a verdict (the held-out questions, the paths, the rule)."""
    return {k: v for k, v in section.settings().items() if k not in UNDECIDING and k not in FROM_CLAIMS}


def _claim_name(claim: object) -> str:
    assert isinstance(claim, dict)
    return f"claim {claim.get('model')} {claim.get('score')}@{claim.get('target')}"


def registered(plan: ConfirmPlan) -> Registered:
    """Every key that decides a verdict: the claims (model, score, target, each named when it is
    withdrawn or added), the held-out questions, the paths, the tolerated ``drop``, the
    ``confidence`` and the ``metric``; a key the record lacks ran as its default."""
    keys = decision_keys(plan.section)
    keys["claims"] = [{"model": c.model, "score": c.score, "target": c.target} for c in plan.claims]
    return Registered(
        keys, defaults=decision_keys(ConfirmSection(task=plan.section.task)), items={"claims": _claim_name}
    )


def registration(plan: ConfirmPlan) -> dict:
    """The deciding keys (:func:`registered`) with their hash."""
    return registered(plan).record


def recorded_registration(plan: ConfirmPlan) -> dict | None:
    """The registration the first pass recorded under ``plan.results``, or None before any."""
    return store.read_registration(plan.results)


def amendments(plan: ConfirmPlan) -> list[str] | None:
    """The decision keys the file changed since its first pass (``drop: 1 -> 2``), empty when none;
    None when no registration was recorded (:func:`headstats.jobs.registration.amendments`)."""
    return registration_amendments(plan.results, registered(plan))


def register(plan: ConfirmPlan) -> dict:
    """Record the decision keys under ``plan.results`` before the first pass; a run of a file whose
    keys changed since is refused (it is another run: its own results folder)."""
    return register_keys(
        plan.results, registered(plan), file=plan.path.as_posix(), what="a confirmation's claims and rule"
    )


def check_run(plan: ConfirmPlan, run: RunSpec) -> None:
    """Refuse what ``headstats run`` accepts for an analysis file but a confirmation would ignore:
    ``--dtype`` (each path sets its own), ``--all-models`` (it has no optional models) and stages that
    it does not have (it runs ablate, then report)."""
    where = plan.path.as_posix()
    if run.dtype is not None:
        raise SpecError(
            "dtype",
            f"{where}'s computation paths set each pass's dtype; choose paths with --paths "
            f"(it has {', '.join(p.name for p in plan.paths)})",
            label="--dtype",
        )
    if run.all_models:
        raise SpecError(
            "all_models",
            f"{where} has no optional models (it runs {', '.join(plan.models)}); choose among them with --models",
            label="--all-models",
        )
    lacking = [] if run.stages == STAGES else [s for s in run.stages if s not in ("ablate", "report")]
    if lacking:  # the default, every stage, runs the two it has
        raise SpecError(
            "stages",
            f"{where} has no {', '.join(lacking)} stage: a confirmation runs ablate (its sweeps), then report",
            label="--stages",
        )


def selected(plan: ConfirmPlan, run: RunSpec | None = None) -> list[tuple[ComputePath, AnalysisSpec]]:
    """The (path, model) analyses of :func:`expand` that ``run`` asks for now: all, or those of its
    ``--paths`` and ``--models`` (names checked against the file's, listing what it has). Choosing
    changes what runs now, never the verdicts: a claim stays incomplete until every path has run."""
    run = run or RunSpec()
    check_run(plan, run)
    for given, known, what in (
        (run.only_paths, [p.name for p in plan.paths], "--paths"),
        (run.only_models, plan.models, "--models"),
    ):
        unknown = [name for name in given or () if name not in known]
        if unknown:
            raise SpecError(
                what.removeprefix("--"),
                f"{', '.join(unknown)} is not in {plan.path.as_posix()} (it has {', '.join(known)})",
                label=what,
            )
    return [
        (path, spec)
        for path, spec in expand(plan)
        if (not run.only_paths or path.name in run.only_paths)
        and (not run.only_models or spec.models[0] in run.only_models)
    ]


class PathsLeftError(RuntimeError):
    """A confirmation run left (path, model) pairs for another machine; every other pair ran."""


def _emulating_cpu(device: str | None) -> str | None:
    """The CPU's name when the paths load on a CPU without bf16 matrix units; None otherwise."""
    from headstats.io.machine import emulated_bf16

    return emulated_bf16(device or check_device(None))  # None: as load_model places it


def slow_bf16_warning(paths: Sequence[ComputePath], device: str | None) -> str | None:
    """A warning when bf16 paths are to run on a CPU without bf16 matrix units (AVX512-BF16 or AMX),
    where PyTorch emulates bf16 products (:data:`~headstats.io.models.BF16_EMULATED_COST`), and that
    they run after the fp32 ones; None otherwise. They run here because ``--paths`` named them or
    because this kind of CPU began them (:func:`left_here` leaves the others)."""
    slow = [p.name for p in paths if p.dtype == "bfloat16"]
    cpu = _emulating_cpu(device) if slow else None
    if not cpu:
        return None
    from headstats.io.machine import BF16_EMULATED_COST

    after = "; they run after the fp32 paths" if any(p.dtype != "bfloat16" for p in paths) else ""
    return (
        f"{', '.join(dict.fromkeys(slow))}: this CPU ({cpu}) has no bf16 matrix units (AVX512-BF16, AMX), "
        f"where {BF16_EMULATED_COST}{after}"
    )


def left_for_bf16_units(plan: ConfirmPlan, run: RunSpec | None = None) -> dict[tuple[str, str], str]:
    """Per (path name, model) that a run here leaves for a machine with bf16 units, with the reason:
    the bf16 paths not begun yet (:func:`left_to_run`), when they would load on a CPU without bf16
    matrix units and ``--paths`` did not name them. There a bf16 pass takes hours, and the batches it
    saves tie the path to these kernels (:func:`refused_here`); naming the path with ``--paths`` runs it
    here anyway. Empty elsewhere."""
    from headstats.io.identity import model_slug
    from headstats.io.machine import BF16_EMULATED_COST

    run = run or RunSpec()
    if run.only_paths:
        return {}
    slow = [(path, spec) for path, spec in selected(plan, run) if path.dtype == "bfloat16"]
    cpu = _emulating_cpu(run.device) if slow else None
    if not cpu:
        return {}
    left = left_to_run(plan)
    # Not begun: no pass finished and no batch saved. A pair begun on this kind of CPU can only go on
    # here, and one begun on other kernels is refused_here's.
    fresh = left[(left["passes_left"] == left["passes"]) & (left["saved_sequences"] == 0)]
    unfinished = set(fresh[["path", "model"]].itertuples(index=False, name=None))
    return {
        (path.name, model): (
            f"this CPU ({cpu}) has no bf16 matrix units (AVX512-BF16, AMX), where {BF16_EMULATED_COST}, and its "
            "saved batches tie the path to this kind of CPU; run it on a CPU that has them or on a GPU, or here "
            f"anyway with --paths {path.name}"
        )
        for path, spec in slow
        for model in spec.models
        if (path.name, model_slug(model)) in unfinished
    }


def refused_here(plan: ConfirmPlan, run: RunSpec | None = None) -> dict[tuple[str, str], str]:
    """Per (path name, model) of those ``run`` chooses: why this machine may not run what a bf16 or
    fp16 path has left, since other kernels computed its baseline or saved batches
    (:func:`headstats.jobs.sweep.refused_here`, from the results folders alone); the pairs this machine
    may run are absent. The machine is the one each path would load on (``--device``, else a GPU
    where there is one)."""
    from headstats.io.machine import REDUCED_PRECISION
    from headstats.jobs.sweep_plan import plan_sweep

    run = run or RunSpec()
    out: dict[tuple[str, str], str] = {}
    for path, spec in selected(plan, run):
        if path.dtype not in REDUCED_PRECISION:
            continue
        load = merged_load(spec, path_run(run))
        here = None  # this machine's record, read once a sweep has passes left to compare it with
        for model in spec.models:
            for ablation in spec.ablate:
                sweep = plan_sweep(
                    model, str(ablation.task), out=spec.results, spec=narrow(ablation, SweepSpec), load=load
                )
                if not sweep.pending():
                    continue  # every pass ran: nothing left for another machine
                from headstats.io.models import machine_info
                from headstats.jobs.sweep import refused_here as sweep_refused

                here = here or machine_info(load.device or check_device(None))
                why = sweep_refused(sweep, path.dtype, here)
                if why is not None:
                    out[(path.name, model)] = why
                    break
    return out


def left_here(plan: ConfirmPlan, run: RunSpec | None = None) -> dict[tuple[str, str], str]:
    """Per (path name, model): why a run of ``run`` on this machine leaves it for another, from the
    results folders alone: other bf16 kernels began it (:func:`refused_here`, which ``--paths`` cannot
    override), or it waits for bf16 units (:func:`left_for_bf16_units`)."""
    return {**left_for_bf16_units(plan, run), **refused_here(plan, run)}


def left_to_run(plan: ConfirmPlan) -> pd.DataFrame:
    """Per (path, model) with passes left, from the results folders alone: the passes left of the
    path's sweep (the baseline and each claimed point without its file; target 0 takes the baseline's
    answers), the sequences their stopped passes saved, and where they may run. A bf16 or fp16 path
    that began stays on kernels like those of its baseline and saved batches
    (:class:`~headstats.jobs.sweep.MixedKernelsError`); fp32 runs anywhere. Empty (with its columns)
    when every pass has run."""
    from headstats.io.identity import model_slug
    from headstats.io.machine import REDUCED_PRECISION, reduced_precision_kernels
    from headstats.jobs.checkpoint import saved_machines
    from headstats.jobs.sweep_plan import Point
    from headstats.stats.summary import BASELINE

    columns = ["path", "model", "passes_left", "passes", "saved_sequences", "runs_on"]
    rows = []
    for path, spec in expand(plan):
        slug, sweep = model_slug(spec.models[0]), spec.ablate[0]
        partition = store.partition_dir(spec.results, model=slug, task=plan.section.task)
        baseline = Point(BASELINE, 0.0)
        points = [baseline, *(Point(s, t) for s in sweep.scores or () for t in sweep.targets if t > 0)]
        left = [p for p in points if not store.is_finished_file(partition / p.file_name)]
        if not left:
            continue
        began = [m for p in left for m in saved_machines(store.partial_file(partition, p.file_name))]
        if baseline not in left:
            began.append((store.file_provenance(partition / baseline.file_name) or {}).get("machine"))
        kernels = sorted({k for m in began if (k := reduced_precision_kernels(m, path.dtype)) is not None})
        if path.dtype not in REDUCED_PRECISION:
            where = "any machine (fp32 products round alike across machines)"
        elif kernels:
            where = f"{' or '.join(kernels)}, as it began; elsewhere only whole (move its folder away first)"
        else:
            where = "any machine, whole; fast only on a CPU with bf16 units (AVX512-BF16, AMX) or a GPU"
        saved = sum(store.partial_sequences(store.partial_file(partition, p.file_name)) for p in left)
        rows.append([path.name, slug, len(left), len(points), saved, where])
    return pd.DataFrame(rows, columns=columns)


def path_run(run: RunSpec) -> RunSpec:
    """The run of each (path, model) analysis of :func:`expand`: its sweeps, with the path's own
    dtype and model (``run`` may set the device and the other loading options)."""
    return replace(run, stages=("ablate",), dtype=None, all_models=False, only_models=None, only_paths=None)


__all__ = [
    "REGISTRATION_FILE",
    "ComputePath",
    "ConfirmPlan",
    "PathsLeftError",
    "amendments",
    "check_run",
    "claims_table",
    "expand",
    "left_for_bf16_units",
    "left_here",
    "left_to_run",
    "load_confirmation",
    "path_run",
    "read_claims",
    "recorded_registration",
    "refused_here",
    "register",
    "registration",
    "selected",
    "slow_bf16_warning",
]
