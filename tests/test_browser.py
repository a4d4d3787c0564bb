"""Every committed report under reports/, opened in a real browser at 1280 px: Debian's ``chromium``
driven by Playwright for Python (never a browser download: ``playwright install`` is not needed).

At 1280 px each report loads with no failed image and no console error, never scrolls sideways,
every link of its contents (and every other in-page link) lands on an element of the page, and the
abstract and the headline figure lie within the first 1,200 px. Every figure's text is at least 10 px as
shown (its SVG's font sizes times the size the page shows it at), and no figure appears twice. Every
SVG figure of a report, opened on its own, has no two labels that overlap, no legend over its data,
and series colours that can be told apart and mean one thing (tests/figure_checks.py). Without
playwright or chromium the test is skipped and says which is missing and how to install it.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path

import pytest
from figure_checks import ciede2000, colour_problems, legends_on_data, measure, overlapping_labels
from matplotlib.figure import Figure

from headstats.report.figure import save_figure

ROOT = Path(__file__).resolve().parents[1]
REPORTS = sorted(p.parent for p in (ROOT / "reports").glob("*/index.html"))
CHROMIUM = Path(os.environ.get("HEADSTATS_CHROMIUM", "/usr/bin/chromium"))
# Headless, no sandbox (CI runs as root), and nothing that reaches the network on its own.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WIDTH = 1280
FOLD = 1200  # px: the abstract and the headline figure must end above this
MIN_TEXT_PX = 10  # the smallest figure text a reader is shown
COLUMN = 1160  # px: a report's column at 1280 px
SVG_WIDTH = re.compile(r'<svg[^>]*\bviewBox="[\d.]+ [\d.]+ ([\d.]+) [\d.]+"')
SVG_FONT = re.compile(r"font-size: ?([\d.]+)px")


def smallest_text_px(svg: str, shown_width: float) -> float:
    """The smallest font size of an SVG's text as shown ``shown_width`` CSS px wide."""
    sizes = [float(size) for size in SVG_FONT.findall(svg)]
    return min(sizes) * shown_width / float(SVG_WIDTH.search(svg)[1]) if sizes else math.inf


MEASURE = """() => {
  const box = sel => { const e = document.querySelector(sel); if (!e) return null;
    const r = e.getBoundingClientRect(); return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY}; };
  const root = document.documentElement;
  const local = [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href').slice(1));
  return {
    scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, height: root.scrollHeight,
    failedImages: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
    images: document.images.length,
    contents: [...document.querySelectorAll('nav#contents a')].map(a => a.getAttribute('href')),
    unresolved: local.filter(id => !document.getElementById(decodeURIComponent(id))),
    abstract: box('#abstract'), headline: box('figure.headline'),
    figures: [...document.images].map(i => ({alt: i.alt, shown: i.getBoundingClientRect().width, src: i.src})),
  };
}"""


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="playwright is not installed: pip install playwright (the PyPI package; it drives Debian's "
        "chromium, so do not run `playwright install`)",
    )
    if not CHROMIUM.is_file():
        pytest.skip(f"no chromium at {CHROMIUM}: apt-get install -y chromium, or set HEADSTATS_CHROMIUM")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


def test_there_are_committed_reports() -> None:
    assert len(REPORTS) >= 4, REPORTS


@pytest.mark.parametrize("report", REPORTS, ids=[p.name for p in REPORTS])
def test_a_committed_report_reads_in_a_browser(browser, report: Path) -> None:
    if not (report / "_manifest.json").is_file():
        pytest.skip(
            f"{report.name} was built before the current report writer (it has no _manifest.json) and its results "
            "are not committed: rebuild it with its analysis file (headstats run analyses/<name>.toml)"
        )
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    # A report is self-contained: any request off this machine is a fault, and is refused.
    page.route("http*://**", lambda route: (errors.append(f"network request: {route.request.url}"), route.abort()))
    try:
        page.goto((report / "index.html").as_uri(), wait_until="load")
        m = page.evaluate(MEASURE)
    finally:
        page.close()
    assert errors == [], errors
    assert m["images"] > 0 and m["failedImages"] == [], m["failedImages"]
    assert m["scrollWidth"] <= m["clientWidth"], f"the page scrolls sideways: {m['scrollWidth']} px > {WIDTH}"
    assert m["contents"], "no table of contents"
    assert all(href.startswith("#") for href in m["contents"]) and m["unresolved"] == [], m["unresolved"]
    assert m["abstract"] is not None and m["abstract"]["bottom"] <= FOLD, m["abstract"]
    assert m["headline"] is not None and m["headline"]["top"] < m["headline"]["bottom"] <= FOLD, m["headline"]
    problems = figure_problems(report, m["figures"])
    assert problems == [], problems


