"""A score is complete or refused: every registered score has its reference formula (tests/families.py),
its row on the concepts page, and a colour of its own in every figure."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import matplotlib as mpl
from families import reference_scores, tiny_model
from figure_checks import ciede2000, srgb_to_lab

from headstats.engine.scores import SCORES, score_ids
from headstats.report.figure import FAMILY_LOOKS, SPARE_COLOURS

ROOT = Path(__file__).resolve().parents[1]
MIN_DELTA_E = 15.0  # CIEDE2000, as the browser test holds every figure's colours


def missing_references(registered: list[str], referenced: set[str]) -> str:
    """The message for registered scores without a reference formula, or ''."""
    missing = [s for s in registered if s not in referenced]
    return (
        f"score(s) {', '.join(missing)} registered in headstats/engine/scores.py have no reference formula: add each "
        "to reference_scores in tests/families.py, written out literally from its row of docs/concepts.md#scores, "
        "so that tests/test_engine.py checks the registered computation against it"
        if missing
        else ""
    )


def test_every_registered_score_has_a_reference_formula() -> None:
    referenced = set(reference_scores(tiny_model("llama"), [3, 5, 7, 11]))
    registered = [s for s in score_ids() if not SCORES[s].is_random]
    assert not missing_references(registered, referenced), missing_references(registered, referenced)
    assert missing_references([*registered, "mine"], referenced) == (
        "score(s) mine registered in headstats/engine/scores.py have no reference formula: add each to "
        "reference_scores in tests/families.py, written out literally from its row of docs/concepts.md#scores, so "
        "that tests/test_engine.py checks the registered computation against it"
    )


def test_the_concepts_page_lists_every_registered_score_and_no_other() -> None:
    """Each score without a normaliser (and each of `lthon`'s two) has its row; each layer-normalised
    `<id>_ln` is named in the paragraph that defines the variants."""
    page = (ROOT / "docs" / "concepts.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| [^|]+\| [^|]+\| (?:score|u) [<>]", page, flags=re.M)
    paragraph = page.split("also has a **layer-normalised** variant", 1)[0].rsplit("\n\n", 1)[1]
    variants = {f"{family}_ln" for family in re.findall(r"`([a-z]+)`", paragraph)}
    assert sorted(set(rows) | variants) == sorted(score_ids())
    assert len(rows) == len(set(rows))


def _lab(colour: str) -> tuple[float, float, float]:
    r, g, b = (round(v * 255) for v in mpl.colors.to_rgb(colour))
    return srgb_to_lab((r, g, b))


def test_every_score_family_colour_spare_ones_included_is_at_least_15_ciede2000_from_every_other() -> None:
    colours = {f"{f} ({c})": c for f, (c, _) in FAMILY_LOOKS.items()}
    colours |= {f"spare {i} ({c})": c for i, c in enumerate(SPARE_COLOURS)} | {"grey": "grey", "black": "black"}
    pairs = {(a, b): ciede2000(_lab(colours[a]), _lab(colours[b])) for a, b in itertools.combinations(colours, 2)}
    closest = min(pairs, key=pairs.get)
    print(f"\nclosest score-family colours: {closest[0]} and {closest[1]}, {pairs[closest]:.2f} CIEDE2000")
    assert pairs[closest] >= MIN_DELTA_E, f"{closest} are {pairs[closest]:.1f} CIEDE2000 apart"
    assert all(ciede2000(_lab(c), _lab("white")) >= 30 for c in SPARE_COLOURS)  # none too pale on white
