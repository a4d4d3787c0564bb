"""The option machinery: a job's options are one frozen dataclass of :class:`Spec` fields.

Each field is declared with :func:`option`: its type (the annotation), default, help and the
registry its allowed values come from. Everything else derives from that one declaration:

- Python: ``CollectSpec(limit=4)`` checks every value in ``__post_init__`` (a wrong type, a value out
  of range or not registered raises :class:`SpecError`, a ``ValueError`` naming the option);
  :meth:`Spec.from_kwargs` builds a spec from the keyword arguments of a public function
  (``collect_scores(..., limit=4)``), refusing unknown names with the list of allowed ones;
- analysis files: :meth:`Spec.from_toml` checks a TOML table's keys and types (a string is never
  taken for a list there) and names the file, section and key in every error;
- the command line: :mod:`headstats.cli.options` turns the fields into argparse flags.

Options come in small groups (``LoadOptions``, ``Sampling``, ``Calibration``, ...), each option
declared once, with its default, in one group. A job's spec is flat: :func:`compose` copies the
fields of its groups into one dataclass (``SweepSpec(limit=4)``, ``spec.limit``), as
``HfArgumentParser((ModelArguments, DataArguments))`` composes its dataclasses at the call site.
Where a job needs another default, allowed names or flag for one of its groups' options, it says so
where it composes them (``defaults=``, ``choices=``, ``flags=``); nothing is looked up along a class
hierarchy. A value of ``None`` is "none" (no limit, no seed, every score): it is never replaced by a
default, and an option that cannot be unset refuses it.

The declarations themselves live in :mod:`headstats.specs`.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from headstats.names import canonical_name

if TYPE_CHECKING:
    import torch

T = TypeVar("T", bound="Spec")


class SpecError(ValueError):
    """A bad option value; the message names the option (``--limit``, ``limit``, or ``file: [section] limit``)."""

    def __init__(self, key: str, text: str, label: str | None = None) -> None:
        self.key, self.text, self.label = key, text, key if label is None else label
        # `text` may place the label itself ("{key} must be at least 1"), else it follows "label: ".
        prefix = f"{self.label}: " if self.label else ""
        super().__init__(text.format(key=self.label) if "{key}" in text else prefix + text)

    def relabel(self, label: Callable[[str], str]) -> SpecError:
        return SpecError(self.key, self.text, label(self.key))


def option(
    default: Any = None,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    choices: Callable[[], Iterable[str]] | Iterable[str] | None = None,
    noun: str | None = None,
    strict: bool = True,
    each: Callable[[Any], object] | None = None,
    minimum: float | None = None,
    flag: str | None = None,
    split: bool = True,
    metavar: str | None = None,
    cli: bool = True,
    toml: bool = True,
    runtime: bool = False,
    positional: bool = False,
    group: str | None = None,
) -> Any:
    """Declare one option.

    ``choices``: the allowed names (a callable reading a registry, so names registered later count),
    listed by ``--help``; ``strict=False`` lists them without refusing others (datasets: a file path
    is allowed too). ``noun`` names a value in messages ("unknown score id 'x'"). ``each``: a check of
    every value (of every element of a list) that raises ``ValueError``. ``minimum``: the smallest
    number allowed. ``flag``: the command-line flag if not ``--name``. ``split=False``: a list whose
    items may hold commas (shell lines), given one item per flag and never split at commas.
    ``cli`` / ``toml``: whether the option is offered there.
    ``runtime``: it changes how a job runs, not what it produces (a grid does not rerun a finished
    job when only such an option changed). ``positional``: a command-line argument without a flag.
    ``group``: the section of a command's ``--help`` it is listed in (default: its spec's
    :attr:`Spec.GROUP`).
    """
    meta = dict(
        help=help,
        choices=choices,
        noun=noun,
        strict=strict,
        each=each,
        minimum=minimum,
        flag=flag,
        split=split,
        metavar=metavar,
        cli=cli,
        toml=toml,
        runtime=runtime,
        positional=positional,
        group=group,
    )
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def choices_of(f: Field, spec: Any = None) -> tuple[str, ...]:
    """The names ``f`` allows (its declared ``choices``, or those its spec gave it where it composed it)."""
    source = f.metadata.get("choices")
    if source is None:
        return ()
    return tuple(source() if callable(source) else source)


def default_of(f: Field) -> Any:
    """The value ``f`` takes when none is given: the default on the field."""
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None if f.default is MISSING else f.default


def flag_of(f: Field, spec: Any = None) -> str:
    """The command-line flag of ``f``: its declared ``flag`` (or its spec's spelling), else ``--name``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def group_of(f: Field, spec: type[Spec] | Spec) -> str | None:
    """The ``--help`` section ``f`` is listed in: its own ``group``, else the :attr:`Spec.GROUP` of
    the option group that declares it (``spec``'s own, for its own fields)."""
    if "declared_in" in f.metadata:  # a group's option: placed by its group when composed
        return f.metadata.get("group")
    cls = type(spec) if isinstance(spec, Spec) else spec
    return f.metadata.get("group") or vars(cls).get("GROUP")


def declared_in(f: Field, spec: type[Spec] | Spec) -> str:
    """The name of the option group that declares ``f`` (``spec``'s own name for its own fields)."""
    cls = type(spec) if isinstance(spec, Spec) else spec
    return f.metadata.get("declared_in") or cls.__name__


def compose(
    *groups: type[Spec],
    defaults: Mapping[str, Any] | None = None,
    choices: Mapping[str, Iterable[str]] | None = None,
    flags: Mapping[str, str] | None = None,
    helps: Mapping[str, str] | None = None,
) -> Callable[[type[T]], type[T]]:
    """A class decorator: the class becomes a flat frozen dataclass of the fields of ``groups`` (in
    their order), then its own. The groups' checks run before its own :meth:`Spec.check`.

    Where this spec needs it, an option of a group takes another default (``defaults``; a default of
    None lets the option be unset here), other allowed names (``choices``), another flag
    (``flags``; the option's own flag is still accepted) or a help that says what it does in this
    job's terms (``helps``: a group's help is written for every job that composes it). Each name must
    be an option of the groups.
    """

    def build(cls: type[T]) -> type[T]:
        inherited: dict[str, Field] = {}
        types_: dict[str, Any] = {}
        for group in groups:
            group_hints = hints(group)
            for f in fields(group):
                if f.name in inherited:
                    raise TypeError(f"{cls.__name__}: option {f.name!r} is in two of its groups")
                meta = {
                    **f.metadata,
                    "group": group_of(f, group),
                    "declared_in": declared_in(f, group),
                }
                inherited[f.name] = field(default=f.default, default_factory=f.default_factory, metadata=meta)
                types_[f.name] = group_hints[f.name]
        for table, what in ((defaults, "defaults"), (choices, "choices"), (flags, "flags"), (helps, "helps")):
            unknown = sorted(set(table or {}) - set(inherited))
            if unknown:
                raise TypeError(f"{cls.__name__}: {what} for {', '.join(unknown)}, which none of its groups has")
        for name, value in (defaults or {}).items():
            meta = inherited[name].metadata
            inherited[name] = field(default=value, metadata=meta)
            if value is None:
                types_[name] = types_[name] | None
        for name, names in (choices or {}).items():
            inherited[name] = _with_meta(inherited[name], choices=names if callable(names) else tuple(names))
        for name, text in (helps or {}).items():
            inherited[name] = _with_meta(inherited[name], help=text)
        for name, flag in (flags or {}).items():
            f = inherited[name]
            own = f.metadata.get("flag") or "--" + name.replace("_", "-")
            inherited[name] = _with_meta(f, flag=flag, alias=own)
        own = dict(vars(cls).get("__annotations__", {}))
        clash = sorted(set(own) & set(inherited))
        if clash:
            raise TypeError(f"{cls.__name__} declares {', '.join(clash)}, which its groups already have")
        for name, f in inherited.items():
            setattr(cls, name, f)
        cls.__annotations__ = {**types_, **own}
        cls.GROUPS = groups
        return dataclass(frozen=True)(cls)

    return build


def _with_meta(f: Field, **meta: Any) -> Field:
    return field(default=f.default, default_factory=f.default_factory, metadata={**f.metadata, **meta})


def _checks(cls: type) -> list[Callable[[Any], None]]:
    """The checks a spec of class ``cls`` runs: its groups' (recursively, each once), then its own."""
    out: list[Callable[[Any], None]] = []
    for group in vars(cls).get("GROUPS", ()):
        out += [check for check in _checks(group) if check not in out]
    own = cls.check
    if own is not Spec.check and own not in out:
        out.append(own)
    return out


# --- checking values ------------------------------------------------------------------------------


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None)) + " (or unset)"
    if origin is tuple:
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}.get(args[0], str(args[0]))
    if origin is dict or _is_spec(hint):
        return "a table of settings"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(hint, str(hint))


