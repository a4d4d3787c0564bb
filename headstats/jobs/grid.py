"""Grids of independent jobs on this machine or on a SLURM cluster, through submitit.

A study is a grid: (model, dataset) pairs to collect, (model, task, score chunk) points to ablate.
Each unit of work is a :class:`Job`, a small picklable description that knows

- what it writes (:meth:`Job.outputs`): paths no other job of the grid may write, so jobs running at
  the same time never touch the same Parquet part, and their results merge by simply reading the
  whole output directory;
- how to do the work (:meth:`Job.work`), loading whatever it needs (a model) inside the job;
- whether it is already done (:meth:`Job.is_complete`): after its work succeeds a job writes a
  marker holding its settings, so re-running a grid skips finished jobs and re-submits the rest
  (an interrupted collection then resumes from the parts it wrote, by sample id).

:func:`run_grid` submits the unfinished jobs and waits for them:

- ``slurm``: one SLURM job array (``sbatch --array``), at most ``array_parallelism`` tasks at once;
- ``local``: each job in its own process on this machine, at most ``array_parallelism`` at once
  (submitit's local executor; logs and pickles in ``folder`` as on a cluster);
- ``debug``: each job in this process, one after the other (submitit's debug executor: a debugger
  and breakpoints work).

A failed job does not stop the others; at the end :class:`GridError` lists every failure with the
end of its log and where the full log is. Re-running the same grid retries only what is missing.
``submitit`` is an optional dependency (``pip install 'headstats[slurm]'``).
"""

from __future__ import annotations

import abc
import argparse
import datetime as _dt
import inspect
import json
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

from headstats.io import store

Launcher = Literal["local", "slurm", "debug"]
LAUNCHERS: tuple[str, ...] = ("local", "slurm", "debug")
MARKER_PREFIX = "_JOB"
LOCAL_NO_LIMIT_MIN = 7 * 24 * 60  # a local job runs as long as it needs unless told otherwise
SLURM_DEFAULT_MIN = 60
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class GridError(RuntimeError):
    """Some jobs of a grid failed; the message says which, why, and where their logs are."""

    def __init__(self, message: str, result: GridResult) -> None:
        super().__init__(message)
        self.result = result


# --- jobs ----------------------------------------------------------------------------------------


