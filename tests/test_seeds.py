"""The seed study's decision rule (headstats.stats.seeds) on simulated seeds: distances against their
closed form, the sign-flip test against a brute-force enumeration, its level and power by
simulation against the pre-registered power analysis' own code, and the learning rule."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import wasserstein_distance
from statsmodels.stats.multitest import multipletests

from headstats.stats import seeds as S

ROOT = Path(__file__).resolve().parents[1]
SCORES = ("ahon_ln", "awft")


def _power_script():
    spec = importlib.util.spec_from_file_location("power", ROOT / "analyses" / "finetuning_confirm_power.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def simulated_study(
    locations: dict[str, np.ndarray], *, texts: int = 12, heads: int = 4, seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Score tables of a base and, per stage, one stage end per seed whose every score is the base's
    shifted by ``locations[stage][seed]`` base IQRs (so d(base, end_s) = |location_s| and d(end_s,
    end_t) = |location_s - location_t| exactly); two datasets. Returns (scores, checkpoints, iqr)."""
    rng = np.random.default_rng(seed)
    rows, checkpoints = [], [("base", S.BASE, -1)]
    keys = pd.MultiIndex.from_product([range(texts), range(2), range(heads)], names=["sample_id", "layer", "head"])
    base = {(d, s): rng.gamma(2.0, 1.0, len(keys)) for d in ("mmlu", "piqa") for s in SCORES}
    iqr = {k: np.subtract(*np.quantile(v, [0.75, 0.25])) for k, v in base.items()}
    for stage, where in locations.items():
        checkpoints += [(f"seed-{s}-{stage}", stage, s) for s in range(len(where))]
    for model, stage, seed in checkpoints:
        for dataset in ("mmlu", "piqa"):
            frame = keys.to_frame(index=False).assign(model=model, dataset=dataset)
            for score in SCORES:
                shift = 0.0 if stage == S.BASE else locations[stage][seed] * iqr[dataset, score]
                frame[score] = base[dataset, score] + shift
            rows.append(frame)
    table = pd.DataFrame(checkpoints, columns=["model", "stage", "seed"])
    return pd.concat(rows, ignore_index=True), table, iqr


def brute_force_p(values: np.ndarray) -> float:
    """One-sided sign-flip p-value by enumerating the subsets of flipped values."""
    n, observed, count = len(values), float(np.sum(values)), 0
    for k in range(n + 1):
        for flipped in itertools.combinations(range(n), k):
            total = sum(-v if i in flipped else v for i, v in enumerate(values))
            count += total >= observed - 1e-12
    return count / 2**n


def independent_deltas(where: np.ndarray) -> np.ndarray:
    """delta_s from the seeds' locations, written out from the design's definition."""
    n = len(where)
    to_base = np.abs(where)
    between = np.array([np.mean([abs(where[s] - where[t]) for t in range(n) if t != s]) for s in range(n)])
    pairs = np.mean([abs(where[s] - where[t]) for s, t in itertools.combinations(range(n), 2)])
    return to_base - (2 * between - pairs)


# --- distances -------------------------------------------------------------------------------------


def test_distances_are_w1_over_the_base_iqr_on_the_same_texts() -> None:
    where = {"sft": np.array([0.3, -0.1, 0.25]), "dpo": np.array([0.05, 0.4, -0.2])}
    scores, checkpoints, iqr = simulated_study(where)
    extra = scores[(scores["model"] == "seed-0-sft") & (scores["sample_id"] == 0)].assign(sample_id=99)
    distances = S.seed_distances(pd.concat([scores, extra]), checkpoints, SCORES)  # text 99: one model only
    assert set(distances["n_texts"]) == {12}
    for r in distances.itertuples():
        expected = abs(where[r.stage][r.seed]) if r.other < 0 else abs(where[r.stage][r.seed] - where[r.stage][r.other])
        assert r.w1_iqr == pytest.approx(expected, abs=1e-9)
        assert r.iqr == pytest.approx(iqr[r.dataset, r.score])
    pairs = distances[distances["comparison"] == S.BETWEEN_SEEDS]
    assert len(pairs) == 2 * 2 * 2 * 3  # stages x datasets x scores x seed pairs
    # and against scipy on the pooled values themselves
    a = scores.loc[(scores["model"] == "base") & (scores["dataset"] == "piqa"), "awft"]
    b = scores.loc[(scores["model"] == "seed-1-dpo") & (scores["dataset"] == "piqa"), "awft"]
    row = distances.query("stage == 'dpo' and dataset == 'piqa' and score == 'awft' and seed == 1 and other == -1")
    assert row["w1"].item() == pytest.approx(wasserstein_distance(a, b))


