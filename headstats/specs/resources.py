"""Where a grid's jobs run: the submitit parameters headstats names, and the launcher that passes
them and any other to submitit."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from headstats.options import Spec, SpecError, compose, option
from headstats.specs.values import GRID, LAUNCHERS


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