class Job(abc.ABC):
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

    def spec(self) -> dict[str, object]:
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
        return record.get("spec") == _jsonable(self.spec())

    def __call__(self) -> object:
        """What submitit runs: the work, then the marker (so a failure leaves no marker)."""
        print(f"headstats job: {self.name} on {platform.node()}", flush=True)
        result = self.work()
        store.write_json_atomic(
            {
                "job": self.name,
                "spec": _jsonable(self.spec()),
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

    def spec(self) -> dict[str, object]:
        fn = f"{self.function.__module__}.{self.function.__qualname__}"
        return {"name": self.label, "function": fn, "kwargs": dict(self.kwargs)}

    def work(self) -> object:
        return self.function(**self.kwargs)


# Options of collect_scores that change how the work is done, not what it produces.
_COLLECT_RUNTIME_OPTIONS = frozenset({"batch_size", "rows_per_part", "part_seconds", "progress"})


@dataclass(frozen=True)
class CollectJob(Job):
    """Score one dataset with one model into ``out/model=<slug>/dataset=<name>/``."""

    model: str
    dataset: str
    out: str
    partition: str
    options: Mapping[str, object] = field(default_factory=dict)
    dtype: str | None = None
    device: str | None = None

    @classmethod
    def create(
        cls,
        model: str,
        dataset: str,
        out: str | os.PathLike,
        *,
        dtype: str | None = None,
        device: str | None = None,
        **options: object,
    ) -> CollectJob:
        """Check the options and the dataset here, before anything is submitted."""
        from headstats.io.models import model_slug, resolve_model_path
        from headstats.io.tasks import collection_source
        from headstats.jobs.collect import collect_scores

        allowed = set(inspect.signature(collect_scores).parameters) - {"model", "tokenizer", "dataset", "out"}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(
                f"unknown collection option(s) {', '.join(unknown)}: choose from {', '.join(sorted(allowed))}"
            )
        resolve_model_path(model)  # a typo in a model name fails now, not in every job
        source = collection_source(dataset, data_dir=options.get("data_dir"), text_column=options.get("text_column"))
        partition = store.partition_dir(out, model=model_slug(model), dataset=source.name)
        return cls(model, dataset, os.fspath(out), os.fspath(partition), dict(options), dtype, device)

    @property
    def name(self) -> str:
        return f"collect {self.model} on {self.dataset}"

    def outputs(self) -> tuple[Path, ...]:
        return (Path(self.partition),)

    def spec(self) -> dict[str, object]:
        settings = {k: v for k, v in self.options.items() if k not in _COLLECT_RUNTIME_OPTIONS}
        return {"kind": "collect", "model": self.model, "dataset": self.dataset, "dtype": self.dtype, **settings}

    def work(self) -> object:
        from headstats.io.models import load_model
        from headstats.jobs.collect import collect_scores

        model, tokenizer = load_model(self.model, dtype=self.dtype, device=self.device)
        return collect_scores(model, tokenizer, self.dataset, self.out, **self.options)  # type: ignore[arg-type]


def collect_jobs(
    models: Sequence[str],
    datasets: Sequence[str],
    out: str | os.PathLike,
    *,
    dtype: str | None = None,
    device: str | None = None,
    **collect_kwargs: object,
) -> list[CollectJob]:
    """One :class:`CollectJob` per (model, dataset), validated (see :func:`collect_grid`)."""
    if not models or not datasets:
        raise ValueError("a collection grid needs at least one model and one dataset")
    return [
        CollectJob.create(m, d, out, dtype=dtype, device=device, **collect_kwargs)
        for m in dict.fromkeys(models)
        for d in dict.fromkeys(datasets)
    ]


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


def make_executor(
    launcher: Launcher,
    folder: str | os.PathLike,
    *,
    partition: str | None = None,
    gpus: int | None = None,
    time_min: int | None = None,
    mem_gb: float | None = 32,
    array_parallelism: int = 8,
    cpus: int | None = None,
    setup: Sequence[str] = (),
    job_name: str = "headstats",
) -> Any:
    """A submitit executor for ``launcher`` with the resources of one job."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}: choose from {', '.join(LAUNCHERS)}")
    if array_parallelism < 1:
        raise ValueError(f"array_parallelism must be at least 1, not {array_parallelism}")
    submitit = _submitit()
    if launcher == "slurm":
        try:
            executor = submitit.AutoExecutor(folder=os.fspath(folder), cluster="slurm")
        except RuntimeError as err:
            raise RuntimeError(f"cannot submit to SLURM from this machine ({err}); use --launcher local here") from err
        params: dict[str, object] = {
            "name": job_name,
            "timeout_min": int(time_min if time_min is not None else SLURM_DEFAULT_MIN),
            "gpus_per_node": int(gpus or 0),
            "slurm_array_parallelism": int(array_parallelism),
        }
        if mem_gb is not None:
            params["mem_gb"] = mem_gb
        if partition:
            params["slurm_partition"] = partition
        if cpus:
            params["cpus_per_task"] = int(cpus)
        if setup:
            params["slurm_setup"] = list(setup)
        executor.update_parameters(**params)
        return executor
    executor = submitit.AutoExecutor(folder=os.fspath(folder), cluster=launcher)
    if launcher == "local":
        if gpus is None:
            # The local executor sets CUDA_VISIBLE_DEVICES to the first `gpus` devices: by default a
            # job sees every GPU of this machine, as a plain run would.
            import torch

            gpus = torch.cuda.device_count()
        params = {
            "name": job_name,
            "timeout_min": int(time_min if time_min is not None else LOCAL_NO_LIMIT_MIN),
            "gpus_per_node": int(gpus),
        }
        if cpus:
            # Local jobs share this machine's cores: each gets `cpus` threads, not one per core
            # (several jobs each spinning one thread per core slow each other down many times over).
            params["local_setup"] = [f"export {var}={int(cpus)}" for var in _THREAD_VARIABLES]
        executor.update_parameters(**params)
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
        result = sjob.result()
    except submitit.core.utils.FailedJobError as err:  # the job raised: submitit carries its traceback
        message = str(err)
        if "with trace:" in message:  # keep the traceback, drop submitit's boilerplate around it
            message = message.split("with trace:", 1)[1].split("-" * 22)[1].strip()
        return JobOutcome(job.name, "failed", sjob.job_id, error=_tail(message, 20), log=log)
    except submitit.core.utils.UncompletedJobError as err:
        return JobOutcome(job.name, "failed", sjob.job_id, error=f"{killed}\n{_tail(str(err))}".rstrip(), log=log)
    except Exception as err:  # the debug launcher re-raises the job's own exception
        return JobOutcome(job.name, "failed", sjob.job_id, error=f"{type(err).__name__}: {err}", log=log)
    return JobOutcome(job.name, "finished", sjob.job_id, result=result, log=log)


@dataclass
class Submission:
    """Jobs submitted by :func:`submit_grid`; :meth:`wait` collects their outcomes."""

    launcher: Launcher
    executor: Any
    jobs: list[Job]
    submitted: dict[int, Any]  # index in jobs -> submitit job
    skipped: list[Job]
    parallelism: int
    poll_s: float
    progress: bool = True

    def _start_more(self) -> None:
        """Local launcher: keep at most ``parallelism`` processes running."""
        running = sum(1 for s in self.submitted.values() if not s.done())
        for i, job in enumerate(self.jobs):
            if running >= self.parallelism:
                return
            if i not in self.submitted:
                self.submitted[i] = self.executor.submit(job)
                running += 1

    def running_jobs(self) -> list[Any]:
        return [s for s in self.submitted.values() if not s.done()]

    def wait(self, raise_on_failure: bool = True) -> GridResult:
        outcomes: dict[int, JobOutcome] = {}
        bar = tqdm(total=len(self.jobs), desc=f"grid ({self.launcher})", unit="job", disable=not self.progress)
        try:
            while len(outcomes) < len(self.jobs):
                if self.launcher == "local":
                    self._start_more()
                elif self.launcher == "debug":  # runs the next job in this process
                    i = len(outcomes)
                    if i not in self.submitted:
                        self.submitted[i] = self.executor.submit(self.jobs[i])
                for i, sjob in list(self.submitted.items()):
                    if i not in outcomes and (self.launcher == "debug" or sjob.done()):
                        outcomes[i] = _outcome(self.jobs[i], sjob)
                        bar.update()
                        if outcomes[i].status == "failed":
                            bar.write(f"failed: {self.jobs[i].name} (log: {outcomes[i].log})")
                if len(outcomes) < len(self.jobs) and self.launcher != "debug":
                    time.sleep(self.poll_s)
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


def submit_grid(
    jobs: Sequence[Job],
    launcher: Launcher = "local",
    *,
    folder: str | os.PathLike | None,
    partition: str | None = None,
    gpus: int | None = None,
    time_min: int | None = None,
    mem_gb: float | None = 32,
    array_parallelism: int = 8,
    cpus: int | None = None,
    setup: Sequence[str] = (),
    poll_s: float | None = None,
    progress: bool = True,
) -> Submission:
    """Submit the unfinished ``jobs`` and return at once (see :func:`run_grid`)."""
    jobs = list(jobs)
    if not jobs:
        raise ValueError("no jobs to run")
    if folder is None:
        raise ValueError("give folder=: the directory where submitit keeps each job's pickles and logs")
    check_outputs(jobs)
    for job in jobs:
        store.ensure_writable(job.marker.parent)
    executor = make_executor(
        launcher,
        folder,
        partition=partition,
        gpus=gpus,
        time_min=time_min,
        mem_gb=mem_gb,
        array_parallelism=array_parallelism,
        cpus=cpus,
        setup=setup,
    )
    skipped = [j for j in jobs if j.is_complete()]
    pending = [j for j in jobs if j not in skipped]
    submitted: dict[int, Any] = {}
    if launcher == "slurm" and pending:
        submitted = dict(enumerate(executor.submit_array(pending)))
    default_poll = {"slurm": 30.0, "local": 0.5, "debug": 0.0}[launcher]
    return Submission(
        launcher,
        executor,
        pending,
        submitted,
        skipped,
        array_parallelism,
        default_poll if poll_s is None else poll_s,
        progress,
    )


def run_grid(
    jobs: Sequence[Job],
    launcher: Launcher = "local",
    *,
    folder: str | os.PathLike | None,
    partition: str | None = None,
    gpus: int | None = None,
    time_min: int | None = None,
    mem_gb: float | None = 32,
    array_parallelism: int = 8,
    cpus: int | None = None,
    setup: Sequence[str] = (),
    poll_s: float | None = None,
    progress: bool = True,
    raise_on_failure: bool = True,
) -> GridResult:
    """Run every unfinished job of a grid and wait for all of them.

    ``folder`` holds submitit's pickles and each job's logs. Resources are per job: ``gpus``
    (slurm: GPUs requested, default 0; local: GPUs the job may see, default all), ``time_min``
    (slurm default 60 minutes; local: no limit), ``mem_gb`` (slurm only), ``cpus`` (slurm: CPUs
    requested; local: threads each job may use, which matters when several share this machine),
    ``partition`` and ``setup`` (shell lines run before a slurm job, e.g. activating an
    environment). ``array_parallelism`` bounds how many jobs run at once (slurm and local).

    Jobs already complete are skipped. Failures are collected, not raised one by one: with
    ``raise_on_failure`` a :class:`GridError` lists them all at the end (its ``result`` holds the
    outcomes), otherwise they are in the returned :class:`GridResult`.
    """
    submission = submit_grid(
        jobs,
        launcher,
        folder=folder,
        partition=partition,
        gpus=gpus,
        time_min=time_min,
        mem_gb=mem_gb,
        array_parallelism=array_parallelism,
        cpus=cpus,
        setup=setup,
        poll_s=poll_s,
        progress=progress,
    )
    return submission.wait(raise_on_failure=raise_on_failure)


def collect_grid(
    models: Sequence[str],
    datasets: Sequence[str],
    out: str | os.PathLike,
    *,
    launcher: Launcher = "local",
    folder: str | os.PathLike | None = None,
    dtype: str | None = None,
    device: str | None = None,
    partition: str | None = None,
    gpus: int | None = None,
    time_min: int | None = None,
    mem_gb: float | None = 32,
    array_parallelism: int = 8,
    cpus: int | None = None,
    setup: Sequence[str] = (),
    poll_s: float | None = None,
    progress: bool = True,
    raise_on_failure: bool = True,
    **collect_kwargs: object,
) -> GridResult:
    """Collect every (model, dataset) pair as its own job; the table under ``out`` is their union.

    Each job loads its model with :func:`headstats.load_model` (``dtype``, ``device``) and runs
    :func:`headstats.jobs.collect.collect_scores` with ``collect_kwargs`` into its own partition.
    ``folder`` defaults to ``out/_grid`` (ignored by every table reader). See :func:`run_grid`.
    """
    jobs = collect_jobs(models, datasets, out, dtype=dtype, device=device, **collect_kwargs)
    return run_grid(
        jobs,
        launcher,
        folder=folder if folder is not None else Path(out) / "_grid",
        partition=partition,
        gpus=gpus,
        time_min=time_min,
        mem_gb=mem_gb,
        array_parallelism=array_parallelism,
        cpus=cpus,
        setup=setup,
        poll_s=poll_s,
        progress=progress,
        raise_on_failure=raise_on_failure,
    )


# --- command-line options ------------------------------------------------------------------------


def add_launcher_arguments(parser: argparse.ArgumentParser) -> None:
    """``--launcher`` and the options of one job, shared by ``collect``, ``ablate`` and ``run``."""
    group = parser.add_argument_group("grid execution (needs submitit: pip install 'headstats[slurm]')")
    group.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=None,
        help="run each (model, dataset) / (model, task, scores) unit as a submitit job: local = processes on this "
        "machine, slurm = a SLURM job array, debug = one after the other in this process. Default: run here, "
        "without submitit. Re-running skips finished jobs.",
    )
    group.add_argument("--partition", default=None, help="slurm partition")
    group.add_argument(
        "--gpus", type=int, default=None, help="GPUs per job (slurm: requested, default 0; local: visible, default all)"
    )
    group.add_argument(
        "--time", type=int, default=None, dest="time_min", help="minutes per job (slurm default 60; local: no limit)"
    )
    group.add_argument("--mem", type=float, default=32, dest="mem_gb", help="GB of memory per job (slurm; default 32)")
    group.add_argument(
        "--cpus", type=int, default=None, help="CPUs per job (slurm: requested; local: threads per job; default: all)"
    )
    group.add_argument(
        "--array-parallelism", type=int, default=8, help="jobs running at once (slurm array and local; default 8)"
    )
    group.add_argument(
        "--slurm-setup",
        action="append",
        default=[],
        dest="setup",
        metavar="LINE",
        help="shell line run before each slurm job, e.g. 'source .venv/bin/activate' (repeatable)",
    )
    group.add_argument("--grid-folder", default=None, help="submitit logs and pickles (default: OUT/_grid)")


def launcher_options(args: argparse.Namespace) -> dict[str, object]:
    """The keyword arguments of :func:`run_grid` / :func:`collect_grid` from parsed options."""
    if args.launcher is None:
        raise ValueError("no --launcher given: run the command directly")
    for name in ("gpus", "time_min", "cpus"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "gpus" else 1):
            raise ValueError(f"--{name.replace('_min', '')} must be positive, not {value}")
    if args.array_parallelism < 1:
        raise ValueError(f"--array-parallelism must be at least 1, not {args.array_parallelism}")
    return {
        "launcher": args.launcher,
        "folder": args.grid_folder,
        "partition": args.partition,
        "gpus": args.gpus,
        "time_min": args.time_min,
        "mem_gb": args.mem_gb,
        "cpus": args.cpus,
        "array_parallelism": args.array_parallelism,
        "setup": tuple(args.setup),
    }
