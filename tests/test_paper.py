"""The study's published curves: layout, within-1-point numbers, ranks, Table 2, `headstats paper`."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from headstats import cli
from headstats.report import paper
from headstats.stats import ranking


@pytest.fixture(scope="module")
def points() -> pd.DataFrame:
    return paper.paper_points()


@pytest.fixture(scope="module")
def curves(points: pd.DataFrame) -> pd.DataFrame:
    return paper.paper_curves(points)


def _curve(curves: pd.DataFrame, model: str, score: str) -> pd.Series:
    return curves[(curves["model"] == model) & (curves["score"] == score)].iloc[0]


def test_published_points_have_the_intervention_summary_layout(points: pd.DataFrame) -> None:
    curves_only = points[points["score"] != "baseline"]
    assert points["model"].nunique() == 14 and curves_only["score"].nunique() == 14
    assert curves_only.groupby(["model", "score"]).size().eq(7).all()
    # every curve's thresholds map one-to-one onto p = 0, 0.05, ..., 0.30, monotone in the score's direction
    for (_, score), curve in curves_only.groupby(["model", "score"]):
        assert sorted(curve["target"]) == pytest.approx(list(paper.TARGETS))
        by_target = curve.sort_values("target")["threshold"].to_numpy()
        steps = np.diff(by_target)
        assert (steps < 0).all() if score in ("awft", "awft_ln") else (steps > 0).all()
    base = points[points["score"] == "baseline"].set_index("model")["accuracy"]
    random0 = curves_only[(curves_only["score"] == "random") & (curves_only["target"] == 0)].set_index("model")
    assert base.to_dict() == random0["accuracy"].to_dict()  # docs/design.md#paper-data: baseline = Random's p = 0 point


def test_within_one_point_by_hand_for_two_models(curves: pd.DataFrame) -> None:
    """Hand derivations from the published points (x = realised %, y = accuracy %):

    Llama-3.1-8B-Instruct, baseline 68.3236, level 67.3236.
    - awft: (0, 68.3236) -> (4.7367, 63.6448) crosses; every later point (62.35, 61.62, 61.80, 60.87,
      53.52) stays below, so the last crossing is on the first segment:
      x = 0 + (67.3236 - 68.3236) * 4.7367 / (63.6448 - 68.3236) = 4.7367 / 4.6788 = 1.0124.
    - ahon_ln: (9.9603, 67.4975) -> (14.8660, 66.6500) crosses; later points all lower:
      x = 9.9603 + (67.3236 - 67.4975) * 4.9057 / (66.6500 - 67.4975) = 9.9603 + 1.0066 = 10.9669.
    OLMo-2-1124-7B-Instruct, baseline 60.8247, level 59.8247.
    - awft: (0, 60.6110) -> (18.4199, 50.7121) crosses, later points all lower:
      x = (59.8247 - 60.6110) * 18.4199 / (50.7121 - 60.6110) = 0.7863 * 18.4199 / 9.8989 = 1.4632.
    - ahon_ln: (18.4916, 59.9843) -> (23.1056, 59.2793) crosses, the last point (57.81) is lower:
      x = 18.4916 + (59.8247 - 59.9843) * 4.6140 / (59.2793 - 59.9843) = 18.4916 + 1.0446 = 19.5362.
    """
    expected = {
        ("Llama-3.1-8B-Instruct", "awft"): 1.0124,
        ("Llama-3.1-8B-Instruct", "ahon_ln"): 10.9669,
        ("OLMo-2-1124-7B-Instruct", "awft"): 1.4632,
        ("OLMo-2-1124-7B-Instruct", "ahon_ln"): 19.5362,
    }
    for (model, score), value in expected.items():
        row = _curve(curves, model, score)
        assert row["crosses"]
        assert row["within_1pt"] == pytest.approx(value, abs=2e-3)


def test_normalised_auc_and_ranks_by_hand_for_two_models(curves: pd.DataFrame) -> None:
    """Trapezoid areas (segment widths x mean heights), over the curve's x-range:

    Llama-3.1-8B-Instruct ahon_ln: 336.817 + 340.215 + 329.041 + 308.790 + 308.877 + 281.933
      = 1905.673 over 29.1481 -> 65.379; awft: 312.544 + 301.161 + 396.647 + 367.038 + 360.296 + 207.648
      = 1945.333 over 31.3696 -> 62.013. The study's printout: 65.38, 62.01, then lthon_ln 61.48.
    OLMo-2-1124-7B-Instruct ahon_ln: 298.911 + 288.797 + 263.931 + 269.162 + 275.143 + 23.092 = 1419.035
      over 23.5 -> 60.384; lthon_ln: 309.187 + 298.318 + 311.318 + 312.313 + 289.675 + 154.307 = 1675.118
      over 28.4391 -> 58.902. Study: 60.38, 58.90, then ftvvn_ln 57.28.
    """
    for model, score, area in [
        ("Llama-3.1-8B-Instruct", "ahon_ln", 65.379),
        ("Llama-3.1-8B-Instruct", "awft", 62.013),
        ("OLMo-2-1124-7B-Instruct", "ahon_ln", 60.384),
        ("OLMo-2-1124-7B-Instruct", "lthon_ln", 58.902),
    ]:
        assert _curve(curves, model, score)["norm_auc"] == pytest.approx(area, abs=2e-3)
    top = ranking.top_k(curves, 3, "norm_auc")
    assert top["Llama-3.1-8B-Instruct"] == ["ahon_ln", "awft", "lthon_ln"]
    assert top["OLMo-2-1124-7B-Instruct"] == ["ahon_ln", "lthon_ln", "ftvvn_ln"]
    ranks = ranking.rank_scores(curves, "norm_auc")
    assert sorted(ranks.loc["Llama-3.1-8B-Instruct"].astype(int)) == list(range(1, 15))
    # Figure 5 as the notebook computed it: pandas' Spearman between the models' columns of areas
    areas = ranking.metric_table(curves, "norm_auc")
    study = areas.T.corr(method="spearman")
    assert np.allclose(ranking.rank_correlation(curves, "norm_auc").to_numpy(), study.to_numpy())


def test_table2_reproduces_the_study(curves: pd.DataFrame) -> None:
    table = paper.table2(curves)
    assert list(table.columns) == ["model", "awft", "best_other", "best_overall_score"]
    assert len(table) == 15 and table["model"].iloc[-1] == "Average"
    rows = table.set_index("model")
    # The study's Table 2 (notebook cell output): average 4.61 (awft) vs 12.18 (best other)
    assert rows.loc["Average", "awft"] == pytest.approx(4.61, abs=0.005)
    assert rows.loc["Average", "best_other"] == pytest.approx(12.18, abs=0.005)
    assert rows.loc["Llama-3.1-8B-Instruct", "awft"] == pytest.approx(1.0124, abs=2e-3)
    assert rows.loc["Llama-3.1-8B-Instruct", "best_other"] == pytest.approx(10.9669, abs=2e-3)
    assert rows.loc["OLMo-2-1124-7B-Instruct", "best_other"] == pytest.approx(19.5362, abs=2e-3)
    assert rows.loc["Qwen2.5-14B", "best_overall_score"] == "awft"  # awft wins for 3 of 14 models
    assert (rows["best_overall_score"].iloc[:-1] == "awft").sum() == 3


def test_paper_command_writes_table_figures_and_report(tmp_path) -> None:
    out = tmp_path / "paper"
    assert cli.main(["paper", "--out", str(out), "--dpi", "40", "--no-progress"]) == 0
    table = pd.read_csv(out / "table2.csv")
    assert table["model"].tolist()[-1] == "Average" and len(table) == 15
    within = pd.read_csv(out / "within_one_point.csv", index_col=0)
    assert within.shape == (14, 14)
    for name in ("accuracy_grid", "top_curves", "rank_heatmap", "rank_spearman", "top5_iou"):
        for ext in ("png", "svg"):
            assert (out / "figures" / f"{name}.{ext}").stat().st_size > 1000
    page = (out / "index.html").read_text()
    # every figure embedded once (SVG or PNG, whichever is lighter): the headline and the five above
    assert len(re.findall(r"data:image/(?:png|svg\+xml);base64,", page)) == 6
    assert "Table 2" in page and "MIT" in page
    assert page.index('<div id="abstract">') < page.index('alt="table2_dots"') < page.index('<nav id="contents">')
    assert "![accuracy_grid](figures/accuracy_grid.png)" in (out / "summary.md").read_text()
    for path in (p for p in out.rglob("*") if p.is_file()):  # no local folder in what it wrote (out lies in /tmp)
        assert str(tmp_path).encode() not in path.read_bytes(), path