def _coerce(hint: Any, value: Any) -> Any:
    """``value`` as the annotated type, or TypeError. Numbers are never rounded (4.7 is no integer),
    a bool is not a number, and a comma-separated string is a list only where Python code passes
    one (analysis files are checked for real lists first, see :meth:`Spec.from_toml`)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value)
            except TypeError:
                continue
        raise TypeError
    if origin is tuple:
        if isinstance(value, str):  # "a,b" / "0,0.1" from Python callers: the same reading as the flags
            value = [_from_text(args[0], item.strip()) for item in value.split(",") if item.strip()]
        if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
            raise TypeError
        return tuple(_coerce(args[0], item) for item in value)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise TypeError
        return dict(value)
    if _is_spec(hint):  # a nested option set: given as one, or as a table of its options
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise TypeError
        return hint.from_kwargs(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError
        return float(value)
    if hint is str:
        if isinstance(value, os.PathLike):  # a path is given as a Path as often as a string
            return os.fspath(value)
        if not isinstance(value, str):
            raise TypeError
        return value
    raise TypeError


def _is_spec(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Spec)


def _from_text(kind: Any, text: str) -> Any:
    """One comma-separated item as a number where numbers belong (else left for the type check)."""
    try:
        return int(text) if kind is int else float(text) if kind is float else text
    except ValueError:
        return text


def _non_null(hint: Any) -> list[Any]:
    """The types a hint allows besides None (one, unless it is a union of several)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(hint) if a is not type(None)]
    return [hint]


