"""Resume keys: every option that changes a job's results is part of the key a resumed run must match.

The options are enumerated from the spec dataclasses, not listed here: an option added later is
checked as soon as it exists. Each one either changes the key, or is one of the job's axes (it names
the units a partition holds: a sweep's point files), or is declared ``runtime`` (it changes how a job
runs, not what it produces)."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path

import pytest
from families import tiny_model
from test_tasks import PIQA, build_data_dir
from test_tasks import _save as save_rows

from headstats.io import store
from headstats.io.identity import model_slug
from headstats.jobs.analysis import load_analysis
from headstats.jobs.collect import COLLECT_AXES, plan_collection
from headstats.jobs.sweep import run_sweep
from headstats.jobs.sweep_plan import (
    SWEEP_AXES,
    check_sweep_key,
    plan_calibration,
    plan_sweep,
    same_key,
    sweep_key,
    sweep_points,
)
from headstats.options import Spec, SpecError, choices_of, narrow
from headstats.specs import AblateSection, CollectSpec, SweepSpec

ROOT = Path(__file__).resolve().parents[1]


def other_values(spec: Spec, name: str, paths: list[str]) -> list[object]:
    """Values of option ``name`` other than ``spec``'s, by the option's type and choices; ``paths``
    stand in for a free string (an existing file or folder, as a calibration or data_dir needs)."""
    f = next(f for f in fields(spec) if f.name == name)
    hint = typing.get_type_hints(type(spec))[name]
    value = getattr(spec, name)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kind = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    inner = typing.get_args(kind)[0] if typing.get_origin(kind) is tuple else None
    names = [c for c in choices_of(f) if c != value]
    out: list[object] = [None] if optional and value is not None else []
    if kind is bool:
        out.append(not value)
    elif kind is int:
        out.append(3 if value is None else value + 1)
    elif kind is float:
        out.append(0.5 if value is None else value / 2 + 0.25)
    elif kind is str:
        out += names or [*paths, "eval", "body"]
    elif inner is float:
        out.append((0.0, 0.4))
    elif inner is str:
        names = tuple(c for c in choices_of(f) if c != "baseline")
        out += [names[:2], names[:1]] if names else [("alpha_topic",)]
    return [v for v in out if v != value]


def changed(spec: Spec, name: str, paths: list[str], job: Callable[[Spec], object]) -> list[Spec]:
    """Specs that differ from ``spec`` in option ``name`` only and that the ``job`` accepts; at least one."""
    specs = []
    for value in other_values(spec, name, paths):
        try:
            other = replace(spec, **{name: value})
            job(other)
        except (SpecError, ValueError):
            continue
        if other != spec:  # None may stand for the default the spec already holds
            specs.append(other)
    assert specs, f"no other valid value found for option {name!r}: teach other_values its type"
    return specs


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    rows = [{"text": f"document number {i} reads well.", "body": f"another text {i}."} for i in range(6)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_every_sweep_option_that_changes_results_is_in_the_resume_key(corpus: Path, tmp_path: Path) -> None:
    # Every conditional option is active: a limit (its sample), an exclusion (its seed), and a
    # calibration dataset (its limit).
    base = SweepSpec(scores=("ahon_ln", "random"), limit=5, exclude_limit=3, calibration=str(corpus))
    paths = [str(corpus.with_name("other.jsonl"))]
    corpus.with_name("other.jsonl").write_text(corpus.read_text())

    def key(spec: SweepSpec) -> dict:
        calibration = plan_calibration(spec, "tiny")
        return sweep_key(spec, model="tiny", task="piqa", dtype="float32", device="cpu", calibration=calibration)

    def files(spec: SweepSpec) -> set[str]:
        return {p.file_name for p in sweep_points(spec)}

    kinds = {}
    for f in fields(SweepSpec):
        for other in changed(base, f.name, paths, key):
            if f.metadata.get("runtime"):
                assert key(other) == key(base), f.name  # declared not to change results
                kinds[f.name] = "runtime"
            elif f.name in SWEEP_AXES:
                assert files(other) != files(base), f.name  # another point file, not another setting
                kinds[f.name] = "axis"
            else:
                assert key(other) != key(base), f"{f.name} changes results but not the resume key"
                kinds[f.name] = "key"
    assert set(kinds) == {f.name for f in fields(SweepSpec)}
    assert kinds["scores"] == kinds["targets"] == "axis" and kinds["seed"] == "key"


def test_every_collect_option_that_changes_results_is_in_the_resume_key(
    corpus: Path, tmp_path: Path, tokenizer
) -> None:
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.headstats_name = "tiny"
    base = CollectSpec(limit=3, scores=("ahon", "awft"))

    def plan(spec: CollectSpec):
        return plan_collection(model, tokenizer, str(corpus), tmp_path / "out", spec)

    def key(spec: CollectSpec) -> dict:
        return plan(spec).settings

    kinds = {}
    for f in fields(CollectSpec):
        for other in changed(base, f.name, [str(tmp_path)], key):
            if f.metadata.get("runtime"):
                assert key(other) == key(base), f.name
                kinds[f.name] = "runtime"
            elif f.name in COLLECT_AXES:
                # Another limit reads the same table: one sample that grows (or every document).
                small, other_sample = plan(base).wanted, plan(other).wanted
                assert key(other) == key(base) and (other_sample is None or small < other_sample), f.name
                kinds[f.name] = "axis"
            else:
                assert key(other) != key(base), f"{f.name} changes results but not the resume key"
                kinds[f.name] = "key"
    assert set(kinds) == {f.name for f in fields(CollectSpec)}
    assert kinds["max_length"] == kinds["scores"] == kinds["padding_side"] == "key"


def test_a_resumed_sweep_with_a_changed_setting_is_refused(tmp_path: Path, tokenizer, data_dir: Path) -> None:
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.headstats_name = "tiny"
    sweep = dict(scores="random", targets=[0, 0.5], data_dir=str(data_dir), progress=False, exclude_limit=1)
    partition = run_sweep(model, "piqa", tokenizer=tokenizer, out=tmp_path / "out", **sweep)
    assert sorted(p.name for p in partition.glob("*.parquet")) == [
        "baseline.parquet",
        "point-random-0.5.parquet",
        "point-random-0.parquet",
    ]
    # The same settings resume (nothing left); more targets add points.
    assert plan_sweep(model, "piqa", out=tmp_path / "out", **sweep).pending() == []
    assert len(plan_sweep(model, "piqa", out=tmp_path / "out", **{**sweep, "targets": [0, 0.2, 0.5]}).pending()) == 1
    # A setting at its default that the partition's run did not use is a changed setting too (here:
    # no exclusion, where the partition's questions left one out).
    for change in ({"exclude_limit": None}, {"exclude_seed": 1}, {"seed": 1}, {"attention_kernel": "explicit"}):
        with pytest.raises(store.StoreError, match=rf"other settings.*{next(iter(change))}"):
            plan_sweep(model, "piqa", out=tmp_path / "out", **{**sweep, **change})
    # The weights (their commit or content hash) are part of the key once they load.
    other = tiny_model("llama", seed=1)
    other.resize_token_embeddings(len(tokenizer))
    other.headstats_name, other.headstats_commit = "tiny", "other-weights"
    with pytest.raises(store.StoreError, match=r"other settings.*revision"):
        run_sweep(other, "piqa", tokenizer=tokenizer, out=tmp_path / "out", **{**sweep, "targets": [0.2]})


@pytest.mark.parametrize("analysis", ["study.toml", "study_fine.toml"])
def test_committed_study_results_match_their_resume_keys(analysis: str, monkeypatch) -> None:
    """The committed results of the study (results/study*, written on CPU in bf16) resume: the key
    the analysis file gives is the one their records hold, calibration included."""
    monkeypatch.chdir(ROOT)  # an analysis file's paths are relative to where it runs
    spec = load_analysis(ROOT / "analyses" / analysis)
    checked = 0
    for model in spec.models:
        for ablation in spec.ablate:
            sweep = narrow(ablation, SweepSpec)
            partition = store.partition_dir(spec.results, model=model_slug(model), task=str(ablation.task))
            if not store.has_data(partition):
                continue
            calibration = plan_calibration(sweep, model)
            key = sweep_key(
                sweep, model=model, task=str(ablation.task), dtype="bfloat16", device="cpu", calibration=calibration
            )
            check_sweep_key(partition, key, sweep)
            assert same_key(store.read_calibration(partition)["run_key"], key)
            checked += 1
    assert checked >= 3


def test_every_collect_option_changes_the_plan_or_is_declared_runtime(tmp_path: Path, bos_tokenizer) -> None:
    """The plan, not only the key: each option either changes what a collection computes (its score ids,
    the token sequences it scores and their truncation, how they are batched), which the run and the dry
    run both read from :class:`~headstats.jobs.collect.Collection`, or is declared ``runtime`` and changes
    none of it. (A tokenizer that adds BOS, so that the prompt formats differ on plain text.)"""
    tokenizer = bos_tokenizer
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.headstats_name = "tiny"
    # Enough documents that another seed draws another sample.
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"text": f"document number {i} reads well.", "body": f"another text {i}."} for i in range(40)]
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    base = CollectSpec(limit=5, scores=("ahon", "awft"))

    def plan(spec: CollectSpec, dataset: str = str(corpus)) -> tuple:
        run = plan_collection(model, tokenizer, dataset, tmp_path / "out", spec)
        sequences = tuple((key, tuple(ids)) for key, ids in run.sequences(tokenizer))
        return run.ids, sequences, run.max_length, run.spec.padding_side, run.source.identity

    kinds = {}
    planned = plan(base)
    for f in fields(CollectSpec):
        if f.name == "data_dir":  # where a task's data comes from: a user file ignores it (a task below)
            continue
        others = [plan(other) for other in changed(base, f.name, [str(tmp_path)], plan)]
        if f.metadata.get("runtime"):
            assert all(p == planned for p in others), f"{f.name} is declared runtime but changes the plan"
            kinds[f.name] = "runtime"
        else:
            # Some values may plan the same work (a prompt format that resolves to the tokenizer's own on
            # this model); another value of the option must not.
            assert any(p != planned for p in others), f"{f.name} is in the resume key but changes nothing planned"
            kinds[f.name] = "plan"
    first, second = build_data_dir(tmp_path / "data"), build_data_dir(tmp_path / "other_data")
    rows = [{"goal": f"{g} Think.", "sol1": a, "sol2": b, "label": y} for g, a, b, y in PIQA]
    save_rows(second, "piqa/plain_text/validation", rows)
    on_piqa = [plan(CollectSpec(data_dir=str(path), limit=5), "piqa") for path in (first, second)]
    assert on_piqa[0] != on_piqa[1]
    kinds["data_dir"] = "plan"
    assert set(kinds) == {f.name for f in fields(CollectSpec)}
    assert kinds["batch_size"] == kinds["rows_per_part"] == "runtime" and kinds["seed"] == "plan"


def test_every_sweep_option_changes_the_plan_or_is_declared_runtime(corpus: Path, tmp_path: Path, bos_tokenizer):
    """The plan of a sweep (its point files, attention kernel, questions, the token sequences the model
    reads, its calibration and the sequences a calibration dataset gives it, the random draws' seed)
    changes with every option, except those declared ``runtime``. MMLU, so that every option (subjects
    too) applies; a tokenizer that adds BOS, so that the prompt formats differ."""
    from headstats.io.tasks.base import question_fingerprint
    from headstats.jobs.evaluate import model_sequences

    tokenizer = bos_tokenizer
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.headstats_name = "tiny"
    first, second = build_data_dir(tmp_path / "data"), build_data_dir(tmp_path / "other_data")
    save_rows(
        second,
        "hails/mmlu_no_train/alpha_topic/test",
        [{"question": "What is one plus one?", "subject": "alpha_topic", "choices": ["1", "2", "3", "4"], "answer": 1}],
    )
    corpus.with_name("other.jsonl").write_text(corpus.read_text() + '\n{"text": "one more document."}')
    paths = [str(second), str(corpus.with_name("other.jsonl"))]
    base = SweepSpec(
        scores=("ahon_ln", "random"), limit=4, exclude_limit=2, calibration=str(corpus), data_dir=str(first)
    )

    def plan(spec: SweepSpec) -> tuple:
        if spec.data_dir is None:  # the embedded data: integration tests only (changed() skips the value)
            raise ValueError("the embedded data")
        swept = plan_sweep(model, "mmlu", out=tmp_path / "out", spec=spec)
        questions = swept.task.questions
        sequences = model_sequences(model, tokenizer, questions, spec.prompt_format)
        return (
            tuple(p.file_name for p in swept.points),
            swept.materialise,
            tuple(question_fingerprint(q) for q in questions),
            tuple(tuple(s.input_ids) for s in sequences),
            (swept.calibration_plan.source, swept.calibration_plan.limit),
            tuple(map(tuple, swept.calibration_sequences(tokenizer, spec.prompt_format)))
            if swept.calibration_plan.limit is not None
            else None,
            spec.seed if any(s == "random" for s in swept.scores) else None,  # the random score's draws
        )

    kinds = {}
    planned = plan(base)
    for f in fields(SweepSpec):
        others = [plan(other) for other in changed(base, f.name, paths, plan)]
        if f.metadata.get("runtime"):
            assert all(p == planned for p in others), f"{f.name} is declared runtime but changes the plan"
            kinds[f.name] = "runtime"
        else:
            assert any(p != planned for p in others), f"{f.name} is in the resume key but changes nothing planned"
            kinds[f.name] = "plan"
    assert set(kinds) == {f.name for f in fields(SweepSpec)}
    assert kinds["batch_size"] == kinds["progress"] == "runtime" and kinds["subjects"] == "plan"


def test_the_analysis_sections_add_only_their_axes_to_the_planned_specs() -> None:
    """An analysis file's ``[collect]`` and ``[[ablate]]`` are the planned specs (each option held to
    the plan by the tests above) and the axis that names their partitions, nothing else: an option
    added to a group they compose is planned, or those tests fail."""
    from headstats.specs import AblateSection, CollectSection

    def names(spec: type[Spec]) -> set[str]:
        return {f.name for f in fields(spec)}

    assert names(CollectSection) - names(CollectSpec) == {"datasets"}
    assert names(AblateSection) - names(SweepSpec) == {"task"}
    assert names(CollectSpec) <= names(CollectSection) and names(SweepSpec) <= names(AblateSection)


def test_every_confirmation_option_changes_its_sweeps_or_its_rule_or_is_declared_runtime(corpus: Path, tmp_path):
    """A ``[confirm]`` option reaches the work through the sweeps the file expands into (a sweep's
    option: held to the sweep's plan by the test above) or through the rule that decides the claims
    (the paths, the tolerated drop, the confidence, the metric: the registration a rerun must match).
    Each changes its sweeps (a sweep's option) or the rule (the others), except those declared
    ``runtime``, which change neither."""
    from headstats.jobs.confirm import ConfirmPlan, expand, registration
    from headstats.specs import Claim, ConfirmSection

    base = ConfirmSection(task="piqa", limit=5, exclude_limit=3, calibration=str(corpus))
    claims = [Claim(model="tiny", score="ahon_ln", target=0.1), Claim(model="tiny", score="awft", target=0.05)]
    paths = [str(corpus.with_name("other.jsonl"))]
    corpus.with_name("other.jsonl").write_text(corpus.read_text())

    def view(section: ConfirmSection) -> tuple:
        plan = ConfirmPlan("c", tmp_path / "c.toml", "", tmp_path / "results", tmp_path / "report", section, claims)
        sweeps = [
            (path.name, spec.results, str(spec.ablate[0].task), narrow(spec.ablate[0], SweepSpec).settings())
            for path, spec in expand(plan)
        ]
        return json.dumps(sweeps, sort_keys=True, default=str), registration(plan)["keys"]

    planned = view(base)
    sweep_options = {f.name for f in fields(AblateSection)}
    kinds = {}
    for f in fields(ConfirmSection):
        others = [view(other) for other in changed(base, f.name, paths, view)]
        if f.metadata.get("runtime"):
            assert all(v == planned for v in others), f"{f.name} is declared runtime but changes the sweeps or rule"
            kinds[f.name] = "runtime"
        elif f.name in sweep_options:
            assert any(v[0] != planned[0] for v in others), f"{f.name} does not reach the sweeps it expands into"
            kinds[f.name] = "sweep"
        else:
            assert any(v[1] != planned[1] for v in others), f"{f.name} changes neither the sweeps nor the rule"
            kinds[f.name] = "rule"
    assert set(kinds) == {f.name for f in fields(ConfirmSection)}
    assert kinds["limit"] == kinds["exclude_limit"] == "sweep" and kinds["batch_size"] == "runtime"
    assert kinds["drop"] == kinds["confidence"] == kinds["metric"] == kinds["kernels"] == "rule"
