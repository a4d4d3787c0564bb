"""Grids of independent jobs on this machine or on a SLURM cluster, through submitit.

A study is a grid: (model, dataset) pairs to collect, (model, task) sweeps to run. Each unit of work
is a :class:`Job`, a small picklable description that knows

- what it writes (:meth:`Job.outputs`): paths no other job of the grid may write, so jobs running at
  the same time never touch the same Parquet part, and their results merge by simply reading the
  whole output directory (:func:`check_outputs` refuses a grid that breaks this);
- how to do the work (:meth:`Job.work`), loading whatever it needs (a model) inside the job;
- whether it is already done (:meth:`Job.is_complete`): after its work succeeds a job writes a
  marker holding its settings, so re-running a grid skips finished jobs and re-submits the rest
  (an interrupted collection then resumes from the parts it wrote, by sample id).

What submitit already does is left to it: the executors (``slurm``: one job array; ``local``:
processes on this machine; ``debug``: in this process, one after the other), waiting
(``helpers.as_completed``, ``job.results()``), and requeueing a job that hit its time limit (a
:class:`Job` is ``submitit.helpers.Checkpointable``; collections and sweeps resume where they
stopped). Executor parameters are passed through unchanged (:class:`~headstats.specs.Resources`).
What headstats adds: completion markers, the output check, at most ``array_parallelism`` local
processes at once, and every failure of a grid in one :class:`GridError` with the end of each log.
``submitit`` is an optional dependency (``pip install 'headstats[slurm]'``).
"""

from __future__ import annotations

import abc
import datetime as _dt
import json
import logging
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

from headstats.io import store
from headstats.options import Spec, split_kwargs
from headstats.specs import LAUNCHERS, CollectSpec, LoadOptions, Resources

logger = logging.getLogger("headstats")

MARKER_PREFIX = "_JOB"
LOCAL_NO_LIMIT_MIN = 7 * 24 * 60  # a local job runs as long as it needs unless told otherwise
SLURM_DEFAULTS: dict[str, object] = {"timeout_min": 60, "mem_gb": 32, "gpus_per_node": 0}
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

try:  # requeued by submitit on a time limit or preemption: the same job runs again and resumes
    from submitit.helpers import Checkpointable as _Requeueable
except ImportError:  # pragma: no cover - without submitit nothing is submitted, so nothing requeued

    class _Requeueable:  # type: ignore[no-redef]
        pass


class GridError(RuntimeError):
    """Some jobs of a grid failed; the message says which, why, and where their logs are."""

    def __init__(self, message: str, result: GridResult) -> None:
        super().__init__(message)
        self.result = result


# --- jobs ----------------------------------------------------------------------------------------


class Job(_Requeueable, abc.ABC):
    """One unit of work of a grid. Subclasses are small picklable records (dataclasses)."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """What the job does, for progress and error messages."""

    @abc.abstractmethod
    def outputs(self) -> tuple[Path, ...]:
        """Files or directories only this job writes (no other job of a grid may write in them)."""

    @abc.abstractmethod
    def work(self) -> object:
        """Do the work; runs inside the job (another process or machine)."""

    def settings(self) -> dict[str, object]:
        """The settings that decide what the job produces (JSON-able). A finished job whose marker
        holds other settings is not complete: the grid runs it again."""
        return {"name": self.name}

    @property
    def marker(self) -> Path:
        """Written when the work succeeded: ``_JOB.json`` in the first output (a directory)."""
        return self.outputs()[0] / f"{MARKER_PREFIX}.json"

    def is_complete(self) -> bool:
        try:
            record = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return False
        return record.get("spec") == _jsonable(self.settings())

    def __call__(self) -> object:
        """What submitit runs: the work, then the marker (so a failure leaves no marker)."""
        if os.environ.get("SUBMITIT_EXECUTOR") and not logger.handlers:  # a job process: log to its stdout
            handler = logging.StreamHandler(sys.stdout)
            handler.setFormatter(logging.Formatter("headstats: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        logger.info("job: %s on %s", self.name, platform.node())
        result = self.work()
        store.write_json_atomic(
            {
                "job": self.name,
                "spec": _jsonable(self.settings()),
                "result": repr(result),
                "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "host": platform.node(),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            },
            self.marker,
        )
        return result


def _jsonable(value: object) -> object:
    """Round-trip through JSON, so a spec compares equal to the one read back from a marker."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass(frozen=True)