def is_list(hint: Any) -> bool:
    return any(typing.get_origin(a) is tuple for a in _non_null(hint))


def element_type(hint: Any) -> Any:
    """int, float, str or bool: the type of a value, or of a list's elements."""
    (inner,) = _non_null(hint)
    return typing.get_args(inner)[0] if typing.get_origin(inner) is tuple else inner


_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def no_gpu_here() -> bool:
    """Whether this machine certainly has no CUDA (or ROCm) device, told without importing torch: on
    Linux the drivers' device nodes are missing (``/dev/nvidia0``..., ROCm's ``/dev/kfd``, WSL's
    ``/dev/dxg``), and a Mac has none. False where it cannot tell (torch then decides)."""
    if sys.platform == "darwin":
        return True
    if not sys.platform.startswith("linux"):
        return False
    dev = Path("/dev")
    return not (any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists() or (dev / "dxg").exists())


def check_device(device: str | torch.device | None) -> str:
    """The device type a model will be loaded on; an unusable device fails here, before any work. The
    CPU, named or the default on a machine without a GPU (:func:`no_gpu_here`), is told without torch."""
    if device == "cpu" or (device is None and no_gpu_here()):
        return "cpu"
    import torch  # here, not at the top: the command line reads the specs without loading torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}: give cpu, cuda, cuda:1, mps, ...") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{str(device)!r} was asked for, but no CUDA device is available here; use --device cpu")
    return kind


# --- the base class -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """Base of every option set. Subclasses declare fields with :func:`option`."""

    WHAT: ClassVar[str] = "job"  # names the option set in messages ("unknown collection option")
    # The ``--help`` section of the options this class declares (an option's own ``group`` wins).
    GROUP: ClassVar[str | None] = None
    # The option groups a spec is composed of (:func:`compose`); none for a group itself.
    GROUPS: ClassVar[tuple[type[Spec], ...]] = ()

    def __post_init__(self) -> None:
        types_ = hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str) and not f.metadata.get("split", True):
                value = (value,)  # one item, commas and all
            try:
                value = _coerce(types_[f.name], value)
            except TypeError:
                raise SpecError(f.name, f"expected {_describe(types_[f.name])}, not {value!r}") from None
            except SpecError as err:  # in a nested option set: named by its path ("sft.steps")
                raise SpecError(f"{f.name}.{err.key}", err.text) from None
            if value is not None:  # a registry is read only for a value to check
                names = choices_of(f)
                value = _canonical(names, value)
                _check_value(f, value, names)
            object.__setattr__(self, f.name, value)
        try:
            for check in _checks(type(self)):
                check(self)
        except SpecError:
            raise
        except ValueError as err:
            raise SpecError(getattr(err, "key", "options"), str(err)) from None

    def check(self) -> None:
        """Checks across fields or against registries (a group's or spec's own); raise ValueError.
        A composed spec runs its groups' checks first (:func:`compose`): a check never calls super()."""

    # --- building ---

    @classmethod
    def options(cls, *, where: str = "python") -> list[Field]:
        return [f for f in fields(cls) if where == "python" or f.metadata.get(where, True)]

    @classmethod
    def from_kwargs(
        cls: type[T], kwargs: Mapping[str, Any], *, base: T | None = None, label: Callable[[str], str] = str
    ) -> T:
        """A spec from keyword arguments, on top of ``base`` if given."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(k for k in kwargs if k not in names)
        if unknown:
            raise SpecError(
                unknown[0],
                f"unknown {cls.WHAT} option(s) {', '.join(unknown)}: choose from {', '.join(sorted(names))}",
                label=label(unknown[0]),
            )
        try:
            return replace(base, **kwargs) if base is not None else cls(**kwargs)
        except SpecError as err:
            raise err.relabel(label) from None

    @classmethod
    def from_toml(cls: type[T], table: Mapping[str, Any], where: str, *, extra: Iterable[str] = ()) -> T:
        """A spec from one table of an analysis file; ``where`` ("file: [section]") prefixes errors.
        ``extra`` keys are allowed but not part of this spec (the caller reads them)."""
        allowed = {f.name: f for f in cls.options(where="toml")}
        unknown = sorted(set(table) - set(allowed) - set(extra))
        if unknown:
            raise SpecError(
                unknown[0],
                f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted({*allowed, *extra}))}",
                label="",
            )
        values = {k: v for k, v in table.items() if k not in set(extra)}
        types_ = hints(cls)
        for key, value in values.items():
            if is_list(types_[key]) and not isinstance(value, list):
                # TOML has real lists: a string here is a mistake, not "a,b,c" (nor letters).
                raise SpecError(key, f"expected {_describe(types_[key])}, not {value!r}", label=f"{where} {key}")
        return cls.from_kwargs(values, label=lambda k: f"{where} {k}")

    def kwargs(self, *, where: str = "python") -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in self.options(where=where)}

    def settings(self) -> dict[str, Any]:
        """The values that decide what a job produces (the runtime options left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.metadata.get("runtime")}


