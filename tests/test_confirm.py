"""A pre-registered confirmatory run (issue 26): the claims of a confirmation file run on every
computation path, against held-out questions, and the verdict follows the stated rule."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
import pytest

import headstats
from headstats.options import SpecError
from headstats.stats.confirm import claim_bounds, claim_verdicts
from headstats.stats.paired import drop_bound


def _bounds(rows: list[tuple[str, str, float, bool, float]]) -> pd.DataFrame:
    """A claim_bounds-like table from (claim, path, n_questions or NaN, certified, drop_upper)."""
    return pd.DataFrame(
        [
            {"claim": c, "path": p, "n_questions": n, "certified": ok, "drop_upper": up, "realised_pct": 5.0}
            | {"level": 0.05 / 2}
            for c, p, n, ok, up in rows
        ]
    )


def test_a_claim_is_confirmed_only_when_every_planned_path_certifies_it() -> None:
    nan = float("nan")
    bounds = _bounds(
        [
            ("a", "explicit-float32", 3000, True, 0.8),
            ("a", "fused-float32", 3000, True, 0.9),
            ("b", "explicit-float32", 3000, True, 0.8),
            ("b", "fused-float32", 3000, False, 1.2),
            ("c", "explicit-float32", 3000, True, 0.7),
            ("c", "fused-float32", nan, False, nan),
            ("d", "explicit-float32", 3000, True, 0.6),
        ]
    )
    got = claim_verdicts(bounds, ["explicit-float32", "fused-float32"]).set_index("claim")
    assert got["verdict"].to_dict() == {"a": "confirmed", "b": "not confirmed", "c": "incomplete", "d": "confirmed"}
    # An incomplete claim is neither confirmed nor refuted.
    assert got["confirmed"].tolist() == [True, False, pd.NA, True]
    assert got.loc["b", "worst_bound"] == 1.2 and got.loc["c", "paths"] == "1 of 2"
    assert np.isnan(got.loc["d", "bound fused-float32"]) and got.loc["a", "level"] == "one-sided 0.025"


def test_a_confirmation_runs_every_claim_on_every_path_and_reports_the_stated_rule(
    tiny_llama_dir, tmp_path, caplog, monkeypatch
) -> None:
    from headstats.io.identity import model_slug
    from headstats.jobs import confirm
    from headstats.jobs.confirm import expand, load_confirmation
    from headstats.pipeline import run_confirmation
    from headstats.studies import kind_of

    model = tiny_llama_dir.as_posix()
    path = tmp_path / "confirm.toml"
    path.write_text(
        textwrap.dedent(f"""
        name = "confirm"
        results = "{(tmp_path / "results").as_posix()}"
        report = "{(tmp_path / "report").as_posix()}"
        [confirm]
        task = "hellaswag"
        limit = 8
        seed = 1
        exclude_limit = 50
        kernels = ["explicit", "fused"]
        dtypes = ["float32", "bfloat16"]
        batch_size = 4
        [[claims]]
        model = "{model}"
        score = "ahon_ln"
        target = 0.25
        [[claims]]
        model = "{model}"
        score = "awft"
        target = 0.25
        """)
    )
    assert kind_of(path).name == "confirmation" and kind_of("analyses/study.toml").name == "analysis"
    plan = load_confirmation(path)
    # awft reads the attention probabilities: the explicit paths only.
    runs = {(p.name, s.ablate[0].scores) for p, s in expand(plan)}
    assert runs == {
        ("explicit-float32", ("ahon_ln", "awft")),
        ("explicit-bfloat16", ("ahon_ln", "awft")),
        ("fused-float32", ("ahon_ln",)),
        ("fused-bfloat16", ("ahon_ln",)),
    }
    # Every path named: the bf16 ones run here too, on any CPU (a plain run leaves them on a CPU without
    # bf16 units; tested below). Once every pass ran, nothing is left for another machine anywhere.
    index = run_confirmation(plan, progress=False, only_paths=tuple(sorted({name for name, _ in runs})))
    assert confirm.left_for_bf16_units(plan) == {}
    # With every path's sweeps done, the dry run counts no pass left on any path (and loads no model).
    from headstats.studies import Study, dry_run

    with caplog.at_level("INFO", logger="headstats"):
        planned = dry_run(Study("confirmation", plan.path, plan)).units
    assert sorted(u.what for u in planned) == sorted(f"hellaswag [{name}]" for name, _ in runs)
    said = [r.getMessage() for r in caplog.records if "not loaded" in r.getMessage()]
    assert sorted(said) == sorted(f"[{name}] [{model}] no pass left: not loaded" for name, _ in runs)
    assert all(u.passes_left == 0 and u.sequences is None for u in planned)
    assert index is not None and index.is_file()
    verdicts = pd.read_csv(tmp_path / "report" / "tables" / "verdicts.csv").set_index("claim")
    bounds = pd.read_csv(tmp_path / "report" / "tables" / "bounds.csv")
    slug = model_slug(model)
    # Every pair of the 4 paths' baselines, on the 8 held-out questions: the path alone's churn.
    apart = pd.read_csv(tmp_path / "report" / "tables" / "paths_against_each_other.csv")
    assert len(apart) == 6 and (apart["n_questions"] == 8).all()
    assert "## The paths against each other" in (tmp_path / "report" / "summary.md").read_text()
    # Every bound is the Tango bound at level 0.05 / 2 of the path's own baseline and point, by hand.
    from headstats.io.tasks import load_task

    held_out = load_task("hellaswag", limit=8, sample="random", seed=1, exclude_limit=50)
    study = {q.question_id for q in load_task("hellaswag", limit=50, sample="random", seed=0).questions}
    for row in bounds.itertuples():
        score = row.claim.split()[2].split("@")[0]
        rows = headstats.io.store.read_interventions(tmp_path / "results" / row.path)
        base = rows[rows["score"] == "baseline"].sort_values("question_id")
        point = rows[(rows["score"] == score) & (rows["target"] == 0.25)].sort_values("question_id")
        assert base["question_id"].tolist() == [q.question_id for q in held_out.questions]
        assert not set(base["question_id"]) & study
        want = drop_bound(base["correct"].to_numpy(), point["correct"].to_numpy(), 1 - 0.05 / 2, base["document"])
        assert row.drop_upper == pytest.approx(100 * want.upper) and row.n_questions == 8
        assert row.certified == (100 * want.upper <= 1.0)
        prov = headstats.io.store.read_provenance(tmp_path / "results" / row.path / f"model={slug}" / "task=hellaswag")
        kernel, dtype = row.path.split("-")
        assert prov["settings"]["attention_kernel"] == kernel and prov["dtype"] == dtype
    assert len(bounds) == 6
    assert verdicts.loc[f"{slug} hellaswag awft@0.25", "paths"] == "2 of 2"
    # 8 questions certify nothing: the honest answer.
    assert set(verdicts["verdict"]) == {"not confirmed"}
    # A path not run leaves no claim confirmed, and says so.
    only = claim_bounds(
        {},
        pd.DataFrame(
            [
                {
                    "claim": "x",
                    "model": slug,
                    "task": "hellaswag",
                    "score": "ahon_ln",
                    "target": 0.25,
                    "zeroed_pct": None,
                    "paths": ["explicit-float32"],
                }
            ]
        ),
    )
    assert all(str(only[c].dtype) == "Int64" for c in ("n_questions", "n_clusters", "lost", "gained"))
    assert only["certified"].isna().all() and only["level"].tolist() == [pytest.approx(0.05)]  # not run: not "False"
    pending = claim_verdicts(only, ["explicit-float32"])
    assert pending["verdict"].tolist() == ["incomplete"] and pending["held_out_n"].isna().all()
    assert str(pending["held_out_n"].dtype) == "Int64"  # a count: printed as 3000, never 3e+03
    # The report opens with the verdicts' figure: one bar per (claim, path) that ran, from its drop to its bound.
    assert (tmp_path / "report" / "figures" / "bounds.png").is_file()
    assert '<figure class="headline"><img alt="bounds"' in index.read_text()
    # Every pass ran: nothing is left. A point file gone is a pass left, named in the appendix.
    from headstats.io.machine import reduced_precision_kernels
    from headstats.jobs.confirm import left_to_run
    from headstats.report.confirm import write_confirmation

    whole = (tmp_path / "report" / "summary.md").read_text()
    assert left_to_run(plan).empty and "what is left" not in whole.lower() and "its verdict." in whole
    partition = tmp_path / "results" / "fused-bfloat16" / f"model={slug}" / "task=hellaswag"
    (partition / "point-ahon_ln-0.25.parquet").unlink()
    write_confirmation(plan, progress=False)
    summary = (tmp_path / "report" / "summary.md").read_text()
    kernels = reduced_precision_kernels(
        headstats.io.store.file_provenance(partition / "baseline.parquet")["machine"], "bfloat16"
    )
    assert f"| fused-bfloat16 | {slug} | 1 | 2 | 0 | {kernels}, as it began;" in summary
    assert "Under each claim, its verdict so far." in summary  # the figure's caption: a pass is left
    abstract = summary.split("\n\n")[1]
    assert "[what is left](#what-is-left-to-run)" in abstract  # the abstract links to it
    # 8 questions bound every drop far above 1 point: each claim failed a path, so nothing left decides.
    assert set(pd.read_csv(tmp_path / "report" / "tables" / "verdicts.csv")["verdict"]) == {"not confirmed"}
    assert "[what is left](#what-is-left-to-run), which cannot change a verdict)" in abstract
    assert "so none of them can change a verdict" in summary
    # A claim still open: what is left may decide it, and the report says nothing of the kind.
    import headstats.report.confirm as report_confirm

    verdicts_of = report_confirm.claim_verdicts
    monkeypatch.setattr(
        report_confirm, "claim_verdicts", lambda *a, **k: verdicts_of(*a, **k).assign(verdict="incomplete")
    )
    write_confirmation(plan, progress=False)
    assert "cannot change a verdict" not in (tmp_path / "report" / "summary.md").read_text()
    assert '<h3 id="what-is-left-to-run">' in (tmp_path / "report" / "index.html").read_text()


def test_the_headline_figure_draws_each_path_that_ran_to_its_bound_and_names_those_not_run() -> None:
    from headstats.report.confirm import headline_figure

    paths = ["explicit-float32", "fused-float32"]
    bounds = pd.DataFrame(
        {
            "claim": ["a", "a", "b"],
            "path": ["explicit-float32", "fused-float32", "explicit-float32"],
            "drop": [0.25, math.nan, -0.5],
            "drop_upper": [0.75, math.nan, 1.5],
        }
    )
    (ax,) = headline_figure(bounds, paths, 1.0).axes
    bars = [c for c in ax.containers if c.has_xerr]
    drawn = sorted((float(c.lines[0].get_xdata()[0]), c.lines[2][0].get_segments()[0][1][0]) for c in bars)
    assert drawn == [(-0.5, 1.5), (0.25, 0.75)]
    assert [t.get_text() for t in ax.texts] == ["fused-float32: not run yet"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    # Every note stays inside the figure, also when every bound that ran is under the tolerance.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    four = ["explicit-float32", "explicit-bfloat16", "fused-float32", "fused-bfloat16"]
    under = pd.DataFrame(
        {
            "claim": ["smollm2-135m hellaswag ahon_ln@0.05"] * 4 + ["smollm2-135m hellaswag awft@0.05"] * 2,
            "path": four + four[:2],
            "drop": [0.2, math.nan, 0.2, math.nan, 0.1, math.nan],
            "drop_upper": [0.8, math.nan, 0.8, math.nan, 0.7, math.nan],
        }
    )
    for frame, planned in ((bounds, paths), (under, four)):
        fig = headline_figure(frame, planned, 1.0)
        fig.set_dpi(90)  # as the report saves it (ReportWriter's dpi), not as it was laid out
        renderer = FigureCanvasAgg(fig).get_renderer()
        for note in fig.axes[0].texts:
            box = note.get_window_extent(renderer)
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, note.get_text()
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [1.0]
    # With the verdicts, each claim's verdict is written under its name, in the verdict's colour.
    from headstats.report.confirm import VERDICT_COLORS

    verdicts = pd.DataFrame(
        {
            "claim": ["b", "a", "c"],
            "verdict": ["not confirmed", "incomplete", "confirmed"],
            "worst_bound": [1.5, 0.75, 0.8],
            "paths": ["1 of 1", "1 of 2", "2 of 2"],
        }
    )
    three = pd.concat([bounds, pd.DataFrame({"claim": ["c"] * 2, "path": paths, "drop": 0.1, "drop_upper": 0.8})])
    fig = headline_figure(three, paths, 1.0, verdicts)
    fig.set_dpi(90)
    ticks = fig.axes[0].get_yticklabels()
    assert [t.get_text() for t in ticks] == [
        "a\nincomplete: 1 of 2 paths run",
        "b\nnot confirmed: bound 1.50 > 1",
        "c\nconfirmed: worst bound 0.80 ≤ 1",
    ]
    assert [t.get_color() for t in ticks] == [VERDICT_COLORS[v] for v in ("incomplete", "not confirmed", "confirmed")]
    renderer = FigureCanvasAgg(fig).get_renderer()
    assert all(fig.bbox.x0 <= t.get_window_extent(renderer).x0 for t in ticks)  # names not cut off on the left
    # No path is drawn in a verdict's hue (green for confirmed, red for not): the colours say the verdict.
    import colorsys

    from matplotlib.colors import to_rgb

    def hue(color: str) -> float:
        return colorsys.rgb_to_hsv(*to_rgb(color))[0] * 360

    six = [f"path-{i}" for i in range(6)]
    many = pd.DataFrame({"claim": "c", "path": six, "drop": 0.1, "drop_upper": 0.8})
    drawn = [c.lines[0].get_color() for c in headline_figure(many, six, 1.0).axes[0].containers]
    assert len(set(drawn)) == 6
    for verdict in ("confirmed", "not confirmed"):
        for color in drawn:
            apart = abs(hue(color) - hue(VERDICT_COLORS[verdict]))
            assert min(apart, 360 - apart) >= 25, (color, verdict)


CLAIM = '[[claims]]\nmodel = "m"\nscore = "awft"\n'


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ('kernels = ["fused"]\n' + CLAIM, ValueError, r'awft reads the attention probabilities.*"explicit" to kernels'),
        ("confidance = 0.9\n" + CLAIM, SpecError, r"unknown key\(s\) confidance"),
        ("targets = [0.1]\n" + CLAIM, SpecError, r"\[confirm\] targets: set by the claims"),
        ("", SpecError, r"state the claims as \[\[claims\]\]"),
    ],
    ids=["fused-kernel-for-awft", "unknown-key", "targets-of-the-claims", "no-claims"],
)
def test_a_bad_confirmation_file_is_refused_before_any_work(tmp_path, text: str, error, message: str) -> None:
    from headstats.jobs.confirm import load_confirmation

    path = tmp_path / "c.toml"
    path.write_text('[confirm]\ntask = "hellaswag"\n' + text)
    with pytest.raises(error, match=message):
        load_confirmation(path)


def test_the_committed_confirmation_file_loads() -> None:
    from headstats.jobs.confirm import load_confirmation

    confirm = load_confirmation("analyses/confirm.toml")
    assert len(confirm.claims) == 4 and confirm.section.limit >= 3000 and confirm.section.exclude_limit == 2000
    assert confirm.section.kernels == ("explicit", "fused") and confirm.section.dtypes == ("float32", "bfloat16")


def test_a_confirmation_runs_model_by_model_so_a_stopped_run_has_whole_verdicts() -> None:
    from headstats.jobs.confirm import expand, load_confirmation

    order = [
        (spec.models[0], path.name, spec.ablate[0].scores)
        for path, spec in expand(load_confirmation("analyses/confirm.toml"))
    ]
    smol, gemma = ("smollm2-135m", ("ahon_ln", "awft", "entropy_ln")), ("gemma3-270m", ("ahon_ln",))
    # Every path of SmolLM2 (its 3 claims) before any of Gemma-3; awft and entropy_ln on the explicit paths only.
    assert order == [
        (smol[0], "explicit-float32", smol[1]),
        (smol[0], "explicit-bfloat16", smol[1]),
        (smol[0], "fused-float32", ("ahon_ln",)),
        (smol[0], "fused-bfloat16", ("ahon_ln",)),
        *[
            (gemma[0], p, gemma[1])
            for p in ("explicit-float32", "explicit-bfloat16", "fused-float32", "fused-bfloat16")
        ],
    ]


def _held_out(score: str, target: float, correct: np.ndarray, documents: np.ndarray) -> pd.DataFrame:
    n = len(correct)
    return pd.DataFrame(
        {
            "model": "m",
            "task": "hellaswag",
            "score": score,
            "target": target,
            "subject": "",
            "question_id": [f"q{i}" for i in range(n)],
            "document": documents,
            "n_choices": 4,
            "n_zeroed": 0 if score == "baseline" else 5,
            "n_heads": 100,
            "correct": correct.astype(int),
        }
    )


def test_what_a_confirmation_can_show_and_how_much_of_the_tolerance_churn_takes() -> None:
    from statistics import NormalDist

    from headstats.stats.confirm import path_baselines

    rng = np.random.default_rng(0)
    n = 3000
    base = rng.random(n) < 0.32
    point = base.copy()
    right, wrong = np.flatnonzero(base), np.flatnonzero(~base)
    point[right[:40]] = False  # 40 answers lost
    point[wrong[:30]] = True  # 30 gained
    documents = np.arange(n)  # one question per document: no design effect
    rows = {
        "explicit-float32": pd.concat(
            [_held_out("baseline", 0.0, base, documents), _held_out("ahon_ln", 0.05, point, documents)]
        )
    }
    claims = pd.DataFrame(
        [
            {
                "claim": "m hellaswag ahon_ln@0.05",
                "model": "m",
                "task": "hellaswag",
                "score": "ahon_ln",
                "target": 0.05,
                "zeroed_pct": 5.0,
                "paths": ["explicit-float32", "fused-float32"],
            },
            {
                "claim": "other",
                "model": "m",
                "task": "hellaswag",
                "score": "awft",
                "target": 0.05,
                "zeroed_pct": 5.0,
                "paths": ["explicit-float32"],
            },
        ]
    )
    level = 0.05 / 2
    bounds = claim_bounds(rows, claims).set_index(["claim", "path"])
    row = bounds.loc[("m hellaswag ahon_ln@0.05", "explicit-float32")]
    assert (row["lost"], row["gained"]) == (40, 30)
    # The same 70 changed answers split evenly (35 lost, 35 gained), bounded from the answers themselves.
    even = base.copy()
    even[right[:35]] = False
    even[wrong[:35]] = True
    assert row["bound_if_no_drop"] == pytest.approx(100 * drop_bound(base, even, 1 - level).upper)
    assert 0 < row["bound_if_no_drop"] < row["drop_upper"]
    # A claim with no point on a path has no churn either.
    assert np.isnan(bounds.loc[("m hellaswag awft@0.05", "explicit-float32"), "bound_if_no_drop"])

    table = path_baselines(rows, claims).set_index("path")
    assert list(table.index) == ["explicit-float32", "fused-float32"]  # every planned path, once
    got = table.loc["explicit-float32"]
    z = NormalDist().inv_cdf(1 - level)
    assert got["floor"] == pytest.approx(100 * z * z / (n + z * z), rel=1e-6)  # no answer changed: z²/(n + z²)
    assert got["baseline"] == pytest.approx(100 * base.mean()) and got["chance"] == pytest.approx(25.0)
    assert got["baseline_low"] < got["baseline"] < got["baseline_high"]
    assert (got["n_questions"], got["n_clusters"], got["cluster"]) == (n, n, "document")
    assert table.loc["fused-float32", ["n_questions", "n_clusters"]].isna().all()  # not run: empty, not 0


def test_the_paths_against_each_other_count_the_answers_the_path_alone_moves() -> None:
    from headstats.stats.confirm import path_agreement

    rng = np.random.default_rng(1)
    n = 500
    pred = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 4, n))  # the gold ending is 0
    pred[:13] = [2] * 6 + [0] * 4 + [3] * 3
    loglik = rng.normal(-30, 5, n)
    bf16_pred = pred.copy()
    bf16_pred[:13] = [0] * 6 + [1] * 4 + [2] * 3  # 6 turned right, 4 wrong, 3 wrong answers moved
    shift = np.zeros(n)
    shift[:13] = np.linspace(0.5, 2.0, 13)

    def baseline(p: np.ndarray, gold: np.ndarray) -> pd.DataFrame:
        return _held_out("baseline", 0.0, p == 0, np.arange(n)).assign(pred=p, gold_loglik=gold)

    rows = {
        "explicit-float32": baseline(pred, loglik),
        "explicit-bfloat16": baseline(bf16_pred, loglik + shift).iloc[::-1],  # rows in another order
        "fused-float32": baseline(pred, loglik + 1e-5).iloc[: n - 20],  # 20 questions not answered yet
    }
    claims = pd.DataFrame(
        [{"claim": "c", "model": "m", "task": "hellaswag", "score": "ahon_ln", "target": 0.05, "zeroed_pct": 5.0}]
    ).assign(paths=[["explicit-float32", "explicit-bfloat16", "fused-float32", "fused-bfloat16"]])
    table = path_agreement(rows, claims).set_index(["path", "against"])
    assert list(table.index) == [  # each pair of paths that ran, once, in the claims' order
        ("explicit-float32", "explicit-bfloat16"),
        ("explicit-float32", "fused-float32"),
        ("explicit-bfloat16", "fused-float32"),
    ]
    bf16 = table.loc[("explicit-float32", "explicit-bfloat16")]
    lost = int(np.sum((pred == 0) & (bf16_pred != 0)))
    gained = int(np.sum((pred != 0) & (bf16_pred == 0)))
    assert (bf16["n_questions"], bf16["answers_differ"]) == (n, 13)
    assert (bf16["lost"], bf16["gained"]) == (lost, gained) == (4, 6)
    assert bf16["change"] == pytest.approx(100 * (gained - lost) / n)
    assert bf16["gold_loglik_max"] == pytest.approx(2.0) and bf16["gold_loglik_median"] == pytest.approx(0.0)
    fused = table.loc[("explicit-float32", "fused-float32")]
    assert (fused["n_questions"], fused["answers_differ"], fused["lost"], fused["gained"]) == (n - 20, 0, 0, 0)
    assert fused["gold_loglik_max"] == pytest.approx(1e-5)
    assert path_agreement({"explicit-float32": rows["explicit-float32"]}, claims).empty  # no pair ran yet


def test_the_abstract_names_each_claims_deciding_bound() -> None:
    from headstats.report.confirm import _worst_lines

    nan = float("nan")
    bounds = _bounds(
        [
            ("a", "explicit-float32", 3000, True, 0.8),
            ("a", "fused-float32", 3000, False, 1.3),
            ("b", "explicit-float32", 3000, True, 0.6),
            ("b", "fused-float32", 3000, True, 0.9),
            ("c", "explicit-float32", 3000, True, 0.7),
            ("c", "fused-float32", nan, False, nan),
            ("d", "explicit-float32", nan, False, nan),
        ]
    ).assign(drop=0.1)
    verdicts = claim_verdicts(bounds, ["explicit-float32", "fused-float32"])
    assert _worst_lines(bounds, verdicts) == (
        "\n\nNot confirmed, the largest bound on the accuracy lost: a up to 1.30 points on fused-float32. Confirmed, "
        "the largest bound on the accuracy lost: b up to 0.90 points on fused-float32. Incomplete, the largest bound "
        "on the accuracy lost so far: c up to 0.70 points on explicit-float32."
    )  # d has not run anywhere: nothing to say of it yet


def test_paths_and_models_choose_what_runs_now_and_names_are_checked(capsys, tmp_path) -> None:
    from headstats.cli import main
    from headstats.jobs.confirm import load_confirmation, selected
    from headstats.specs import RunSpec

    plan = load_confirmation("analyses/confirm.toml")
    fp32 = RunSpec(only_paths=("explicit-float32", "fused-float32"))
    assert [(p.name, s.models[0]) for p, s in selected(plan, fp32)] == [
        ("explicit-float32", "smollm2-135m"),
        ("fused-float32", "smollm2-135m"),
        ("explicit-float32", "gemma3-270m"),
        ("fused-float32", "gemma3-270m"),
    ]
    gemma = RunSpec(only_paths=("fused-bfloat16",), only_models=("gemma3-270m",))
    assert [(p.name, s.models[0]) for p, s in selected(plan, gemma)] == [("fused-bfloat16", "gemma3-270m")]
    assert len(selected(plan)) == 8  # nothing chosen: every (path, model)
    with pytest.raises(SpecError) as bad:
        selected(plan, RunSpec(only_paths=("explicit-fp32",)))
    assert str(bad.value) == (
        "--paths: explicit-fp32 is not in analyses/confirm.toml (it has explicit-float32, explicit-bfloat16, "
        "fused-float32, fused-bfloat16)"
    )
    with pytest.raises(SpecError, match=r"^--models: qwen is not in analyses/confirm.toml \(it has smollm2-135m, "):
        selected(plan, RunSpec(only_models=("qwen",)))
    # What a confirmation would ignore is refused, from the command line, in a dry run or a real one.
    from dataclasses import replace

    from headstats.pipeline import run_confirmation

    refusals = [
        (
            "--dtype float32",
            {"dtype": "float32"},
            "--dtype: analyses/confirm.toml's computation paths set each pass's dtype; choose paths with --paths "
            "(it has explicit-float32, explicit-bfloat16, fused-float32, fused-bfloat16)",
        ),
        (
            "--all-models",
            {"all_models": True},
            "--all-models: analyses/confirm.toml has no optional models (it runs smollm2-135m, gemma3-270m); "
            "choose among them with --models",
        ),
        (
            "--stages collect",
            {"stages": ("collect",)},
            "--stages: analyses/confirm.toml has no collect stage: a confirmation runs ablate (its sweeps), "
            "then report",
        ),
    ]
    refusals.append(
        (
            "--stages collect,report",
            {"stages": ("collect", "report")},
            "--stages: analyses/confirm.toml has no collect stage: a confirmation runs ablate (its sweeps), "
            "then report",
        )
    )
    elsewhere = replace(plan, results=tmp_path / "results", report=tmp_path / "report")  # were one not refused
    for flags, options, said in refusals:
        assert main(["run", "analyses/confirm.toml", *flags.split(), "--dry-run"]) == 2, flags
        assert said in capsys.readouterr().err
        with pytest.raises(SpecError) as bad:  # the real run refuses it before any work
            run_confirmation(elsewhere, progress=False, **options)
        assert str(bad.value) == said
    assert not (tmp_path / "results").exists() and not (tmp_path / "report").exists()
    # An ordinary analysis file has no paths to choose: refused, not ignored.
    assert main(["run", "analyses/study.toml", "--paths", "explicit-float32", "--dry-run"]) != 0
    assert (
        "--paths: chooses among a confirmation file's computation paths; analyses/study.toml has none "
        "(no [confirm] section)" in capsys.readouterr().err
    )


def test_bf16_paths_on_a_cpu_without_bf16_units_warn_with_the_measured_cost(monkeypatch, pretend_cpu) -> None:
    from headstats.jobs.confirm import ComputePath, slow_bf16_warning

    paths = [ComputePath(k, d) for k in ("explicit", "fused") for d in ("float32", "bfloat16")]
    pretend_cpu("AVX2 EPYC", [])
    cost = (
        "where a bf16 pass takes about 6 times as long as a float32 one (SmolLM2-135M's fused HellaSwag baseline, "
        "12,000 sequences, on a 2-core AVX2 EPYC: 7.6 CPU-hours against 1.3, 4.9 h of wall time against 50 min; "
        "one 2048x576 by 576x1536 product: 64 times)"
    )
    assert slow_bf16_warning(paths, "cpu") == (
        "explicit-bfloat16, fused-bfloat16: this CPU (AVX2 EPYC) has no bf16 matrix units (AVX512-BF16, AMX), "
        f"{cost}; they run after the fp32 paths"
    )
    assert slow_bf16_warning([paths[1]], "cpu") == (  # nothing else runs: no order to state
        f"explicit-bfloat16: this CPU (AVX2 EPYC) has no bf16 matrix units (AVX512-BF16, AMX), {cost}"
    )
    assert slow_bf16_warning([p for p in paths if p.dtype == "float32"], "cpu") is None  # fp32 only
    assert slow_bf16_warning(paths, "cuda:0") is None  # a GPU computes bf16 natively
    pretend_cpu("Xeon", ["amx_bf16"])
    assert slow_bf16_warning(paths, "cpu") is None


@pytest.mark.integration  # the run plans its paths' sweeps, resolving the embedded models' folders
def test_on_a_cpu_without_bf16_units_a_plain_run_leaves_the_bf16_paths_and_paths_runs_them_last(
    monkeypatch, pretend_cpu, tmp_path, caplog
) -> None:
    from dataclasses import replace

    from headstats.io import models
    from headstats.jobs import confirm
    from headstats.pipeline import run_confirmation
    from headstats.specs import RunSpec
    from headstats.studies import confirm as confirmation_kind

    plan = confirm.load_confirmation("analyses/confirm.toml")
    plan = replace(plan, results=tmp_path / "results")  # nothing runs: each path's sweep is replaced
    ran: list[tuple[str, str]] = []
    quiet: list[bool] = []  # whether loading a bf16 body would still warn (the run has said it)

    def run_unit(unit, session) -> None:
        ran.append((unit.work[0].name, unit.model))
        session.model(unit)

    def run_paths(plan, run) -> None:
        run_confirmation(plan, run, progress=False, stages=("ablate",))

    monkeypatch.setattr(confirmation_kind, "run_unit", run_unit)
    monkeypatch.setattr(models, "load_model", lambda name, **kwargs: (quiet.append(models._BF16_COST_SAID.get()), None))
    monkeypatch.setattr(confirm, "refused_here", lambda plan, run: {})  # nothing begun (the integration test reads it)
    everything = [(spec.name, spec.models[0]) for _, spec in confirm.expand(plan)]
    fp32 = [unit for unit in everything if "float32" in unit[0]]
    bf16 = [unit for unit in everything if "bfloat16" in unit[0]]
    pairs = [(path.name, spec.models[0]) for path, spec in confirm.expand(plan) if path.dtype == "bfloat16"]

    pretend_cpu("Xeon", ["amx_bf16"])
    assert confirm.left_for_bf16_units(plan, RunSpec(device="cpu")) == {}
    run_paths(plan, RunSpec(device="cpu"))
    assert ran == everything  # bf16 units: the file's order, model by model

    ran.clear()
    pretend_cpu("AVX2 EPYC", [])
    why = (
        "this CPU (AVX2 EPYC) has no bf16 matrix units (AVX512-BF16, AMX), where a bf16 pass takes about 6 times "
        "as long as a float32 one (SmolLM2-135M's fused HellaSwag baseline, 12,000 sequences, on a 2-core AVX2 "
        "EPYC: 7.6 CPU-hours against 1.3, 4.9 h of wall time against 50 min; one 2048x576 by 576x1536 product: 64 "
        "times), and its saved batches tie the path to this "
        "kind of CPU; run it on a CPU that has them or on a GPU, or here anyway with --paths {}"
    )
    waiting = confirm.left_for_bf16_units(plan, RunSpec(device="cpu"))
    assert waiting == {(name, model): why.format(name) for name, model in pairs} and len(pairs) == 4
    with caplog.at_level("WARNING", logger="headstats"), pytest.raises(confirm.PathsLeftError) as left:
        run_paths(plan, RunSpec(device="cpu"))
    assert ran == fp32  # the bf16 paths are not begun: no saved batch ties them to this CPU's kernels
    assert str(left.value) == "4 path and model pair(s) not run on this machine, every other one ran:\n" + "\n".join(
        f"[{name}] {model}: {why.format(name)}" for name, model in pairs
    )
    assert "left for another machine: [explicit-bfloat16] smollm2-135m: this CPU (AVX2 EPYC)" in caplog.text

    # --paths naming them runs them here anyway, after the fp32 ones, with the warning.
    ran.clear()
    caplog.clear()
    quiet.clear()
    named = RunSpec(device="cpu", only_paths=tuple(dict.fromkeys(path.name for path, _ in confirm.expand(plan))))
    assert confirm.left_for_bf16_units(plan, named) == {}
    with caplog.at_level("WARNING", logger="headstats"):
        run_paths(plan, named)
    assert ran == fp32 + bf16
    assert "has no bf16 matrix units" in caplog.text and "left for another machine" not in caplog.text
    assert quiet and all(quiet)  # said once, not again per model it loads
    assert not models._BF16_COST_SAID.get()  # and only inside the run
    # Only a bf16 pair not begun waits: one with no pass left has nothing to run, and one with a finished
    # pass or saved batches goes on here when this kind of CPU began it (other kernels: refused_here's).
    begun = pd.DataFrame(
        {
            "path": ["fused-bfloat16", "explicit-bfloat16", "fused-bfloat16"],
            "model": ["gemma3-270m", "gemma3-270m", "smollm2-135m"],
            "passes_left": [2, 2, 1],
            "passes": [2, 2, 2],
            "saved_sequences": [0, 160, 0],
        }
    )
    monkeypatch.setattr(confirm, "left_to_run", lambda plan: begun)
    assert list(confirm.left_for_bf16_units(plan, RunSpec(device="cpu"))) == [("fused-bfloat16", "gemma3-270m")]
    ran.clear()
    with pytest.raises(confirm.PathsLeftError) as left:
        run_paths(plan, RunSpec(device="cpu"))
    assert str(left.value).endswith(f":\n[fused-bfloat16] gemma3-270m: {why.format('fused-bfloat16')}")
    assert ran == fp32 + [unit for unit in bf16 if unit[1] != "gemma3-270m" or "explicit" in unit[0]]
    # A pair other bf16 kernels began is left with that reason, which --paths cannot override.
    began = ("explicit-bfloat16", "smollm2-135m")
    monkeypatch.setattr(confirm, "refused_here", lambda plan, run: {began: "its baseline ran on other kernels"})
    assert confirm.left_here(plan, RunSpec(device="cpu")) == {
        ("fused-bfloat16", "gemma3-270m"): why.format("fused-bfloat16"),
        began: "its baseline ran on other kernels",
    }
    ran.clear()
    with pytest.raises(confirm.PathsLeftError) as left:
        run_paths(plan, named)
    assert ran == [unit for unit in fp32 + bf16 if unit != ("confirm explicit-bfloat16 smollm2-135m", "smollm2-135m")]
    assert str(left.value).endswith(":\n[explicit-bfloat16] smollm2-135m: its baseline ran on other kernels")


@pytest.mark.integration  # the run plans its paths' sweeps, resolving the embedded models' folders
def test_a_path_other_bf16_kernels_began_is_left_while_every_other_runs(monkeypatch, pretend_cpu, tmp_path) -> None:
    from dataclasses import replace

    from headstats.jobs import confirm
    from headstats.jobs.checkpoint import MixedKernelsError
    from headstats.pipeline import run_confirmation
    from headstats.specs import RunSpec
    from headstats.studies import confirm as confirmation_kind

    pretend_cpu("Xeon", ["amx_bf16"])
    plan = replace(confirm.load_confirmation("analyses/confirm.toml"), results=tmp_path / "results")
    ran: list[tuple[str, str]] = []

    def run_unit(unit, session) -> None:
        spec = unit.work[0]
        if "explicit-bfloat16" in spec.name and unit.model == "smollm2-135m":
            raise MixedKernelsError("its baseline ran on other kernels")
        ran.append((spec.name, unit.model))

    monkeypatch.setattr(confirmation_kind, "run_unit", run_unit)
    # The preflight from the results folders finds nothing (none here); the sweep itself refuses.
    monkeypatch.setattr(confirm, "refused_here", lambda plan, run: {})
    everything = [(spec.name, m) for _, spec in confirm.expand(plan) for m in spec.models]
    with pytest.raises(confirm.PathsLeftError) as refused:
        run_confirmation(plan, RunSpec(device="cpu"), progress=False, stages=("ablate",))
    left = [u for u in everything if "explicit-bfloat16" in u[0] and u[1] == "smollm2-135m"]
    assert len(left) == 1 and ran == [u for u in everything if u not in left]
    assert str(refused.value) == (
        "1 path and model pair(s) not run on this machine, every other one ran:\n"
        "[explicit-bfloat16] smollm2-135m: its baseline ran on other kernels"
    )


@pytest.mark.integration  # the held-out questions are the bundled HellaSwag's
def test_the_dry_run_names_what_this_machine_may_not_run_and_neither_loads_nor_counts_it(
    monkeypatch, pretend_cpu, tmp_path
) -> None:
    from dataclasses import replace

    import torch

    from headstats.io import models
    from headstats.jobs import confirm, dryrun
    from headstats.specs import RunSpec
    from headstats.studies import Study, dry_run
    from headstats.studies import analysis as analysis_kind

    plan = replace(confirm.load_confirmation("analyses/confirm.toml"), results=tmp_path / "results")
    assert confirm.refused_here(plan, RunSpec(device="cpu")) == {}  # nothing begun: nothing refused
    pretend_cpu("Xeon", ["amx_bf16"])
    left = ("explicit-bfloat16", "smollm2-135m")
    monkeypatch.setattr(confirm, "refused_here", lambda plan, run: {left: "its baseline ran on other kernels"})
    measured: list[tuple[str, str]] = []

    def measure_sweep(results, name, model, tokenizer, ablation, probe, rng, timer=None):
        measured.append((str(results), name))
        return dryrun.WorkUnit(name, "ablate", str(ablation.task), 0, None, None, None, 0, 0, 1, None)

    monkeypatch.setattr(models, "load_model", lambda name, **kwargs: (torch.nn.Linear(1, 1), None))
    monkeypatch.setattr(analysis_kind, "measure_sweep", measure_sweep)
    study = Study("confirmation", plan.path, plan)
    planned = dry_run(study, RunSpec(device="cpu", probe=True))
    # Its baseline and the three claimed scores' points: 4 passes, not loaded, not in the estimate.
    assert planned.refused == ["[explicit-bfloat16] smollm2-135m, 4 passes left: its baseline ran on other kernels"]
    assert planned.summary().endswith(
        "Not counted above, as a real run here leaves them for another machine:\n"
        "- [explicit-bfloat16] smollm2-135m, 4 passes left: its baseline ran on other kernels"
    )
    expected = [(str(spec.results), spec.models[0]) for _, spec in confirm.expand(plan)]
    assert measured == [(results, model) for results, model in expected if (results.rpartition("/")[2], model) != left]

    # On a CPU without bf16 units every bf16 pair is left out too, each with its reason and passes.
    measured.clear()
    pretend_cpu("AVX2 EPYC", [])
    planned = dry_run(study, RunSpec(device="cpu", probe=True))
    slow = "this CPU (AVX2 EPYC) has no bf16 matrix units"
    assert [line.split(": ")[0] for line in planned.refused] == [
        "[explicit-bfloat16] smollm2-135m, 4 passes left",
        "[fused-bfloat16] smollm2-135m, 2 passes left",
        "[explicit-bfloat16] gemma3-270m, 2 passes left",
        "[fused-bfloat16] gemma3-270m, 2 passes left",
    ]
    assert planned.refused[0].endswith("its baseline ran on other kernels")  # that reason comes first
    assert all(line.split(": ", 1)[1].startswith(slow) for line in planned.refused[1:])
    assert measured == [
        (str(spec.results), spec.models[0]) for path, spec in confirm.expand(plan) if path.dtype == "float32"
    ]


def test_what_is_left_to_run_and_where_it_may_run_comes_from_the_results_folders_alone(tmp_path) -> None:
    import json
    from dataclasses import replace

    import numpy as np
    import pyarrow as pa

    from headstats.io import store
    from headstats.jobs import confirm

    plan = replace(confirm.load_confirmation("analyses/confirm.toml"), results=tmp_path / "results")
    fresh = confirm.left_to_run(plan)
    # Nothing run: every (path, model) has all its passes left (SmolLM2's 3 scores on the explicit paths).
    assert len(fresh) == 8 and (fresh["passes_left"] == fresh["passes"]).all()
    assert fresh.set_index(["path", "model"]).loc[("explicit-bfloat16", "smollm2-135m"), "passes"] == 4
    assert set(fresh["runs_on"]) == {
        "any machine (fp32 products round alike across machines)",
        "any machine, whole; fast only on a CPU with bf16 units (AVX512-BF16, AMX) or a GPU",
    }
    bf16_cpu = {"cpu": "EPYC", "bf16_units": ["avx512_bf16"], "cpu_capability": "AVX512"}

    def partition(path: str):
        return store.partition_dir(plan.results / path, model="smollm2-135m", task="hellaswag")

    one_row = pa.table({"question_id": ["q"]})
    for name in ("baseline", "point-ahon_ln-0.05", "point-awft-0.05", "point-entropy_ln-0.05"):
        store.write_parquet_atomic(one_row, partition("explicit-float32") / f"{name}.parquet")
    store.write_parquet_atomic(one_row, partition("explicit-bfloat16") / "baseline.parquet", {"machine": bf16_cpu})
    spent = {"machines": [{"machine": bf16_cpu, "batches": 2}], "seconds": 1.0}
    store.write_arrays_atomic(
        {"rows": np.arange(8), "spent": np.asarray(json.dumps(spent))},
        store.partial_file(partition("explicit-bfloat16"), "point-ahon_ln-0.05.parquet"),
    )
    left = confirm.left_to_run(plan).set_index(["path", "model"])
    assert ("explicit-float32", "smollm2-135m") not in left.index and len(left) == 7
    assert left.loc[("explicit-bfloat16", "smollm2-135m")].to_dict() == {
        "passes_left": 3,
        "passes": 4,
        "saved_sequences": 8,
        "runs_on": "CPU kernels with avx512_bf16 (AVX512 instructions), as it began; elsewhere only whole (move its "
        "folder away first)",
    }


@pytest.mark.integration  # the run plans its paths' sweeps, resolving the embedded models' folders
def test_a_confirmation_that_leaves_a_path_for_another_machine_still_reports_what_ran(
    monkeypatch, pretend_cpu, tmp_path
) -> None:
    from dataclasses import replace

    from headstats import pipeline
    from headstats.jobs import confirm
    from headstats.report import confirm as report_confirm
    from headstats.studies import confirm as confirmation_kind

    written: list[str] = []
    pretend_cpu("Xeon", ["amx_bf16"])
    monkeypatch.setattr(confirm, "refused_here", lambda plan, run: {("fused-float32", "gemma3-270m"): "a reason"})
    monkeypatch.setattr(confirmation_kind, "run_unit", lambda unit, session: None)
    monkeypatch.setattr(report_confirm, "write_confirmation", lambda plan, progress: written.append(plan.name))
    plan = replace(confirm.load_confirmation("analyses/confirm.toml"), results=tmp_path / "results")
    with pytest.raises(confirm.PathsLeftError, match="not run on this machine") as left:
        pipeline.run_confirmation(plan, progress=False)
    assert str(left.value) == (
        "1 path and model pair(s) not run on this machine, every other one ran:\n[fused-float32] gemma3-270m: a reason"
    )
    assert written == ["confirm"]
    with pytest.raises(confirm.PathsLeftError):
        pipeline.run_confirmation(plan, progress=False, stages=("ablate",))
    assert written == ["confirm"]  # no report stage: none written