class FunctionJob(Job):
    """A job that calls ``function(**kwargs)`` (a module-level function, so it pickles by name).

    ``outputs`` are the paths it alone writes; the marker goes to ``marker_path`` when given (e.g.
    when the output is a single file in a directory other jobs also write to), else into the first
    output directory.
    """

    label: str
    function: Callable[..., object]
    kwargs: Mapping[str, object] = field(default_factory=dict)
    output_paths: tuple[str, ...] = ()
    marker_path: str | None = None

    @property
    def name(self) -> str:
        return self.label

    def outputs(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.output_paths)

    @property
    def marker(self) -> Path:
        return Path(self.marker_path) if self.marker_path else super().marker

    def settings(self) -> dict[str, object]:
        """The function and its arguments; an option set among them by its settings (the runtime
        options, which change how a job runs and not what it produces, left out)."""
        fn = f"{self.function.__module__}.{self.function.__qualname__}"
        kwargs = {k: v.settings() if isinstance(v, Spec) else v for k, v in self.kwargs.items()}
        return {"name": self.label, "function": fn, "kwargs": kwargs}

    def work(self) -> object:
        return self.function(**self.kwargs)


def load_and_collect(model: str, dataset: str, out: str, spec: CollectSpec, load: LoadOptions) -> object:
    """Load ``model`` and score ``dataset`` with it into ``out`` (what a collection job runs)."""
    from headstats.io.models import load_model
    from headstats.jobs.collect import collect_scores

    loaded, tokenizer = load_model(model, **load.kwargs())
    return collect_scores(loaded, tokenizer, dataset, out, spec=spec)


def collect_job(model: str, dataset: str, out: str | os.PathLike, spec: CollectSpec, load: LoadOptions) -> FunctionJob:
    """The job that scores ``dataset`` with ``model`` into ``out/model=<slug>/dataset=<name>/``, with
    the model name and the dataset checked here, before anything is submitted."""
    from headstats.io.identity import model_slug
    from headstats.io.model_paths import resolve_model_path
    from headstats.io.tasks import collection_source

    resolve_model_path(model)  # a typo in a model name fails now, not in every job
    source = collection_source(dataset, data_dir=spec.data_dir, text_column=spec.text_column)
    partition = store.partition_dir(out, model=model_slug(model), dataset=source.name)
    kwargs = {"model": model, "dataset": dataset, "out": os.fspath(out), "spec": spec, "load": load}
    return FunctionJob(f"collect {model} on {dataset}", load_and_collect, kwargs, output_paths=(str(partition),))


def collect_jobs(
    models: Sequence[str],
    datasets: Sequence[str],
    out: str | os.PathLike,
    *,
    spec: CollectSpec | None = None,
    load: LoadOptions | None = None,
    **options: object,
) -> list[FunctionJob]:
    """One job per (model, dataset), validated (see :func:`collect_grid`). ``options``:
    :class:`LoadOptions` and :class:`CollectSpec` fields by name."""
    if not models or not datasets:
        raise ValueError("a collection grid needs at least one model and one dataset")
    load_kw, collect_kw = split_kwargs(options, LoadOptions, CollectSpec)
    load, spec = LoadOptions.from_kwargs(load_kw, base=load), CollectSpec.from_kwargs(collect_kw, base=spec)
    return [collect_job(m, d, out, spec, load) for m in dict.fromkeys(models) for d in dict.fromkeys(datasets)]


# --- running a grid ------------------------------------------------------------------------------


@dataclass
class JobOutcome:
    name: str
    status: Literal["skipped", "finished", "failed"]
    job_id: str | None = None
    result: object = None
    error: str | None = None
    log: str | None = None