def test_contrasts_are_the_designs_delta() -> None:
    rng = np.random.default_rng(3)
    where = {"sft": rng.normal(0.2, 0.1, 6)}
    scores, checkpoints, _ = simulated_study(where)
    contrasts = S.seed_contrasts(S.seed_distances(scores, checkpoints, SCORES))
    for _, cell in contrasts.groupby(S.CELL):
        np.testing.assert_allclose(cell.sort_values("seed")["delta"], independent_deltas(where["sft"]), atol=1e-9)
        # mean(delta) = mean base -> stage distance - mean seed -> seed distance
        pairs = [abs(a - b) for a, b in itertools.combinations(where["sft"], 2)]
        assert cell["delta"].mean() == pytest.approx(np.mean(np.abs(where["sft"])) - np.mean(pairs))


# --- the sign-flip test ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 6, 9])
def test_the_sign_flip_pvalue_is_the_enumeration(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(5):
        values = rng.normal(0.3, 1.0, n)
        assert S.sign_flip_pvalue(values) == pytest.approx(brute_force_p(values))
        assert S.sign_flip_pvalue(values, null=0.2) == pytest.approx(brute_force_p(values - 0.2))


def test_the_sign_flip_level_is_exact_under_symmetric_contrasts() -> None:
    """iid symmetric contrasts: the test rejects at exactly floor(alpha 2^n) / 2^n (up to simulation
    error), the level the design's Holm steps assume."""
    rng = np.random.default_rng(0)
    n, reps, alpha = 8, 4000, 0.05
    rejected = np.mean([S.sign_flip_pvalue(rng.standard_normal(n)) <= alpha for _ in range(reps)])
    level = math.floor(alpha * 2**n) / 2**n
    assert abs(rejected - level) < 4 * math.sqrt(level * (1 - level) / reps)


def test_the_upper_bound_is_where_the_equivalence_test_starts_to_reject() -> None:
    rng = np.random.default_rng(1)
    for n in (5, 8, 12):
        values = rng.normal(0.0, 0.1, n)
        bound = S.sign_flip_upper_bound(values, 0.05)
        assert values.mean() < bound
        assert S.sign_flip_pvalue(bound + 1e-9 - values) <= 0.05 < S.sign_flip_pvalue(bound - 1e-9 - values)
    assert S.sign_flip_upper_bound([0.1, 0.2, 0.3, 0.1], 0.05) == math.inf  # 2^4 patterns: never at 5%


def test_more_seeds_than_the_exact_test_takes_are_refused() -> None:
    with pytest.raises(ValueError, match="the exact sign-flip test takes at most 20 seeds, not 21"):
        S.sign_flip_pvalue(np.ones(21))


# --- the rule on simulated studies, against the power analysis' code -------------------------------


@pytest.mark.parametrize(("target", "reps"), [(0.12, 60), (0.0, 60)])
def test_the_rule_decides_as_the_power_analysis_simulates(target: float, reps: int) -> None:
    """Stage ends at mu + sigma z_s from the base (the power analysis' model, without text noise):
    every replicate's p-values equal the power script's, the rejection rates are its power and size,
    and the verdicts follow the rule."""
    power = _power_script()
    sigma, n, margin = 0.1, 8, 0.12
    mu = power.location_for(target, sigma)
    reference = power.deltas(mu, sigma, 0.0, n, reps, np.random.default_rng([48, n]))
    z = np.random.default_rng([48, n]).standard_normal((reps, n))  # the script's first draw: the seeds
    moved = beyond = equivalent = 0
    for rep in range(reps):
        where = mu + sigma * z[rep]
        scores, checkpoints, _ = simulated_study({"sft": where}, texts=4, heads=2, seed=rep)
        contrasts = S.seed_contrasts(S.seed_distances(scores, checkpoints, ("awft",)))
        verdicts = S.seed_verdicts(contrasts, margin=margin, min_seeds=8)
        cell = verdicts.iloc[0]
        np.testing.assert_allclose(np.sort(contrasts["delta"].to_numpy()[:n]), np.sort(reference[rep]), atol=1e-9)
        assert cell["p_moved"] == pytest.approx(power.sign_flip_p(reference[rep : rep + 1])[0])
        assert cell["p_equivalent"] == pytest.approx(power.sign_flip_p(margin - reference[rep : rep + 1])[0])
        moved += cell["p_moved_holm"] <= 0.05
        beyond += cell["p_beyond_margin_holm"] <= 0.05
        equivalent += cell["p_equivalent"] <= 0.05
        assert (cell["upper_bound"] < margin) == (cell["p_equivalent"] <= 0.05)
        assert cell["verdict"] == S._verdict(
            cell["p_moved_holm"] <= 0.05, cell["p_beyond_margin_holm"] <= 0.05, cell["p_equivalent"] <= 0.05
        )
    # Holm over the study's two cells (two datasets, the same contrasts): each at 0.05 / 2
    assert moved / reps == np.mean(power.sign_flip_p(reference) <= 0.05 / 2)
    assert beyond / reps == np.mean(power.sign_flip_p(reference - margin) <= 0.05 / 2)
    if target == margin:
        assert moved / reps >= 0.5
    if target == 0.0:
        assert equivalent / reps == np.mean(power.sign_flip_p(margin - reference) <= 0.05) >= 0.8
        assert beyond == 0


def test_holm_runs_over_each_stage_ends_cells() -> None:
    rng = np.random.default_rng(5)
    where = {stage: rng.normal(shift, 0.05, 8) for stage, shift in (("sft", 0.05), ("dpo", 0.3))}
    scores, checkpoints, _ = simulated_study(where)
    verdicts = S.seed_verdicts(S.seed_contrasts(S.seed_distances(scores, checkpoints, SCORES)), margin=0.12)
    for _, cells in verdicts.groupby("stage"):
        assert len(cells) == 4
        np.testing.assert_allclose(cells["p_moved_holm"], multipletests(cells["p_moved"], method="holm")[1])
    sentences = S.stage_sentences(verdicts).set_index("stage")["sentence"]
    assert sentences["dpo"] == "fails"  # every seed 0.3 IQR from the base, 0.05 apart: beyond the margin
    assert set(verdicts.loc[verdicts["stage"] == "dpo", "verdict"]) == {S.MOVED_BEYOND_MARGIN}


# --- the learning rule -----------------------------------------------------------------------------

KEPT = [  # (case, learned per stage of seed 1 (sft, dpo, grpo), kept per stage, reason per stage)
    ("every stage learned", (True, True, True), (True, True, True), ("learned",) * 3),
    ("dpo did not learn", (True, False, True), (True, False, False), ("learned", *("dpo did not learn",) * 2)),
    ("sft did not learn", (False, True, True), (False,) * 3, ("sft did not learn",) * 3),
    ("grpo without interval", (True, True, None), (True, True, False), ("learned", "learned", "grpo has no interval")),
    ("grpo not measured", (True, True), (True, True, False), ("learned", "learned", "grpo not measured")),
]


@pytest.mark.parametrize(("learned", "kept", "reason"), [c[1:] for c in KEPT], ids=[c[0] for c in KEPT])
def test_a_seed_enters_a_stage_only_when_it_and_every_earlier_stage_learned(learned, kept, reason) -> None:
    learning = pd.DataFrame(
        [(0, stage, True) for stage in S.STAGES]
        + [(1, stage, ok) for stage, ok in zip(S.STAGES, learned, strict=False)],
        columns=["seed", "stage", "learned"],
    )
    table = S.seeds_kept(learning).set_index(["seed", "stage"])
    assert tuple(table.loc[1, "kept"]) == kept and tuple(table.loc[1, "reason"]) == reason
    assert table.loc[0, "kept"].all()


def test_a_seed_kept_out_leaves_every_cell_of_its_stage_and_a_stage_short_of_seeds_is_undetermined() -> None:
    rng = np.random.default_rng(7)
    where = {stage: rng.normal(0.02, 0.05, 9) for stage in S.STAGES}
    scores, checkpoints, _ = simulated_study(where)
    distances = S.seed_distances(scores, checkpoints, SCORES)
    learning = pd.DataFrame(
        [
            (s, stage, not (s == 4 and stage == "dpo") and not (s == 5 and stage == "grpo"))
            for s in range(9)
            for stage in S.STAGES
        ],
        columns=["seed", "stage", "learned"],
    )
    kept, verdicts, sentences = S.decide(distances, learning, margin=0.12, min_seeds=8)
    seeds = verdicts.groupby("stage")["seeds"].first()
    assert seeds["sft"] == "0,1,2,3,4,5,6,7,8" and seeds["dpo"] == "0,1,2,3,5,6,7,8"
    assert seeds["grpo"] == "0,1,2,3,6,7,8"  # seed 4 (dpo) and seed 5 (grpo) out: 7 < 8 seeds
    assert (verdicts.loc[verdicts["stage"] == "grpo", "verdict"] == S.UNDETERMINED).all()
    assert verdicts.loc[verdicts["stage"] == "grpo", "p_moved"].isna().all()
    assert sentences.set_index("stage").loc["grpo", "sentence"] == S.UNDETERMINED
    assert sorted(kept.loc[~kept["kept"], "reason"]) == ["dpo did not learn"] * 2 + ["grpo did not learn"]


def test_the_study_decides_once_every_seed_is_scored_and_names_what_it_waits_for() -> None:
    rng = np.random.default_rng(9)
    where = {stage: rng.normal(0.5, 0.05, 9) for stage in S.STAGES}  # far beyond the margin
    scores, checkpoints, _ = simulated_study(where)
    distances = S.seed_distances(scores, checkpoints, SCORES)
    learning = pd.DataFrame(
        [(s, stage, not (s < 2 and stage == "grpo")) for s in range(9) for stage in S.STAGES],
        columns=["seed", "stage", "learned"],
    )
    design = dict(datasets=["mmlu", "piqa"], score_ids=list(SCORES), margin=0.12, min_seeds=8)
    _, verdicts, sentences = S.study_decision(distances, learning, seeds=range(9), **design)
    said = sentences.set_index("stage")["sentence"]
    assert said["sft"] == "fails" and said["dpo"] == "fails"
    assert said["grpo"] == "undetermined: 7 of 9 seeds learned"  # two seeds kept out: 7 < min_seeds
    # With a tenth seed in the design, unscored: no stage decides, though 9 seeds are at least min_seeds
    _, waiting, sentences = S.study_decision(distances, learning, seeds=range(10), **design)
    assert sentences["sentence"].tolist() == ["undetermined: 9 of 10 seeds scored"] * 3
    assert set(waiting["verdict"]) == {S.UNDETERMINED}
    np.testing.assert_allclose(waiting["mean_delta"], verdicts["mean_delta"])  # the numbers are shown


def test_a_stage_no_seed_learned_is_undetermined_in_every_cell() -> None:
    rng = np.random.default_rng(8)
    where = {stage: rng.normal(0.02, 0.05, 3) for stage in S.STAGES}
    scores, checkpoints, _ = simulated_study(where)
    distances = S.seed_distances(scores, checkpoints, SCORES)
    learning = pd.DataFrame(
        [(s, stage, stage != "dpo" and (s == 0 or stage == "sft")) for s in range(3) for stage in S.STAGES],
        columns=["seed", "stage", "learned"],
    )
    _, verdicts, sentences = S.decide(distances, learning, margin=0.12, min_seeds=2)
    n = verdicts.groupby("stage")["n_seeds"].max()
    assert n["sft"] == 3 and n["dpo"] == 0 and n["grpo"] == 0
    assert (verdicts.loc[verdicts["stage"] != "sft", "verdict"] == S.UNDETERMINED).all()
    assert len(verdicts) == 3 * 2 * 2  # every cell is reported, those of no seed too
    assert set(sentences.set_index("stage").loc[["dpo", "grpo"], "sentence"]) == {S.UNDETERMINED}


def test_a_seed_without_a_learning_record_is_kept_out_and_named() -> None:
    learning = pd.DataFrame([(0, stage, True) for stage in S.STAGES], columns=["seed", "stage", "learned"])
    kept = S.seeds_kept(learning, seeds=[0, 1]).set_index(["seed", "stage"])
    assert not kept.loc[1, "kept"].any() and set(kept.loc[1, "reason"]) == {"sft not measured"}


# --- which heads moved -----------------------------------------------------------------------------


def head_study(shifts: dict[str, np.ndarray], *, texts: int = 6, layers: int = 2, heads: int = 3, seed: int = 0):
    """Score tables of a base and, per stage, one stage end per seed whose head (layer, head) is the
    base's shifted by ``shifts[stage][seed, layer * heads + head]`` base IQRs on every text; one
    dataset, one score. Returns (scores, checkpoints, iqr)."""
    rng = np.random.default_rng(seed)
    keys = pd.MultiIndex.from_product([range(texts), range(layers), range(heads)], names=["sample_id", "layer", "head"])
    frame = keys.to_frame(index=False)
    base = rng.gamma(2.0, 1.0, len(frame))
    iqr = float(np.subtract(*np.quantile(base, [0.75, 0.25])))
    column = (frame["layer"] * heads + frame["head"]).to_numpy()
    rows = [frame.assign(model="base", dataset="mmlu", ahon_ln=base)]
    checkpoints = [("base", S.BASE, -1)]
    for stage, matrix in shifts.items():
        for s, row in enumerate(matrix):
            model = f"seed-{s}-{stage}"
            rows.append(frame.assign(model=model, dataset="mmlu", ahon_ln=base + row[column] * iqr))
            checkpoints.append((model, stage, s))
    table = pd.DataFrame(checkpoints, columns=["model", "stage", "seed"])
    return pd.concat(rows, ignore_index=True), table, iqr


def brute_force_max_t(d: np.ndarray) -> np.ndarray:
    """Two-sided max-T p per column of ``d`` (seeds x heads), enumerating every sign vector."""
    n = d.shape[0]

    def t(x):
        return x.mean(axis=0) / (x.std(axis=0, ddof=1) / math.sqrt(n))

    observed = np.abs(t(d))
    maxima = [np.abs(t(d * np.array(signs)[:, None])).max() for signs in itertools.product((1, -1), repeat=n)]
    return np.array([np.mean(np.array(maxima) >= o * (1 - 1e-9)) for o in observed])


def test_head_shifts_are_each_heads_mean_shift_over_the_base_iqr_with_an_exact_max_t() -> None:
    rng = np.random.default_rng(1)
    shifts = {"sft": rng.normal(0.2, 0.3, (6, 6)), "dpo": rng.normal(0.0, 0.3, (6, 6))}
    scores, checkpoints, _ = head_study(shifts)
    out = S.head_seed_shifts(scores, checkpoints, ["ahon_ln"], stages=("sft", "dpo"))
    assert list(out["stage"].unique()) == ["sft", "dpo"]  # the stages' order, not the alphabet's
    for stage, matrix in shifts.items():
        got = out[out["stage"] == stage]
        assert list(zip(got["layer"], got["head"], strict=True)) == [(i, j) for i in range(2) for j in range(3)]
        np.testing.assert_allclose(got["shift"], matrix.mean(axis=0), atol=1e-9)
        np.testing.assert_allclose(got["seed_sd"], matrix.std(axis=0, ddof=1), atol=1e-9)
        np.testing.assert_allclose(got["p_max_t"], brute_force_max_t(matrix), atol=1e-12)
        assert (got["n_seeds"] == 6).all()


def test_a_head_fine_tuning_moves_consistently_is_found_and_heads_moving_as_the_seeds_do_are_not() -> None:
    rng = np.random.default_rng(2)
    matrix = rng.normal(0.0, 0.1, (8, 6))
    matrix[:, 4] += 1.0  # head (1, 1): one IQR in every seed, ten times the seeds' spread
    scores, checkpoints, _ = head_study({"sft": matrix})
    out = S.head_seed_shifts(scores, checkpoints, ["ahon_ln"], stages=("sft",))
    assert out.loc[out["moved"], ["layer", "head"]].values.tolist() == [[1, 1]]
    assert out.loc[out["moved"], "p_max_t"].iloc[0] == pytest.approx(2 / 2**8)  # its sign pattern and the mirror
    counts = S.moved_head_counts(out)
    assert counts[["heads", "moved", "up", "down", "largest"]].values.tolist() == [[6, 1, 1, 0, "1.1"]]
    # Four seeds give 16 sign patterns: no p below 2/16, so nothing can move at 0.05.
    few = S.head_seed_shifts(*head_study({"sft": matrix[:4]})[:2], ["ahon_ln"])
    assert few["p_max_t"].min() == pytest.approx(2 / 2**4) and not few["moved"].any()


def test_a_seed_kept_out_of_a_stage_leaves_its_heads_test() -> None:
    rng = np.random.default_rng(3)
    shifts = {"sft": rng.normal(0.0, 0.2, (5, 6)), "dpo": rng.normal(0.0, 0.2, (5, 6))}
    scores, checkpoints, _ = head_study(shifts)
    learning = pd.DataFrame(
        [(s, stage, not (s == 2 and stage == "sft")) for s in range(5) for stage in ("sft", "dpo", "grpo")],
        columns=["seed", "stage", "learned"],
    )
    out = S.head_seed_shifts(scores, checkpoints, ["ahon_ln"], S.seeds_kept(learning))
    # seed 2's SFT did not learn: it leaves SFT and, its chain broken there, DPO too
    assert set(out["n_seeds"]) == {4}
    keep = [0, 1, 3, 4]
    np.testing.assert_allclose(out.loc[out["stage"] == "dpo", "shift"], shifts["dpo"][keep].mean(axis=0), atol=1e-9)


# --- the machines the seeds trained on ------------------------------------------------------------


def pair_distances(positions: dict[tuple[str, str, str], np.ndarray]) -> pd.DataFrame:
    """Seed -> seed rows of a distances table whose d(end_s, end_t) = |x_s - x_t|, x = ``positions``
    per cell."""
    rows = []
    for cell, x in positions.items():
        for s, t in itertools.combinations(range(len(x)), 2):
            rows.append((*cell, S.BETWEEN_SEEDS, s, t, abs(x[s] - x[t])))
    return pd.DataFrame(rows, columns=[*S.CELL, "comparison", "seed", "other", "w1_iqr"])


def brute_force_machine_p(x: np.ndarray, labels: list[str]) -> float:
    """The permutation p-value of across - within over every distinct ordering of ``labels``."""

    def excess(assigned) -> float:
        within, across = [], []
        for s, t in itertools.combinations(range(len(x)), 2):
            (within if assigned[s] == assigned[t] else across).append(abs(x[s] - x[t]))
        return np.mean(across) - np.mean(within)

    observed = excess(labels)
    orderings = set(itertools.permutations(labels))
    return sum(excess(o) >= observed - 1e-12 for o in orderings) / len(orderings)


def test_the_machine_check_is_the_enumeration_of_the_machine_labels() -> None:
    rng = np.random.default_rng(3)
    labels = ["xeon"] * 4 + ["epyc"] * 3
    cells = {("sft", "mmlu", "ahon_ln"): rng.normal(size=7), ("sft", "piqa", "ahon_ln"): rng.normal(size=7)}
    out = S.machine_spread(pair_distances(cells), dict(enumerate(labels)))
    for (cell, x), row in zip(cells.items(), out.itertuples(), strict=False):
        assert (row.stage, row.dataset, row.score) == cell and row.n_seeds == 7
        assert row.p_value == pytest.approx(brute_force_machine_p(x, labels))
        same = [abs(x[s] - x[t]) for s, t in itertools.combinations(range(7), 2) if labels[s] == labels[t]]
        assert row.within == pytest.approx(np.mean(same)) and row.machines == "epyc: 3, xeon: 4"
    assert list(out["p_holm"].iloc[:2]) == pytest.approx(multipletests(out["p_value"].iloc[:2], method="holm")[1])
    whole = out.iloc[2]
    assert (whole.stage, whole.dataset, whole.score) == ("all", "all", "all")
    assert whole.ratio == pytest.approx(math.exp(np.mean(np.log(out["ratio"].iloc[:2])))) and np.isnan(whole.p_holm)


def test_a_machine_that_moves_the_seeds_is_found_and_the_check_holds_its_level() -> None:
    rng = np.random.default_rng(0)
    labels = dict(enumerate(["a"] * 4 + ["b"] * 4))
    cell = ("dpo", "piqa", "awft")
    null = [S.machine_spread(pair_distances({cell: rng.normal(size=8)}), labels)["p_value"].iloc[0] for _ in range(300)]
    assert np.mean(np.array(null) <= 0.05) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300)  # exact: 4 of 70 labelings
    moved = np.r_[rng.normal(size=4), rng.normal(size=4) + 6.0]  # machine b lands 6 seed-sds away
    found = S.machine_spread(pair_distances({cell: moved}), labels).iloc[0]
    assert found.p_value == found.p_min == pytest.approx(2 / 70)  # the partition and its mirror image


def test_the_machine_check_needs_two_machines_with_two_seeds_each_and_leaves_seeds_kept_out() -> None:
    cell = ("grpo", "mmlu", "entropy_ln")
    distances = pair_distances({cell: np.arange(6.0)})
    assert S.machine_spread(distances, dict.fromkeys(range(6), "one")).empty
    assert S.machine_spread(distances, {0: "a", 1: "b", 2: "b", 3: "b", 4: "b", 5: "b"}).empty
    assert S.machine_spread(distances, {0: "a", 1: "a", 2: "b", 3: "b"})["n_seeds"].iloc[0] == 4  # 4, 5 unnamed
    kept = pd.DataFrame({"seed": range(6), "stage": "grpo", "kept": [True] * 5 + [False], "reason": "learned"})
    out = S.machine_spread(distances, {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}, kept)
    assert out["n_seeds"].iloc[0] == 5 and out["machines"].iloc[0] == "a: 3, b: 2"
