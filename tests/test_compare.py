"""``headstats compare``: a model against an identical copy and against a copy with one head changed,
the equivalence rule's size at the margin, the permutation count and the format-change yardstick."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from families import tiny_model

import headstats
from headstats.cli import main
from headstats.jobs.compare import COMPARED, FORMAT_CHANGE
from headstats.stats.compare import (
    EQUIVALENT,
    MOVED,
    UNDETERMINED,
    equivalence,
    permutation_count,
    texts_to_decide,
)
from headstats.stats.movement import head_shift_test
from headstats.stats.multiple import holm_floor

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WORDS = [
    "the",
    "a",
    "head",
    "layer",
    "token",
    "attends",
    "first",
    "last",
    "sink",
    "norm",
    "value",
    "output",
    "query",
    "key",
    "model",
    "text",
    "score",
]
LAYER, HEAD = 2, 1  # the last layer of tiny_model("llama") (3 layers x 4 heads): the head whose queries shrink
PLANTED_LAYER, PLANTED_HEAD = 1, 2  # a middle layer's head whose output rows of W_O are scaled by 3


def _texts(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 20)))) + "." for _ in range(n)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> dict[str, Path]:
    """A tiny Llama saved three times: as it is ("base"), an identical copy ("copy"), and a copy whose last
    layer has head HEAD's query-projection rows scaled by 0.3 ("scaled"); a copy whose middle layer has head
    PLANTED_HEAD's output rows of W_O (its columns of o_proj) scaled by 3 ("planted"); a copy of the base with a
    little noise in every weight ("noisy", a stand-in for a seed replicate); and a corpus of 24 texts."""
    root = tmp_path_factory.mktemp("compare")
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    paths = {}
    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for weight in noisy.parameters():
            weight.add_(0.02 * weight.std() * torch.randn(weight.shape, generator=generator))
    paths["noisy"] = root / "noisy"
    noisy.save_pretrained(paths["noisy"])
    tokenizer.save_pretrained(paths["noisy"])
    planted = copy.deepcopy(model)
    o = planted.model.layers[PLANTED_LAYER].self_attn.o_proj
    head_dim = o.weight.shape[1] // planted.config.num_attention_heads
    with torch.no_grad():
        o.weight[:, PLANTED_HEAD * head_dim : (PLANTED_HEAD + 1) * head_dim] *= 3.0
    paths["planted"] = root / "planted"
    planted.save_pretrained(paths["planted"])
    tokenizer.save_pretrained(paths["planted"])
    for name in ("base", "copy", "scaled"):
        if name == "scaled":
            q = model.model.layers[LAYER].self_attn.q_proj
            head_dim = q.weight.shape[0] // model.config.num_attention_heads
            with torch.no_grad():
                q.weight[HEAD * head_dim : (HEAD + 1) * head_dim] *= 0.3
        paths[name] = root / name
        model.save_pretrained(paths[name])
        tokenizer.save_pretrained(paths[name])
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(_texts(24)))
    paths["corpus"] = corpus
    return paths


@pytest.fixture(scope="module")
def report(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    code = main(
        [
            "compare",
            str(folders["base"]),
            str(folders["copy"]),
            str(folders["scaled"]),
            str(folders["planted"]),
            "--data",
            str(folders["corpus"]),
            "--device",
            "cpu",
            "--n-resamples",
            "200",
            "--head-permutations",
            "999",
            "--out",
            str(out),
            "--self-comparison",  # base and copy hold the same weights: on purpose, a check of the method
            "-q",
        ]
    )
    assert code == 0
    return out


def test_an_identical_copy_moves_nothing_and_is_equivalent_everywhere(report: Path) -> None:
    table = pd.read_csv(report / "tables" / "distances.csv")
    copy = table[table["model_b"] == "copy"]
    assert len(copy) > 5 and (copy["w1"] == 0).all() and (copy["p_value"] == 1).all()
    assert (copy["verdict"] == EQUIVALENT).all() and not copy["moved"].any()
    assert not pd.read_csv(report / "tables" / "heads_by_score.csv").query("model_b == 'copy'")["n_significant"].any()
    heads = pd.read_csv(report / "tables" / "heads.csv").query("model_b == 'copy'")
    assert len(heads) == 12 and (heads["verdict"] == EQUIVALENT).all() and (heads["largest_shift"] == 0).all()
    cells = pd.read_csv(report / "tables" / "head_shifts.csv").query("model_b == 'copy'")
    assert cells["exact"].all() and cells[["shift_iqr_low", "shift_iqr_high"]].isna().all().all()
    summary = (report / "summary.md").read_text()
    assert (
        "**copy vs base**: [equivalent](#verdicts) within the [format-change margin](#the-margin) on "
        f"{len(copy)} of {len(copy)} dataset × score pairs; per head, 12 of 12 [equivalent within their margin]"
        "(#how-far-each-head-moved); a [permutation test](#movement-test) tells the distributions apart on 0 of"
    ) in summary


def _verdicts(report: Path, model: str) -> pd.DataFrame:
    return pd.read_csv(report / "tables" / "heads.csv").query("model_b == @model").set_index(["layer", "head"])


def test_a_head_with_scaled_queries_is_told_apart_but_moved_less_than_its_margin(report: Path) -> None:
    """Queries scaled by 0.3 in a random model whose attention is near uniform barely move its scores (entropy
    by 0.1 of its IQR, where the chat template moves that head 0.3): the sign-flip test tells that head, and
    only it, apart from the reference; by size it is within its margin, and no head moved beyond it."""
    heads = _verdicts(report, "scaled")
    assert list(heads.index[heads["n_significant"] > 0]) == [(LAYER, HEAD)]
    assert (heads["verdict"] != MOVED).all() and heads.loc[(LAYER, HEAD), "verdict"] == EQUIVALENT
    assert (heads.drop(index=(LAYER, HEAD))["largest_shift"] == 0).all()  # every other head: unchanged
    assert "**scaled vs base**" in (report / "summary.md").read_text()
    # the per-head test itself, on every score that reads one head: only that head of the layer moves
    scores = headstats.read_scores(report / "results" / COMPARED)
    for sid in ("awft", "entropy", "ahon", "fhon", "lthon_hn"):
        test = head_shift_test(scores, "base", "scaled", sid, n_perm=999)
        layer = test[test["layer"] == LAYER].set_index("head")
        assert not layer.drop(index=HEAD)["moved"].any() and (layer.drop(index=HEAD)["mean_diff"] == 0).all()
        assert not test[test["layer"] != LAYER]["moved"].any()
    assert (
        head_shift_test(scores, "base", "scaled", "entropy", n_perm=999)
        .set_index(["layer", "head"])
        .loc[(LAYER, HEAD), "moved"]
    )


def test_a_planted_change_in_one_heads_output_rows_is_found_beyond_the_margin_and_no_earlier_head(
    report: Path,
) -> None:
    """W_O's rows of one head of the middle layer scaled by 3: that head moved beyond its margin; every head
    of the layer before it, and every other head of its own layer, is unchanged on every text (exact, 0)
    and equivalent; heads of the layer after it read a changed input and may move."""
    heads = _verdicts(report, "planted")
    assert heads.loc[(PLANTED_LAYER, PLANTED_HEAD), "verdict"] == MOVED
    assert heads.loc[(PLANTED_LAYER, PLANTED_HEAD), "moved_on"].startswith("fhon")  # the score that reads W_O
    earlier = heads[(heads.index.get_level_values("layer") < PLANTED_LAYER)]
    same_layer = heads.loc[PLANTED_LAYER].drop(index=PLANTED_HEAD)
    for rows in (earlier, same_layer):
        assert len(rows) and (rows["verdict"] == EQUIVALENT).all() and (rows["largest_shift"] == 0).all()
    cells = pd.read_csv(report / "tables" / "head_shifts.csv").query("model_b == 'planted' and head_local")
    planted = cells[(cells["layer"] == PLANTED_LAYER) & (cells["head"] == PLANTED_HEAD)].set_index("score")
    # fhon triples: the shift is twice the reference's mean, in its IQR
    assert planted.loc["fhon", "shift_iqr"] == pytest.approx(
        2 * planted.loc["fhon", "mean_a"] / planted.loc["fhon", "iqr_a"]
    )
    assert (planted.drop(index="fhon")["shift_iqr"] == 0).all()  # what it reads before W_O is unchanged


def test_no_committed_style_table_of_a_comparison_holds_an_infinity(report: Path) -> None:
    for table in (report / "tables").glob("*.csv"):
        numbers = pd.read_csv(table).select_dtypes("number")
        assert np.isfinite(numbers.to_numpy(dtype=float)[~numbers.isna().to_numpy()]).all(), table.name


def test_the_permutation_count_lets_holm_reach_one_percent(report: Path) -> None:
    table = pd.read_csv(report / "tables" / "distances.csv")
    n_tests, n_perm = int(table["p_value"].notna().sum()), int(table["n_perm"].iloc[0])
    assert n_perm == permutation_count(n_tests) and holm_floor(n_tests, n_perm) <= 0.01
    assert holm_floor(n_tests, n_perm - 1) > 0.01  # and not more than needed
    assert (
        f"{n_perm} permutations per test, chosen so that Holm over this report's family of {n_tests} tests"
        in (report / "summary.md").read_text()
    )
    for n in (1, 9, 90, 1234):
        assert holm_floor(n, permutation_count(n)) <= 0.01 < holm_floor(n, permutation_count(n) - 1)
    # a p-value at the floor says only that no permutation reached the distance: shown as "<= floor"
    shown = pd.read_csv(report / "tables" / "verdicts.csv")["p (Holm)"].astype(str)
    floor = table["p_holm_min"].iloc[0]
    at_floor = (table["p_holm"] <= floor * (1 + 1e-9)).to_numpy()
    assert at_floor.any() and (shown[at_floor] == f"<= {floor:.2g}").all()
    assert (shown[~at_floor].astype(float) > floor).all()


def test_the_terminal_prints_each_models_answer_before_the_reports_path(
    folders: dict[str, Path], report: Path, tmp_path: Path, capsys
) -> None:
    args = [str(folders[name]) for name in ("base", "copy", "planted")]
    code = main(
        ["compare", *args, "--data", str(folders["corpus"]), "--device", "cpu", "--n-resamples", "50",
         "--head-permutations", "99", "--scores-dir", str(report / "results"), "--out", str(tmp_path / "out"), "-q",
         "--self-comparison"]  # the copy holds the base's weights: on purpose, a check of the method
    )  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[2] == f"report: {tmp_path / 'out' / 'index.html'}"
    assert lines[0].startswith("copy vs base: equivalent within the format-change margin on ")
    assert lines[1].startswith("planted vs base: ") and f"moved beyond it: L{PLANTED_LAYER} H{PLANTED_HEAD}" in lines[1]
    assert "[" not in lines[0] + lines[1] and "**" not in lines[0] + lines[1]  # plain text, no Markdown


def test_the_format_change_yardstick_is_measured_on_the_same_texts(report: Path) -> None:
    compared = headstats.read_scores(report / "results" / COMPARED)
    changed = headstats.read_scores(report / "results" / FORMAT_CHANGE)
    base = compared[compared["model"] == "base"]
    assert set(changed["model"]) == {"base"}
    assert set(changed["sample_id"]) == set(base["sample_id"]) and len(set(base["sample_id"])) == 24
    # the chat template wraps every text: more tokens per text, the same texts
    tokens = lambda t: t.groupby("sample_id")["n_tokens"].first()  # noqa: E731
    assert (tokens(changed) > tokens(base)).all()
    yard = pd.read_csv(report / "tables" / "format_change.csv")
    table = pd.read_csv(report / "tables" / "distances.csv")
    margins = table.merge(yard.rename(columns={"w1_iqr": "yardstick"}), on=["dataset", "score"])
    assert len(margins) == len(table) and np.allclose(margins["margin"], margins["yardstick"])
    assert (yard["texts"] == 24).all()


def test_a_rerun_collects_nothing_again(folders: dict[str, Path], report: Path, tmp_path: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in (report / "results").rglob("*.parquet")}
    index = headstats.compare(
        [str(folders["base"]), str(folders["copy"])],
        out=str(tmp_path / "again"),
        scores_dir=str(report / "results"),
        data=(str(folders["corpus"]),),
        device="cpu",
        n_resamples=50,
        head_permutations=99,
        progress=False,
        self_comparison=True,
    )
    assert index.name == "index.html"
    assert {p: p.stat().st_mtime_ns for p in (report / "results").rglob("*.parquet")} == before


def test_score_tables_in_the_report_folder_are_not_called_foreign(
    folders: dict[str, Path], report: Path, tmp_path: Path, caplog
) -> None:
    shutil.copytree(report / "results", tmp_path / "out" / "results")  # the default OUT/results, already collected
    (tmp_path / "out" / "mine.txt").write_text("a user's own file")
    with caplog.at_level("WARNING", logger="headstats"):
        headstats.compare(
            [str(folders["base"]), str(folders["copy"])],
            out=str(tmp_path / "out"),
            data=(str(folders["corpus"]),),
            device="cpu",
            n_resamples=50,
            head_permutations=99,
            progress=False,
            self_comparison=True,
        )
    foreign = [r.getMessage() for r in caplog.records if "that no headstats build listed" in r.getMessage()]
    assert len(foreign) == 1
    assert foreign[0].endswith("1 file(s) that no headstats build listed in _manifest.json; they were kept: mine.txt")


@pytest.mark.parametrize(
    ("low", "high", "margin", "verdict"),
    [
        (0.1, 0.4, 0.5, EQUIVALENT),
        (0.6, 0.9, 0.5, MOVED),
        (0.3, 0.7, 0.5, UNDETERMINED),
        (0.1, 0.2, np.nan, UNDETERMINED),
    ],
)
def test_the_interval_inclusion_rule(low, high, margin, verdict) -> None:
    assert equivalence(low, high, margin) == verdict


def test_texts_to_decide_scale_with_the_observed_half_width() -> None:
    # distance 0.4, upper half-width 0.2 at 100 texts; the margin 0.5 is 0.1 away: 4 times the texts
    assert texts_to_decide(0.4, 0.3, 0.6, 0.5, 100) == 400
    assert texts_to_decide(0.6, 0.45, 0.8, 0.5, 100) == 225  # lower half-width 0.15 against 0.1
    assert np.isnan(texts_to_decide(0.5, 0.4, 0.6, 0.5, 100))  # none would: no infinity in a table


@pytest.mark.parametrize("margin", [0.1, 0.3])
def test_the_verdicts_keep_their_level_at_the_margin(margin: float) -> None:
    """Paired texts whose two score distributions are N(0, 1) and N(margin, 1) (true W1 = margin), each
    text a block of rows sharing a text effect (benchmarks/compare_margin_size.py's design): at 40 texts
    the rule calls them moved beyond the margin, and equivalent within it, each at most alpha = 5% of the
    time plus three Monte Carlo standard errors. The basic bootstrap's lower bound alone said "moved" 8%
    of the time at the margin 0.1 (W1's upward bias, larger the closer the distributions)."""
    from headstats.testing.margin import verdict_rates

    reps, alpha = 2000, 0.05
    at = verdict_rates(40, margin, margin, reps, alpha=alpha, seed=7)
    limit = alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps)
    assert at["moved"] <= limit and at["equivalent"] <= limit


def test_a_compare_study_file_runs_under_headstats_run(
    folders: dict[str, Path], report: Path, tmp_path: Path, capsys
) -> None:
    study = tmp_path / "mine.toml"
    study.write_text(
        'description = "Base against its copy"\n'
        f'results = "{report / "results"}"\n'
        f'report = "{tmp_path / "report"}"\n'
        "[compare]\n"
        f'models = ["{folders["base"]}", "{folders["copy"]}"]\n'
        f'data = ["{folders["corpus"]}"]\n'
        'device = "cpu"\nn_resamples = 50\nhead_permutations = 99\nself_comparison = true\n'
    )
    assert main(["run", str(study), "--dry-run", "-q"]) == 0  # every collection sized, nothing written
    plan = capsys.readouterr().out
    assert plan.count(" collect ") == 3 and "(format-change)" in plan
    assert "0 batched forward passes still to run" in plan
    assert not (tmp_path / "report").exists()
    assert main(["run", str(study), "-q"]) == 0
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert summary.startswith("# Base against its copy") and "**copy vs base**" in summary
    study.write_text(study.read_text() + "n_boot = 5\n")
    assert main(["run", str(study), "-q"]) == 2  # an unknown key is refused before any work


def test_a_dtype_suffix_names_a_model_in_another_dtype(tmp_path: Path, monkeypatch) -> None:
    from headstats.jobs.compare import split_dtype

    assert split_dtype("smollm2-135m@bfloat16") == ("smollm2-135m", "bfloat16")
    assert split_dtype("org/model@v2") == ("org/model@v2", None)  # not a dtype: part of the name
    assert split_dtype("smollm2-135m") == ("smollm2-135m", None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "only@bfloat16").mkdir()  # a folder of that exact name, and no model "only": the folder
    assert split_dtype("only@bfloat16") == ("only@bfloat16", None)
    assert split_dtype(str(tmp_path / "only@bfloat16")) == (str(tmp_path / "only@bfloat16"), None)
    (tmp_path / "only").mkdir()  # now both readings name a model: refused, saying how to give either
    with pytest.raises(ValueError) as err:
        split_dtype("only@bfloat16")
    assert str(err.value) == (
        "'only@bfloat16' names both the folder only@bfloat16 and only in bfloat16: give only@bfloat16/ (with the "
        "slash) for the folder, or rename the folder to compare only in bfloat16"
    )
    assert split_dtype("only@bfloat16/") == ("only@bfloat16/", None)


SELF = (
    "every distance would be noise, not a finding: give another model, or --self-comparison (self_comparison = true "
    "in a study file) to compare a model with itself on purpose"
)
# (case, the models after `headstats compare`, the start of the one line that refuses them, given the folders)
IDENTITIES = [
    (
        "the reference as the compared model",
        lambda f: [f["base"], f["base"]],
        lambda f: f"'{f['base']}' is '{f['base']}' itself (given twice): {SELF}",
    ),
    (
        "the reference as its own replicate",
        lambda f: [f["base"], f["scaled"], "--replicates", f["base"]],
        lambda f: f"'{f['base']}' is '{f['base']}' itself (given twice): {SELF}",
    ),
    (
        "the reference's folder named otherwise",
        lambda f: [f["base"], f"{f['base']}/../base"],
        lambda f: f"'{f['base']}/../base' is '{f['base']}' itself (the same folder, in float32): {SELF}",
    ),
    (
        "a copy of the reference's weights",
        lambda f: [f["base"], f["copy"]],
        lambda f: f"'{f['copy']}' is '{f['base']}' itself (the same weights, sha256:",
    ),
    (
        "a folder named like the reference in a dtype",
        lambda f: [f["base"], f"{f['base']}@bfloat16"],
        lambda f: (
            f"'{f['base']}@bfloat16' names both the folder {f['base']}@bfloat16 and {f['base']} in bfloat16: give "
            f"{f['base']}@bfloat16/ (with the slash) for the folder, or rename the folder to compare {f['base']} in "
            "bfloat16"
        ),
    ),
]


@pytest.mark.parametrize(("models", "said"), [c[1:] for c in IDENTITIES], ids=[c[0] for c in IDENTITIES])
def test_a_model_compared_with_itself_is_refused_before_any_work(
    models, said, folders: dict[str, Path], tmp_path: Path, capsys
) -> None:
    shutil.copytree(folders["scaled"], f"{folders['base']}@bfloat16", dirs_exist_ok=True)
    named = {k: str(v) for k, v in folders.items()}
    args = ["compare", *models(named), "--data", named["corpus"], "--device", "cpu", "--out", str(tmp_path / "o")]
    assert main([*args, "-q"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"headstats: error: {said(named)}"), line
    assert not (tmp_path / "o").exists()  # refused before anything is written
    if args[2] == named["copy"]:  # a self-comparison asked for on purpose runs
        assert main([*args, "--self-comparison", "--n-resamples", "20", "--head-permutations", "19", "-q"]) == 0


def _study(tmp: Path, folders: dict[str, Path], results: Path, models: list[str]) -> Path:
    study = tmp / "study.toml"
    study.write_text(
        f'results = "{results}"\nreport = "{tmp / "rep"}"\n[compare]\nmodels = {json.dumps(models)}\n'
        f'data = ["{folders["corpus"]}"]\ndevice = "cpu"\nn_resamples = 20\nhead_permutations = 19\n'
    )
    return study


def _swap_in(results: Path, model: str, source: str) -> Path:
    """The compared table of ``model`` replaced by ``source``'s (its data files and records)."""
    (partition,) = (results / COMPARED / f"model={model}").glob("dataset=*")
    shutil.rmtree(partition)
    shutil.copytree(results / COMPARED / f"model={source}" / partition.name, partition)
    return partition


def _collected_with_seed(results: Path, model: str, seed: int) -> Path:
    """The compared table of ``model`` recorded as collected with another ``seed`` (its other texts)."""
    (partition,) = (results / COMPARED / f"model={model}").glob("dataset=*")
    record = json.loads((partition / "_provenance.json").read_text())
    record["settings"]["seed"] = seed
    (partition / "_provenance.json").write_text(json.dumps(record))
    return partition


def test_a_table_that_holds_another_model_or_settings_is_refused_by_name(
    folders: dict[str, Path], report: Path, tmp_path: Path, capsys
) -> None:
    """The report stage reads the tables alone: a compared model's table replaced by the reference's
    (its records name the reference), two models whose tables hold the same weights, the reference
    given twice, and a table collected with another seed are each refused in one line naming the
    table and the difference."""
    fix = "give another results folder, or move that table away and collect it again"
    scaled, base, copy = (str(folders[k]) for k in ("scaled", "base", "copy"))
    cases = [
        (
            [base, scaled],
            lambda r: _swap_in(r, "scaled", "base"),
            lambda p: f"{p} holds the scores of <local>/base, not of {scaled} (its records name it): {fix}",
        ),
        (
            [base, copy],
            lambda r: None,
            lambda p: f"the score tables of '{base}' and '{copy}' hold the same weights (sha256:",
        ),
        ([base, base], lambda r: None, lambda p: f"'{base}' is '{base}' itself (given twice): "),
        (
            [base, scaled],
            lambda r: _collected_with_seed(r, "scaled", 1),
            lambda p: f"{p} was collected with other settings (seed: 1 there, 0 in the comparison): {fix}",
        ),
    ]
    for i, (models, damage, said) in enumerate(cases):
        results = tmp_path / f"r{i}"
        shutil.copytree(report / "results", results)
        partition = damage(results)
        assert main(["run", str(_study(tmp_path, folders, results, models)), "--stages", "report", "-q"]) == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith(f"headstats: error: {said(partition)}"), line
        assert not (tmp_path / "rep").exists()


def test_the_committed_comparison_is_built_from_its_file_and_results() -> None:
    from headstats.jobs.compare import load_comparison
    from headstats.report.freshness import check_report, recorded_inputs
    from headstats.studies import kind_of

    root = Path(__file__).resolve().parents[1]
    path = root / "analyses" / "compare_embedded.toml"
    assert kind_of(path).name == "comparison"
    spec, _, report = load_comparison(path)
    assert (root / report).is_dir() and (root / spec.scores_dir / COMPARED).is_dir()
    assert check_report(root / report, root=root) == []
    assert recorded_inputs(root / report)["analysis"] == "analyses/compare_embedded.toml"
    heads = pd.read_csv(root / report / "tables" / "heads.csv")
    assert {"layer", "head", "verdict"} <= set(heads.columns)


def test_a_comparison_needs_two_models_and_says_so(tmp_path: Path, capsys) -> None:
    assert main(["compare", "smollm2-135m", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "headstats: error: headstats compare needs a reference and at least one other model: REFERENCE OTHER ..."
    )
    assert main(["compare", "a", "b", "--out", str(tmp_path / "out"), "--alpha", "0.7"]) == 2
    assert "--alpha must lie strictly between 0 and 0.5, not 0.7" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.fixture(scope="module")
def series_report(folders: dict[str, Path], report: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base -> copy -> scaled as a series in the order given, with "noisy" as the reference's replicate (the
    three compared models' tables are reused from ``report``)."""
    out = tmp_path_factory.mktemp("series")
    args = [str(folders[name]) for name in ("base", "copy", "scaled")]
    options = ["--data", str(folders["corpus"]), "--device", "cpu", "--n-resamples", "200"]
    code = main(
        ["compare", *args, *options, "--head-permutations", "99", "--series", "given", "--replicates",
         str(folders["noisy"]), "--scores-dir", str(report / "results"), "--out", str(out), "--self-comparison", "-q"]
    )  # fmt: skip
    assert code == 0
    return out


def test_each_step_of_a_series_is_its_distance_from_the_model_before(series_report: Path) -> None:
    steps = pd.read_csv(series_report / "tables" / "steps.csv")
    distances = pd.read_csv(series_report / "tables" / "distances.csv")
    first, second = steps[steps["step"] == 1], steps[steps["step"] == 2]
    assert set(first["model_a"]) == {"base"} and set(second["model_b"]) == {"scaled"}
    assert (first["w1_iqr"] == 0).all() and (first["verdict"] == EQUIVALENT).all()  # base -> its identical copy
    # copy -> scaled is base -> scaled (the copy is the base), in the reference's unit: the same numbers
    scaled = distances[distances["model_b"] == "scaled"].set_index(["dataset", "score"])
    second = second.set_index(["dataset", "score"]).loc[scaled.index]
    assert np.allclose(second["w1_iqr"], scaled["w1_iqr"]) and np.allclose(second["w1"], scaled["w1"])
    assert (second["w1_iqr_low"] <= second["w1_iqr"]).all() and (second["w1_iqr"] <= second["w1_iqr_high"]).all()
    summary = (series_report / "summary.md").read_text()
    assert "**[Along the series](#along-the-series)** (in the order given): 1 of 2 steps moved beyond" in summary
    assert (series_report / "figures" / "series.png").is_file()


def test_the_seed_yardstick_is_w1_between_replicates_over_the_reference_iqr(series_report: Path, report: Path) -> None:
    from scipy.stats import wasserstein_distance

    scores = headstats.read_scores(report / "results" / COMPARED)
    yard = pd.read_csv(series_report / "tables" / "seed_yardstick.csv")
    assert (yard["group"] == "base").all() and (yard["n_seeds"] == 2).all() and (yard["n_pairs"] == 1).all()
    for row in yard.itertuples():
        base = scores[(scores["model"] == "base") & (scores["dataset"] == row.dataset)][row.score].dropna()
        noisy = scores[(scores["model"] == "noisy") & (scores["dataset"] == row.dataset)][row.score].dropna()
        iqr = base.quantile(0.75) - base.quantile(0.25)
        assert row.seed_max == pytest.approx(wasserstein_distance(base, noisy) / iqr, rel=1e-6)
    distances = pd.read_csv(series_report / "tables" / "distances.csv")
    assert distances["seed_max"].notna().all()
    assert (distances["beyond_seeds"] == (distances["w1_iqr_low"] > distances["seed_max"])).all()
    summary = (series_report / "summary.md").read_text()
    assert "(2 seeds, an anecdote, not a yardstick: fewer than 6)" in summary


def test_a_series_is_ordered_by_step_across_stages_or_by_parameters() -> None:
    from headstats.jobs.compare import order_series
    from headstats.specs import CompareSpec

    facts = pd.DataFrame(
        {
            "slug": ["base", "dpo-8", "sft-40", "sft-10", "seed1"],
            "name": ["b", "d8", "s40", "s10", "r"],
            "role": ["reference", "compared", "compared", "compared", "replicate"],
            "params": [30, 10, 20, 40, 30],
            "stage": ["base", "dpo", "sft", "sft", "sft"],
            "step": [0, 8, 40, 10, 40],
            "stage_order": [-1, 1, 0, 0, 0],
        }
    )
    by_step = order_series(CompareSpec(models=("b", "d8"), series="step"), facts)
    assert list(by_step["slug"]) == ["base", "sft-10", "sft-40", "dpo-8"]
    assert list(by_step["position"]) == [0, 10, 40, 48]  # DPO's step 8 counts on from SFT's 40
    by_params = order_series(CompareSpec(models=("b", "d8"), series="params"), facts)
    assert list(by_params["slug"]) == ["dpo-8", "sft-40", "base", "sft-10"]
    by_step = CompareSpec(models=("b", "d8"), series="step")
    other_family = order_series(by_step, facts.assign(step=[0, None, 40, 10, 40]), {"dpo-8"})
    assert list(other_family["slug"]) == ["base", "sft-10", "sft-40"]  # another architecture without a step: beside
    no_step = facts.assign(step=[0, None, 40, 10, 40], stage=[None, None, None, None, None])
    with pytest.raises(ValueError, match=r"^--series step needs a checkpoint step for every model; 'd8' has none"):
        order_series(CompareSpec(models=("b", "d8"), series="step"), no_step)


def test_a_checkpoint_step_is_read_from_its_record_or_its_table_name() -> None:
    from headstats.jobs.compare import checkpoint_step

    record = {"checkpoint": {"stage": "sft", "step": 40, "chain": "c"}}
    assert checkpoint_step("/gone/sft/step-00040", "c-sft-40", record) == ("sft", 40)
    assert checkpoint_step("/gone/x", "gemma3-270m-b4147ab3bcba-seed-1-dpo-30", {}) == ("dpo", 30)
    assert checkpoint_step("/gone/base", "gemma3-270m-b4147ab3bcba-seed-0-base", {}) == ("base", 0)
    assert checkpoint_step("/gone/checkpoint-500", "checkpoint-500", {}) == (None, 500)
    assert checkpoint_step("/gone/run", "run", {"trainer_step": 1200}) == (None, 1200)
    assert checkpoint_step("smollm2-135m", "smollm2-135m", {}) == (None, None)


def test_a_replicate_names_a_compared_model_or_is_refused() -> None:
    from headstats.jobs.compare import all_models, replicate_groups
    from headstats.specs import CompareSpec

    spec = CompareSpec(models=("base", "sft"), replicates=("base-seed1", "sft=sft-seed1", "sft=sft-seed2"))
    assert replicate_groups(spec) == {"base": ["base", "base-seed1"], "sft": ["sft", "sft-seed1", "sft-seed2"]}
    assert all_models(spec) == ["base", "sft", "base-seed1", "sft-seed1", "sft-seed2"]
    with pytest.raises(ValueError, match=r"^replicate 'dpo=x' names 'dpo', which is not a compared model"):
        replicate_groups(CompareSpec(models=("base", "sft"), replicates=("dpo=x",)))


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    files = (p for p in root.rglob("*") if p.is_file())
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_the_report_stage_reads_the_tables_alone(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Two checkpoints of a chain (records as ``headstats finetune`` writes them) collected by a study
    file; then their folders move away and loading a model raises: the report stage rebuilds the same
    report from the score tables and their records, with the stage labels they record, and writes
    nothing under the results folder. A model whose tables are missing is refused in one line that
    names the table and the command that collects it."""
    import headstats.io.models as models

    chain = tmp_path / "models" / "chain-x"
    for name, where, record in (
        ("base", chain / "base", {"stage": "base"}),
        ("scaled", chain / "sft" / "step-00040", {"stage": "sft", "step": 40, "chain": "chain-x", "seed": 0}),
    ):
        shutil.copytree(folders[name], where)
        (where / "HEADSTATS_CHECKPOINT.json").write_text(json.dumps(record))
    study = tmp_path / "chain.toml"

    def write(report: str, models: list[Path]) -> None:
        study.write_text(
            f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / report}"\n[compare]\n'
            f"models = {json.dumps([str(m) for m in models])}\n"
            f'data = ["{folders["corpus"]}"]\nseries = "step"\n'
            'device = "cpu"\nn_resamples = 50\nhead_permutations = 99\n'
        )

    write("first", [chain / "base", chain / "sft" / "step-00040"])
    assert main(["run", str(study), "-q"]) == 0
    facts = pd.read_csv(tmp_path / "first" / "tables" / "models.csv")
    assert list(facts["slug"]) == ["chain-x-base", "chain-x-sft-40"] and list(facts["label"]) == ["base", "SFT 40"]
    assert list(facts["step"]) == [0, 40] and (facts["params"] > 0).all()

    shutil.move(tmp_path / "models", tmp_path / "elsewhere")  # the checkpoints are gone from where they were

    def no_loading(*args, **kwargs):
        raise AssertionError("the report stage loaded a model")

    monkeypatch.setattr(models, "load_model", no_loading)
    before = _tree(tmp_path / "results")
    write("second", [chain / "base", chain / "sft" / "step-00040"])
    assert main(["run", str(study), "--stages", "report", "-q"]) == 0
    assert _tree(tmp_path / "results") == before
    tables = sorted(p.name for p in (tmp_path / "first" / "tables").iterdir())
    assert tables == sorted(p.name for p in (tmp_path / "second" / "tables").iterdir()) and "steps.csv" in tables
    for name in tables:
        first, second = (tmp_path / report / "tables" / name for report in ("first", "second"))
        assert first.read_bytes() == second.read_bytes()
    first, second = (
        re.sub(r"Generated by .* UTC\.", "", (tmp_path / report / "summary.md").read_text())  # the build's time
        for report in ("first", "second")
    )
    assert first == second.replace("<local>/second", "<local>/first")  # the rebuild line names it, by its name alone

    write("third", [chain / "base", folders["copy"]])  # never collected into this results folder
    capsys.readouterr()
    assert main(["run", str(study), "--stages", "report", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"headstats: error: the score table of {folders['copy']} on {folders['corpus']} "
        f"({tmp_path / 'results' / COMPARED}/model=copy) is not collected: run headstats run {study} --stages "
        "collect first"
    )
    assert not (tmp_path / "third").exists()


def test_the_headline_figure_keeps_a_colour_per_model_and_its_legend_off_the_data(
    folders: dict[str, Path], report: Path
) -> None:
    """One colour per compared model throughout the figure, the verdict as the marker's fill (filled:
    moved beyond the margin), and the legend outside the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from headstats.jobs.compare import read_comparison
    from headstats.report.compare import colours, headline_figure
    from headstats.specs import CompareSpec

    names = tuple(str(folders[name]) for name in ("base", "copy", "scaled"))
    spec = CompareSpec(
        models=names, data=(str(folders["corpus"]),), scores_dir=str(report / "results"), n_resamples=20,
        head_permutations=99, self_comparison=True,
    )  # fmt: skip
    result = read_comparison(spec)
    fig = headline_figure(result)
    ax = fig.axes[0]
    markers = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(markers) == len(result.distances)
    colour = colours(result.others)
    for other in result.others:  # each model's markers in its own colour, as many as its distances
        mine = [m for m in markers if m.get_color() == colour[other]]
        assert len(mine) == int((result.distances["model_b"] == other).sum())
    assert len(set(colour.values())) == len(result.others)
    filled = sum(m.get_fillstyle() == "full" for m in markers)
    assert filled == int((result.distances["verdict"] == MOVED).sum())
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    (legend,) = fig.legends
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_an_abstract_past_its_word_limit_keeps_the_answers_and_sends_the_rest_to_the_body(
    folders: dict[str, Path], report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comparison of many models, a series and seeds makes long abstracts: the report is written all
    the same, the first model's answer kept, the margin's definition and the seed sentence moved out."""
    import headstats.report.compare as compare_report
    from headstats.report.sections.context import word_count

    monkeypatch.setattr(compare_report, "ABSTRACT_WORDS", 70)
    args = [str(folders[name]) for name in ("base", "copy", "scaled")]
    options = ["--data", str(folders["corpus"]), "--device", "cpu", "--n-resamples", "200"]
    code = main(
        ["compare", *args, *options, "--head-permutations", "99", "--series", "given", "--replicates",
         str(folders["noisy"]), "--scores-dir", str(report / "results"), "--out", str(tmp_path / "out"),
         "--self-comparison", "-q"]
    )  # fmt: skip
    assert code == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    lead = summary.split("![", 1)[0].split("\n\n", 2)[2]  # after the title and the sample line
    assert word_count(lead) <= 70
    assert lead.startswith("**scaled vs base**")  # the series end's answer first
    assert "The margin: how far" not in lead and "[Seed replicates]" not in lead
    assert "## " in summary.split("![", 1)[1]  # the body still holds every section


def test_two_stages_with_the_same_weights_are_compared_with_a_note(capsys) -> None:
    """A chain stage that did not change its weights (a GRPO stage whose rewards never varied) is the
    previous stage itself: both are compared with the reference and a note says so; the same weights as
    the reference, or within one model's replicates, stay refused."""
    from headstats.jobs.compare_identity import SELF, identical
    from headstats.specs import CompareSpec

    spec = CompareSpec(models=("base", "sft", "dpo", "grpo"), replicates=("dpo=dpo-1", "grpo=grpo-1", "base-1"))
    identical(spec, "grpo", "dpo", "the same weights, sha256:ab, in float32")
    identical(spec, "grpo-1", "dpo-1", "the same weights, sha256:cd, in float32")
    assert capsys.readouterr().err.splitlines() == [
        "note: 'grpo' is 'dpo' itself (the same weights, sha256:ab, in float32): its distances from 'base' repeat "
        "'dpo''s",
        "note: 'grpo-1' is 'dpo-1' itself (the same weights, sha256:cd, in float32): its distances from 'base' "
        "repeat 'dpo-1''s",
    ]
    for name, other in [("sft", "base"), ("base-1", "base"), ("dpo-1", "dpo")]:
        with pytest.raises(ValueError) as err:
            identical(spec, name, other, "the same folder, in float32")
        assert str(err.value) == f"{name!r} is {other!r} itself (the same folder, in float32): {SELF}"


SMOLLM2_LAYER, SMOLLM2_HEAD = 15, 4  # a middle layer of SmolLM2-135M (30 layers x 9 heads)


@pytest.mark.integration  # the embedded SmolLM2-135M and the bundled PIQA questions
def test_a_planted_change_in_one_head_of_smollm2_is_found_beyond_its_margin_and_no_earlier_head(
    tmp_path: Path,
) -> None:
    """SmolLM2-135M against a copy whose layer-15 head 4 has its query rows scaled by 0.3 (its attention
    flattens), on 24 PIQA questions: that head moved beyond its margin; every head of the 15 layers before
    it, and every other head of its layer, is unchanged on every text and equivalent within its margin."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from headstats.io.assets import embedded_model

    source = Path(embedded_model("smollm2-135m"))
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    q = model.model.layers[SMOLLM2_LAYER].self_attn.q_proj
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        q.weight[SMOLLM2_HEAD * head_dim : (SMOLLM2_HEAD + 1) * head_dim] *= 0.3
    model.save_pretrained(tmp_path / "planted")
    AutoTokenizer.from_pretrained(source).save_pretrained(tmp_path / "planted")
    out = tmp_path / "report"
    headstats.compare(
        ["smollm2-135m", str(tmp_path / "planted")], out=str(out), data=("piqa",), limit=24, device="cpu",
        n_resamples=300, head_permutations=199, progress=False,
    )  # fmt: skip
    heads = pd.read_csv(out / "tables" / "heads.csv").set_index(["layer", "head"])
    print("\nplanted SmolLM2 head, 24 PIQA questions: heads by verdict", heads["verdict"].value_counts().to_dict())
    assert heads.loc[(SMOLLM2_LAYER, SMOLLM2_HEAD), "verdict"] == MOVED
    earlier = heads[heads.index.get_level_values("layer") < SMOLLM2_LAYER]
    same_layer = heads.loc[SMOLLM2_LAYER].drop(index=SMOLLM2_HEAD)
    for rows in (earlier, same_layer):
        assert (rows["verdict"] == EQUIVALENT).all() and (rows["largest_shift"] == 0).all()
    assert len(earlier) == SMOLLM2_LAYER * 9
    assert f"L{SMOLLM2_LAYER} H{SMOLLM2_HEAD}" in (out / "summary.md").read_text()


def test_a_score_the_same_on_every_text_gives_an_exact_distance_and_no_interval() -> None:
    """Two models whose `ftvvn` depends on the head only (every text starts alike) and whose `ahon` varies:
    the `ftvvn` distance is exact (no interval: the bootstrap's zero width is none), its verdict compares it
    with the margin; `ahon` keeps its interval; the constant score is named for both models."""
    from headstats.stats.compare import verdicts, yardstick_distances
    from headstats.stats.constant import texts_constant

    rng = np.random.default_rng(0)
    rows = []
    for model, shift in (("base", 0.0), ("tuned", 0.05)):
        for text in range(20):
            for head in range(6):
                rows.append(
                    {"model": model, "dataset": "piqa", "sample_id": text, "layer": head // 3, "head": head % 3,
                     "ftvvn": 1.0 + head + shift, "ahon": rng.normal(head, 1.0) + shift}
                )  # fmt: skip
    scores = pd.DataFrame(rows)
    table = yardstick_distances(scores, "base", "tuned", ["piqa"], ["ftvvn", "ahon"], n_boot=200).set_index("score")
    assert table.loc["ftvvn", "exact"] and not table.loc["ahon", "exact"]
    assert table.loc["ftvvn", ["w1_iqr_low", "w1_iqr_high", "ci_low", "ci_high"]].isna().all()
    assert table.loc["ahon", ["w1_iqr_low", "w1_iqr_high"]].notna().all()
    w1 = table.loc["ftvvn", "w1_iqr"]
    base = scores.loc[scores["model"] == "base", "ftvvn"]
    assert w1 == pytest.approx(0.05 / np.subtract(*np.quantile(base, [0.75, 0.25])))  # every head moved 0.05
    for margin, verdict in ((2 * w1, EQUIVALENT), (w1 / 2, MOVED)):
        assert verdicts(table.assign(margin=margin).loc[["ftvvn"]])[0] == verdict
    constant = texts_constant(scores, ["base", "tuned"], ["piqa"])
    assert list(zip(constant["model"], constant["score"], strict=True)) == [("base", "ftvvn"), ("tuned", "ftvvn")]
    assert constant["first_token"].all()