@dataclass
class GridResult:
    outcomes: list[JobOutcome]
    folder: Path | None = None

    @property
    def failed(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def finished(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.status == "finished"]

    @property
    def skipped(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.status == "skipped"]

    def summary(self) -> str:
        return (
            f"{len(self.outcomes)} jobs: {len(self.finished)} finished, {len(self.skipped)} already done, "
            f"{len(self.failed)} failed"
        )


def check_outputs(jobs: Sequence[Job]) -> None:
    """No two jobs may write the same path or one inside the other's, nor share a marker."""
    claimed: list[tuple[Path, Job]] = []
    markers: dict[Path, Job] = {}
    for job in jobs:
        outputs = [Path(os.path.abspath(p)) for p in job.outputs()]
        if not outputs:
            raise ValueError(f"job {job.name!r} declares no outputs: a grid cannot tell when it is done")
        for path in outputs:
            for other_path, other in claimed:
                if other is not job and (
                    path == other_path or path.is_relative_to(other_path) or other_path.is_relative_to(path)
                ):
                    raise ValueError(
                        f"jobs {other.name!r} and {job.name!r} would both write to {str(path)!r}; two jobs must "
                        "never write the same part files (give models distinct names / directory names, or "
                        "drop the duplicate)"
                    )
            claimed.append((path, job))
        marker = Path(os.path.abspath(job.marker))
        if marker in markers:
            raise ValueError(f"jobs {markers[marker].name!r} and {job.name!r} share the marker {str(marker)!r}")
        markers[marker] = job


def _submitit() -> Any:
    try:
        import submitit
    except ImportError as err:
        raise RuntimeError(
            "the local, slurm and debug launchers need submitit: pip install 'headstats[slurm]' "
            "(or pip install submitit)"
        ) from err
    return submitit


def executor_parameters(resources: Resources, job_name: str = "headstats") -> dict[str, object]:
    """What ``executor.update_parameters`` receives: headstats' defaults under the given parameters."""
    launcher = resources.launcher
    given = resources.submitit_parameters()
    if launcher == "slurm":
        params = {"name": job_name, **SLURM_DEFAULTS, "slurm_array_parallelism": resources.array_parallelism}
    elif launcher == "local":
        import torch

        # The local executor sets CUDA_VISIBLE_DEVICES to the first `gpus_per_node` devices: by
        # default a job sees every GPU of this machine, as a plain run would.
        params = {"name": job_name, "timeout_min": LOCAL_NO_LIMIT_MIN, "gpus_per_node": torch.cuda.device_count()}
        if given.get("cpus_per_task"):
            # Local jobs share this machine's cores: each gets `cpus_per_task` threads, not one per
            # core (several jobs each spinning one thread per core slow each other down many times).
            exports = [f"export {var}={int(given['cpus_per_task'])}" for var in _THREAD_VARIABLES]
            given["local_setup"] = [*exports, *given.get("local_setup", [])]
    else:
        params = {"name": job_name}
    return {**params, **given}


def make_executor(resources: Resources, folder: str | os.PathLike) -> Any:
    """A submitit executor for ``resources.launcher`` with the parameters of one job."""
    if resources.launcher is None:
        raise ValueError(f"no launcher given: choose from {', '.join(LAUNCHERS)}")
    submitit = _submitit()
    try:
        executor = submitit.AutoExecutor(folder=os.fspath(folder), cluster=resources.launcher)
    except RuntimeError as err:
        raise RuntimeError(f"cannot submit to SLURM from this machine ({err}); use --launcher local here") from err
    params = executor_parameters(resources)
    try:
        executor.update_parameters(**params)
    except (NameError, AssertionError, TypeError, ValueError) as err:  # submitit's own checks of its parameters
        raise ValueError(f"submitit refused the executor parameters {params}: {err}") from None
    return executor


def _tail(text: str | None, lines: int = 12) -> str:
    if not text:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _outcome(job: Job, sjob: Any) -> JobOutcome:
    """What became of one submitted job (it has finished, one way or another)."""
    submitit = _submitit()
    log = str(sjob.paths.stderr)
    state = getattr(sjob, "state", "UNKNOWN")
    killed = f"exited without a result (state {state}: killed, out of memory, preempted or over its time limit?)"
    if isinstance(sjob, submitit.LocalJob) and not sjob.paths.result_pickle.exists():
        # A local process that ended without a result was killed; no need to wait for a late file.
        tail = _tail(sjob.stderr()) or _tail(sjob.stdout())
        return JobOutcome(job.name, "failed", sjob.job_id, error=f"{killed}\n{tail}".rstrip(), log=log)
    try:
        (result,) = sjob.results()
    except submitit.core.utils.FailedJobError as err:
        # submitit's error quotes the traceback it pickled, which the job's process prints to its log only
        # after: the log may lack it when the failure is seen.
        return JobOutcome(job.name, "failed", sjob.job_id, error=_tail(str(err), 25), log=log)
    except submitit.core.utils.UncompletedJobError:
        tail = _tail(sjob.stderr()) or _tail(sjob.stdout())
        return JobOutcome(job.name, "failed", sjob.job_id, error=f"{killed}\n{tail}".rstrip(), log=log)
    except Exception as err:  # the debug launcher re-raises the job's own exception
        return JobOutcome(job.name, "failed", sjob.job_id, error=f"{type(err).__name__}: {err}", log=log)
    return JobOutcome(job.name, "finished", sjob.job_id, result=result, log=log)


@dataclass
class Submission:
    """Jobs submitted by :func:`submit_grid`; :meth:`wait` collects their outcomes."""

    resources: Resources
    executor: Any
    jobs: list[Job]
    submitted: dict[int, Any]  # index in jobs -> submitit job
    skipped: list[Job]
    progress: bool = True

    @property
    def launcher(self) -> str:
        return str(self.resources.launcher)

    @property
    def poll_s(self) -> float:
        default = {"slurm": 30.0, "local": 0.5, "debug": 0.0}[self.launcher]
        return default if self.resources.poll_s is None else self.resources.poll_s

    def _start_more(self) -> None:
        """Local launcher: keep at most ``array_parallelism`` processes running."""
        running = sum(1 for s in self.submitted.values() if not s.done())
        for i, job in enumerate(self.jobs):
            if running >= self.resources.array_parallelism:
                return
            if i not in self.submitted:
                self.submitted[i] = self.executor.submit(job)
                running += 1

    def running_jobs(self) -> list[Any]:
        return [s for s in self.submitted.values() if not s.done()]

    def wait(self, raise_on_failure: bool = True) -> GridResult:
        submitit = _submitit()
        outcomes: dict[int, JobOutcome] = {}
        bar = tqdm(total=len(self.jobs), desc=f"grid ({self.launcher})", unit="job", disable=not self.progress)

        def finish(i: int) -> None:
            outcomes[i] = _outcome(self.jobs[i], self.submitted[i])
            bar.update()
            if outcomes[i].status == "failed":
                logger.warning("failed: %s (log: %s)", self.jobs[i].name, outcomes[i].log)

        try:
            if self.launcher == "debug":  # each job runs in this process when its result is asked for
                for i, job in enumerate(self.jobs):
                    self.submitted[i] = self.executor.submit(job)
                    finish(i)
            while len(outcomes) < len(self.jobs):
                if self.launcher == "local":
                    self._start_more()
                waiting = {id(s): i for i, s in self.submitted.items() if i not in outcomes}
                jobs = [self.submitted[i] for i in waiting.values()]
                for sjob in submitit.helpers.as_completed(jobs, poll_frequency=self.poll_s):
                    finish(waiting[id(sjob)])
                    if len(self.submitted) < len(self.jobs):
                        break  # a local slot is free: start the next job before waiting again
        except KeyboardInterrupt:
            if self.launcher == "local":
                for sjob in self.running_jobs():
                    sjob.cancel(check=False)
            raise
        finally:
            bar.close()
        result = GridResult(
            [JobOutcome(j.name, "skipped") for j in self.skipped] + [outcomes[i] for i in range(len(self.jobs))],
            Path(self.executor.folder),
        )
        if result.failed and raise_on_failure:
            lines = [f"{len(result.failed)} of {len(result.outcomes)} jobs failed ({result.summary()}):"]
            for o in result.failed:
                lines.append(f"- {o.name} (job {o.job_id}; full log: {o.log})")
                lines += [f"    {line}" for line in (o.error or "").splitlines()]
            lines.append(
                "Fix the cause and re-run the same command: finished jobs are skipped, unfinished ones resume."
            )
            raise GridError("\n".join(lines), result)
        return result


def _resources(resources: Resources | str | None, options: Mapping[str, object]) -> Resources:
    """``resources``, or one built from a launcher name and :class:`Resources` fields by name."""
    if isinstance(resources, Resources):
        return Resources.from_kwargs(options, base=resources)
    return Resources.from_kwargs({"launcher": resources or "local", **options})


def submit_grid(
    jobs: Sequence[Job], resources: Resources | str | None = None, *, progress: bool = True, **options: object
) -> Submission:
    """Submit the unfinished ``jobs`` and return at once (see :func:`run_grid`)."""
    resources = _resources(resources, options)
    jobs = list(jobs)
    if not jobs:
        raise ValueError("no jobs to run")
    if resources.folder is None:
        raise ValueError("give folder=: the directory where submitit keeps each job's pickles and logs")
    check_outputs(jobs)
    for job in jobs:
        store.ensure_writable(job.marker.parent)
    executor = make_executor(resources, resources.folder)
    skipped = [j for j in jobs if j.is_complete()]
    pending = [j for j in jobs if j not in skipped]
    submitted: dict[int, Any] = {}
    if resources.launcher == "slurm" and pending:
        submitted = dict(enumerate(executor.submit_array(pending)))
    return Submission(resources, executor, pending, submitted, skipped, progress)


def run_grid(
    jobs: Sequence[Job],
    resources: Resources | str | None = None,
    *,
    progress: bool = True,
    raise_on_failure: bool = True,
    **options: object,
) -> GridResult:
    """Run every unfinished job of a grid and wait for all of them.

    ``resources``: a :class:`~headstats.specs.Resources` (or a launcher name, with its other
    fields as keyword arguments): the launcher, ``folder`` for submitit's pickles and each job's
    logs, ``array_parallelism`` (jobs at once, slurm and local) and ``executor_params`` for submitit
    as they are (``timeout_min``, ``mem_gb``, ``gpus_per_node``, ``cpus_per_task``,
    ``slurm_partition``, ``slurm_account``, ``slurm_setup``, ...). Defaults: slurm 60 minutes, 32 GB,
    no GPU; local: no time limit and every GPU of this machine visible; ``cpus_per_task`` on the
    local launcher sets the threads each job may use.

    Jobs already complete are skipped. Failures are collected, not raised one by one: with
    ``raise_on_failure`` a :class:`GridError` lists them all at the end (its ``result`` holds the
    outcomes), otherwise they are in the returned :class:`GridResult`.
    """
    return submit_grid(jobs, resources, progress=progress, **options).wait(raise_on_failure=raise_on_failure)


def collect_grid(
    models: Sequence[str],
    datasets: Sequence[str],
    out: str | os.PathLike,
    *,
    resources: Resources | None = None,
    spec: CollectSpec | None = None,
    load: LoadOptions | None = None,
    raise_on_failure: bool = True,
    **options: object,
) -> GridResult:
    """Collect every (model, dataset) pair as its own job; the table under ``out`` is their union.

    The options: ``resources``, ``spec`` (:class:`CollectSpec`) and ``load`` (:class:`LoadOptions`, how
    each job loads its model), or any of their fields by name. ``folder`` defaults to ``out/_grid`` (ignored
    by every table reader). See :func:`run_grid`.
    """
    resource_kw, rest = _split_resources(options)
    resources = _resources(resources or Resources(launcher="local"), resource_kw)
    if resources.folder is None:
        resources = Resources.from_kwargs({"folder": os.fspath(Path(out) / "_grid")}, base=resources)
    jobs = collect_jobs(models, datasets, out, spec=spec, load=load, **rest)
    progress = jobs[0].kwargs["spec"].progress  # type: ignore[attr-defined]
    return run_grid(jobs, resources, progress=progress, raise_on_failure=raise_on_failure)


def _split_resources(options: Mapping[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    names = {f for f in Resources.__dataclass_fields__}
    return {k: v for k, v in options.items() if k in names}, {k: v for k, v in options.items() if k not in names}