def figure_problems(report: Path, figures: list[dict]) -> list[str]:
    """A figure shown twice, and figures whose smallest text is below MIN_TEXT_PX as shown (one in a
    closed block as it would be shown when opened: its own width, at most the page's column)."""
    shown = figures
    problems = []
    twice = [src for src, n in Counter(f["src"] for f in shown).items() if n > 1]
    if twice:
        problems.append(
            "the same figure is shown twice: " + ", ".join(sorted({f["alt"] for f in shown if f["src"] in twice}))
        )
    small = {}
    for figure in shown:
        svg = report / "figures" / f"{figure['alt']}.svg"
        if svg.is_file():
            text = svg.read_text(encoding="utf-8")
            width = figure["shown"] or min(float(SVG_WIDTH.search(text)[1]) * 96 / 72, COLUMN)
            px = smallest_text_px(text, width)
            if px < MIN_TEXT_PX - 0.05:
                small[figure["alt"]] = round(px, 1)
    if small:
        problems.append(f"figure text below {MIN_TEXT_PX} px at {WIDTH} px (smallest, px): {small}")
    return problems


@pytest.mark.parametrize("report", REPORTS, ids=[p.name for p in REPORTS])
def test_a_committed_reports_figures_have_no_overlap_and_distinct_colours(browser, report: Path) -> None:
    figures = sorted((report / "figures").glob("*.svg"))
    assert figures, f"{report.name} has no SVG figure"
    page = browser.new_page()
    try:
        problems = {svg.stem: layout_problems(measure(page, svg)) for svg in figures}
    finally:
        page.close()
    failing = {name: found for name, found in problems.items() if found}
    assert not failing, "\n".join(f"{report.name}/figures/{name}.svg: {'; '.join(p)}" for name, p in failing.items())


def layout_problems(measured: dict) -> list[str]:
    """Overlapping labels, legends over data, and colours that cannot be told apart or mean two things."""
    return overlapping_labels(measured) + legends_on_data(measured) + colour_problems(measured)


def _measured(browser, tmp_path: Path, fig: Figure) -> dict:
    page = browser.new_page()
    try:
        return measure(page, save_figure(fig, tmp_path, "figure", formats=("svg",))["svg"])
    finally:
        page.close()


def test_the_layout_checks_find_overlapping_labels_and_a_legend_on_data(browser, tmp_path) -> None:
    fig = Figure(figsize=(5, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([0, 1], [0.5, 0.5], color="C0", label="a line across the middle")
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.text(0.1, 0.8, "first label")
    ax.text(0.15, 0.8, "second label")
    ax.legend(loc="center")
    m = _measured(browser, tmp_path, fig)
    (overlap,) = overlapping_labels(m)
    assert overlap.startswith("'first label' overlaps 'second label' by ")
    (covered,) = legends_on_data(m)
    assert "the legend of a line across the middle" in covered and "px of data" in covered
    # Apart, and the legend outside the axes: nothing to report.
    ax.texts[1].set_position((0.1, 0.2))
    ax.get_legend().remove()
    fig.legend(loc="outside right upper")
    m = _measured(browser, tmp_path, fig)
    assert overlapping_labels(m) == [] and legends_on_data(m) == []
    assert len(m["legends"]) == 1 and m["legends"][0]["covered"] == 0


def test_the_colour_check_finds_close_colours_and_a_colour_with_two_meanings(browser, tmp_path) -> None:
    fig = Figure(figsize=(6, 3), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot([0, 1], [0, 1], color="tab:blue", label="model a")
    left.plot([0, 1], [1, 0], color="tab:orange", label="model b")
    right.plot([0, 1], [0, 1], color="tab:blue", label="model a")
    right.plot([0, 1], [1, 0], color="tab:green", label="model c")
    for ax in (left, right):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1))
    assert colour_problems(_measured(browser, tmp_path, fig)) == []
    # One colour for two models; one model in two colours; two colours 11.6 apart.
    right.lines[1].set_color("tab:orange")
    right.lines[0].set_color("#de8f05")
    left.lines[0].set_color("#ca9161")
    for ax in (left, right):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1))
    problems = colour_problems(_measured(browser, tmp_path, fig))
    assert "'model a' is drawn 2 ways in one figure" in problems
    assert "'model b' and 'model c' look the same" in problems
    close = "colours rgb(202, 145, 97) (model a) and rgb(222, 143, 5) (model a) are 11.6 CIEDE2000 apart"
    assert any(p.startswith(close) for p in problems), problems


@pytest.mark.parametrize(
    ("lab1", "lab2", "expected"),
    [  # pairs 1, 2, 7, 17 and 31 of Sharma, Wu and Dalal (2005), Table 1
        ((50, 2.6772, -79.7751), (50, 0, -82.7485), 2.0425),
        ((50, -1.3802, -84.2814), (50, 0, -82.7485), 1.0000),
        ((50, 0, 0), (50, -1, 2), 2.3669),
        ((50, 2.5, 0), (73, 25, -18), 27.1492),
        ((22.7233, 20.0904, -46.6940), (23.0331, 14.9730, -42.5619), 2.0373),
    ],
)
def test_ciede2000_matches_the_published_test_pairs(lab1, lab2, expected) -> None:
    assert ciede2000(lab1, lab2) == pytest.approx(expected, abs=5e-5)
    assert ciede2000(lab2, lab1) == pytest.approx(expected, abs=5e-5)
