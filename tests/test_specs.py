"""Every option is declared once, in a spec; Python, analysis files and the command line all check it
the same way, before any model loads."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from headstats import options, specs
from headstats.cli import build_parser
from headstats.cli.options import flag_of
from headstats.jobs.analysis import load_analysis
from headstats.options import SpecError
from headstats.specs import CollectSpec, ReportSpec, Resources, SweepSpec

SPECS = [
    obj
    for obj in vars(specs).values()
    if isinstance(obj, type)
    and issubclass(obj, options.Spec)
    and dataclasses.is_dataclass(obj)
    and obj is not options.Spec
]


def test_no_option_is_declared_twice() -> None:
    """Each option name is declared by exactly one option group (the specs composing it copy it)."""
    declared: dict[str, set[str]] = {}
    for cls in SPECS:
        for f in dataclasses.fields(cls):
            declared.setdefault(f.name, set()).add(options.declared_in(f, cls))
    twice = {name: owners for name, owners in declared.items() if len(owners) > 1}
    assert not twice, twice


def test_specs_are_flat_compositions_of_groups_without_default_tables() -> None:
    """No spec inherits from another: a spec is a group, or composes groups; a default is on the
    field (no per-class tables resolved along the class hierarchy)."""
    for cls in SPECS:
        assert cls.__bases__ == (options.Spec,), (cls.__name__, cls.__bases__)
        for table in ("DEFAULTS", "CHOICES", "FLAGS"):
            assert not hasattr(cls, table), (cls.__name__, table)
    assert len(specs.PruneSpec.GROUPS) == 14 and specs.PruneSpec.__mro__ == (specs.PruneSpec, options.Spec, object)


def test_none_means_none_and_is_never_replaced_by_a_default() -> None:
    from headstats.specs import ConfirmSection, FinetuneSpec

    assert CollectSpec(max_length=None).max_length is None and CollectSpec(scores=None).scores is None
    assert FinetuneSpec(seed=None).seed is None and FinetuneSpec().seed is None  # the recipe's seed
    for key, message in [
        ("calibration_limit", "calibration_limit: expected an integer, not None"),
        ("seed", "seed: expected an integer, not None"),
        ("calibration", "calibration: expected a string, not None"),
        ("scores", "no score ids given"),
    ]:
        with pytest.raises(SpecError, match=message):
            SweepSpec(**{key: None})
    # A kind that does not take an option does not have it: prune runs one model, never optional ones;
    # a confirmation's claims and paths set its sweeps' scores, targets and kernel.
    assert "optional" not in {f.name for f in dataclasses.fields(specs.PruneSpec)}
    for key in ("scores", "targets", "attention_kernel"):
        assert key not in {f.name for f in dataclasses.fields(ConfirmSection)}
        with pytest.raises(SpecError, match=f"unknown confirmation option.*{key}"):
            ConfirmSection.from_kwargs({"task": "piqa", key: None})


def test_a_composition_names_only_options_its_groups_have() -> None:
    with pytest.raises(TypeError, match="defaults for limt, which none of its groups has"):

        @options.compose(specs.Sampling, defaults={"limt": 3})
        class Bad(options.Spec):
            pass

    with pytest.raises(TypeError, match="option 'limit' is in two of its groups"):

        @options.compose(specs.Sampling, specs.CollectSpec)
        class Twice(options.Spec):
            pass


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_flag_of_every_command_maps_to_exactly_one_spec_field() -> None:
    # A job may spell an option its own way where it composes it (prune --score); the option's own
    # flag still works.
    spellings: dict[str, set[str]] = {}
    for cls in SPECS:
        for f in dataclasses.fields(cls):
            spellings.setdefault(f.name, set()).update({flag_of(f), f.metadata.get("alias") or flag_of(f)})
    for command, parser in _commands(build_parser()).items():
        if command == "lm-eval":  # lm-eval's own command line, passed through untouched
            continue
        seen: dict[str, str] = {}
        for action in parser._actions:
            if action.dest in ("help", "quiet", "verbose"):
                continue
            assert action.dest in spellings, f"headstats {command}: {action.option_strings or action.dest} has no spec"
            for flag in action.option_strings:
                assert flag not in seen, f"headstats {command}: {flag} twice"
                seen[flag] = action.dest
                assert flag in spellings[action.dest], (command, flag)
            assert action.help, f"headstats {command}: {action.option_strings} has no help"


def test_python_construction_checks_types_ranges_and_registries() -> None:
    assert CollectSpec(limit=4).limit == 4
    for bad, message in [
        ({"limit": 4.7}, "limit: expected an integer"),
        ({"limit": "four"}, "limit: expected an integer"),
        ({"limit": True}, "limit: expected an integer"),
        ({"limit": 0}, "limit must be at least 1"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"scores": ["awft", "bogus"]}, "unknown score id 'bogus'"),
        ({"prompt_format": "weird"}, "unknown prompt format 'weird'"),
        ({"padding_side": "middle"}, "unknown padding side 'middle'"),
    ]:
        with pytest.raises(SpecError, match=message):
            CollectSpec(**bad)
    with pytest.raises(SpecError, match="outside \\[0, 1\\]"):
        SweepSpec(targets=(0.0, 1.5))
    with pytest.raises(SpecError, match="always run"):
        SweepSpec(scores=("baseline",))
    with pytest.raises(SpecError, match="unknown launcher 'pbs'"):
        Resources(launcher="pbs")
    # A comma-separated string is a list in Python calls (run_sweep(scores="a,b")), in canonical form.
    assert SweepSpec(scores="ahon_ln, awft", targets=[0, 0.1]).scores == ("ahon_ln", "awft")
    assert SweepSpec().scores == specs.DEFAULT_SWEEP_SCORES and CollectSpec().scores is None
    assert SweepSpec(targets="0,0.1").targets == (0.0, 0.1)  # run_sweep(targets="0,0.1") as before
    assert SweepSpec().calibration_limit == specs.DEFAULT_CALIBRATION_LIMIT


def test_keyword_names_are_the_field_names() -> None:
    assert ReportSpec.from_kwargs({"n_boot": 50}).n_boot == 50
    for old in ("bootstrap", "score_ids"):  # no second spelling of an option
        with pytest.raises(SpecError, match=f"unknown .* option.*{old}"):
            (ReportSpec if old == "bootstrap" else CollectSpec).from_kwargs({old: 1})
    with pytest.raises(SpecError, match=r"unknown collection option.*batchsize.*batch_size"):
        CollectSpec.from_kwargs({"batchsize": 4})


def test_each_flag_names_one_field_in_every_command() -> None:
    """A flag means one option everywhere (``--out``, ``--seed``, ``--stages`` included): what differs
    between commands is a default or the allowed names, given where a spec composes its groups."""
    owners: dict[str, set[str]] = {}
    for command, parser in _commands(build_parser()).items():
        if command == "lm-eval":
            continue
        for action in parser._actions:
            for flag in action.option_strings:
                owners.setdefault(flag, set()).add(action.dest)
    shared = {flag: names for flag, names in owners.items() if len(names) > 1}
    assert not shared, shared


def test_a_field_shared_by_commands_has_each_commands_default_and_names() -> None:
    from headstats.specs import FINETUNE_STAGES, STAGES, FinetuneSpec, RunSpec, SweepSpec

    assert RunSpec(analysis="a.toml").stages == STAGES and FinetuneSpec().stages == FINETUNE_STAGES
    assert SweepSpec().seed == 0 and FinetuneSpec().seed is None  # unset: the recipe's seed
    assert FinetuneSpec().out == "finetune" and FinetuneSpec(seed=3).seed == 3
    with pytest.raises(SpecError, match="unknown stage 'sft': choose from train, collect, ablate, time, report"):
        RunSpec(analysis="a.toml", stages=("sft",))
    with pytest.raises(SpecError, match="unknown stage 'report': choose from sft, dpo, grpo"):
        FinetuneSpec(stages=("report",))
    with pytest.raises(SpecError, match="seed must be at least 0"):
        FinetuneSpec(seed=-1)
    helps = {
        command: {a.dest: a.help for a in parser._actions}
        for command, parser in _commands(build_parser()).items()
        if command in ("run", "finetune", "ablate")
    }
    assert "(one of: train, collect, ablate, time, report;" in helps["run"]["stages"]
    assert "(one of: sft, dpo, grpo;" in helps["finetune"]["stages"]
    assert "(default: 0)" in helps["ablate"]["seed"] and helps["finetune"]["seed"].endswith("(default: the recipe's)")
    assert "None" not in helps["finetune"]["seed"]  # unset means the recipe's seed, never a printed None
    assert "(default: finetune)" in helps["finetune"]["out"]


def test_a_score_registered_in_user_code_is_an_allowed_value_at_once() -> None:
    from headstats.engine import scores as S

    score = S.Score("max_weight_spec_test", "test score", "above", stat=S.SCORES["awft"].stat, pool="mean")
    S.register(score)
    try:
        assert CollectSpec(scores=["max_weight_spec_test"]).scores == ("max_weight_spec_test",)
    finally:
        del S.SCORES["max_weight_spec_test"]


def _analysis(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "a.toml"
    models = '[models]\nnames = ["smollm2-135m"]\n'
    path.write_text(text.replace("MODELS", models) if "MODELS" in text else models + text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[collect]\ndatasets = ['mmlu']\nlimt = 3\n", r"\[collect\]: unknown key\(s\) limt; allowed: batch_size, "),
        ("[collect]\nlimit = 4.7\n", r"\[collect\] limit: expected an integer"),
        ('[collect]\nlimit = "four"\n', r"\[collect\] limit: expected an integer"),
        ('[collect]\ndatasets = "mmlu"\n', r"\[collect\] datasets: expected a list of strings"),
        ('[[ablate]]\ntask = "mmlu"\nscores = "ahon_ln"\n', r"\[\[ablate\]\] #1 scores: expected a list of strings"),
        ('[[ablate]]\ntask = "mmlu"\nsubjects = "marketing"\n', r"#1 subjects: expected a list of strings"),
        ("[report_options]\nn_bot = 3\n", r"\[report_options\]: unknown key\(s\) n_bot; allowed: .*n_boot"),
        ('[report_options]\nrank_by = "auc"\n', r"\[report_options\] rank_by: unknown curve area 'auc'"),
        ("[models]\n", "not valid TOML"),  # a second [models] table
        ("colect = 1\nMODELS", r"top level: unknown key\(s\) colect; allowed: .*collect"),
        ('[models2]\nnames = ["m"]\n', r"unknown key\(s\) models2"),
    ],
)
def test_analysis_files_are_checked_key_by_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_analysis(_analysis(tmp_path, text))


def test_the_shipped_analyses_use_only_declared_keys() -> None:
    from headstats.studies import load_study

    for path in sorted((Path(__file__).parent.parent / "analyses").glob("*.toml")):
        study = load_study(path)  # every key of its kind checked
        if study.kind != "analysis":
            continue
        spec = load_analysis(path)
        assert spec.report_options.n_boot >= 1 and all(a.task for a in spec.ablate), path