def _canonical(names: tuple[str, ...], value: Any) -> Any:
    """A choice spelled with '-' for '_' (``arc-easy``) is that choice (``arc_easy``): one name per
    task and dataset (:func:`headstats.names.canonical_name`)."""
    if not names:
        return value
    if isinstance(value, tuple):
        return tuple(canonical_name(item, names) for item in value)
    return canonical_name(value, names)


def _check_value(f: Field, value: Any, names: tuple[str, ...]) -> None:
    meta = f.metadata
    items = value if isinstance(value, tuple) else (value,)
    minimum = meta.get("minimum")
    for item in items:
        if minimum is not None and isinstance(item, (int, float)) and not item >= minimum:
            raise SpecError(f.name, f"{{key}} must be at least {minimum:g}, not {item!r}")
        if isinstance(item, float) and not math.isfinite(item):
            raise SpecError(f.name, f"{{key}} must be a finite number, not {item!r}")
        if meta.get("each") is not None:
            try:
                meta["each"](item)
            except ValueError as err:
                raise SpecError(f.name, str(err)) from None
        if meta.get("strict", True) and names and item not in names:
            noun = meta.get("noun") or f.name.replace("_", " ")
            raise SpecError(f.name, f"unknown {noun} {item!r}: choose from {', '.join(names)}")


def split_kwargs(kwargs: Mapping[str, Any], *specs: type[Spec]) -> list[dict[str, Any]]:
    """Keyword arguments spread over several option sets (each name to the first that has it);
    a name none of them has is refused, listing every allowed one."""
    parts: list[dict[str, Any]] = [{} for _ in specs]
    for key, value in kwargs.items():
        for part, spec in zip(parts, specs, strict=True):
            if key in {f.name for f in fields(spec)}:
                part[key] = value
                break
        else:
            allowed = sorted({f.name for spec in specs for f in fields(spec)})
            what = specs[-1].WHAT
            raise SpecError(key, f"unknown {what} option(s) {key}: choose from {', '.join(allowed)}")
    return parts


def narrow(spec: Spec, cls: type[T], **values: Any) -> T:
    """The ``cls`` that ``spec``'s values of ``cls``'s options make, ``values`` on top: e.g. the
    :class:`CollectSpec` of a :class:`CollectSection`, the :class:`LoadOptions` of :class:`ModelsSection`.
    An option of ``cls`` that ``spec`` lacks must be in ``values`` or takes ``cls``'s default."""
    given = {f.name: getattr(spec, f.name) for f in fields(cls) if hasattr(spec, f.name)}
    return cls(**{**given, **values})


__all__ = [
    "Spec",
    "SpecError",
    "check_device",
    "choices_of",
    "compose",
    "declared_in",
    "default_of",
    "element_type",
    "flag_of",
    "group_of",
    "hints",
    "is_list",
    "narrow",
    "no_gpu_here",
    "option",
    "split_kwargs",
]
