"""What a browser can check of a matplotlib SVG figure beyond its font sizes: labels that overlap,
legends drawn over data, and series colours that cannot be told apart or mean two things.

:func:`measure` opens one SVG in a Playwright page and reads what chromium lays out: every text's
box (its four corners on screen, rotation included), and per legend its box, its entries (label and
the look of its handle: colours, dashes, marker) and how many of its pixels the figure's data would
paint with everything else hidden. The checks then read those numbers. They rely on the groups
matplotlib's SVG writer names: ``axes_N`` holds an axes' artists (its background patch first),
``legend_N`` a legend (its frame first, then each entry's handles followed by its ``text_N``), and
data artists are ``line2d_N``, ``PathCollection_N``, ``LineCollection_N``, ``*PolyCollection_N``,
``QuadMesh_N``, ``image_N`` and ``patch_N`` directly inside an axes.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from pathlib import Path

OVERLAP_PX = 1.0  # two texts overlap when their boxes share more than this depth (a line's box is ~1.2 em)
COVERED_PX = 4  # pixels of data under a legend's box (less its 1 px edge) beyond which it covers data
MIN_DELTA_E = 15.0  # CIEDE2000: tab10's closest pair is 16.2 and Okabe-Ito's 21.7 apart
DATA = r"^(line2d|PathCollection|LineCollection|PolyCollection|FillBetweenPolyCollection|QuadMesh|image|patch)_"

MEASURE = """() => {
  const corners = e => { const b = e.getBBox(), m = e.getScreenCTM();
    return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
      .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]); };
  const texts = [...document.querySelectorAll('text')].filter(t => t.textContent.trim())
    .map(t => ({text: t.textContent.trim(), corners: corners(t)}));
  const look = handle => [...handle.querySelectorAll('path, use, rect')].map(e => { const s = getComputedStyle(e);
    return {stroke: s.stroke, fill: s.fill, dashes: s.strokeDasharray, marker: e.getAttribute('xlink:href') || ''}; });
  const legends = [...document.querySelectorAll('g[id^="legend_"]')].map(g => {
    const r = g.getBoundingClientRect(), entries = []; let handles = [];
    [...g.children].forEach((child, i) => {
      if (/^text_/.test(child.id)) { if (handles.length) entries.push({label: child.textContent.trim(), look: handles});
        handles = []; }
      else if (!(i === 0 && /^patch_/.test(child.id))) handles = handles.concat(look(child));  // not the frame
    });
    return {box: {x: r.x, y: r.y, width: r.width, height: r.height}, entries};
  });
  return {texts, legends};
}"""

# Paints only the data artists of every axes (not its background), rasterised on a white canvas,
# and counts the non-white pixels inside each legend's box less its 1 px edge.
COVERED = """async ([pattern, boxes]) => {
  const data = new RegExp(pattern), svg = document.documentElement;
  svg.style.visibility = 'hidden';
  document.querySelectorAll('clipPath').forEach(c => c.style.visibility = 'visible');  // a hidden clip hides all
  for (const axes of document.querySelectorAll('g[id^="axes_"]'))
    [...axes.children].filter(c => data.test(c.id || '')).slice(1).forEach(c => c.style.visibility = 'visible');
  const r = svg.getBoundingClientRect(), image = new Image();
  image.src = 'data:image/svg+xml;base64,' +
    btoa(unescape(encodeURIComponent(new XMLSerializer().serializeToString(svg))));
  await image.decode();
  const canvas = new OffscreenCanvas(Math.ceil(r.width), Math.ceil(r.height)), ctx = canvas.getContext('2d');
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(image, 0, 0, r.width, r.height);
  return boxes.map(b => { const x = Math.ceil(b.x + 1), y = Math.ceil(b.y + 1);
    const w = Math.floor(b.width - 2), h = Math.floor(b.height - 2);
    if (w < 1 || h < 1) return 0;
    const d = ctx.getImageData(x, y, w, h).data; let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.min(d[i], d[i + 1], d[i + 2]) < 240) n++;
    return n; });
}"""


def measure(page, svg: Path) -> dict:
    """The texts and legends of ``svg`` as chromium lays it out (CSS px at the SVG's own size), each
    legend with ``covered``: the pixels of data inside its box."""
    page.goto(svg.as_uri(), wait_until="load")
    m = page.evaluate(MEASURE)
    covered = page.evaluate(COVERED, [DATA, [legend["box"] for legend in m["legends"]]])
    for legend, pixels in zip(m["legends"], covered, strict=True):
        legend["covered"] = pixels
    return m


def overlap_depth(a: list[list[float]], b: list[list[float]]) -> float:
    """How deep two convex quadrilaterals (four corners each) overlap: the smallest overlap of their
    projections on the edge normals of either (separating axes); at most 0 when they do not touch."""
    depth = math.inf
    for quad in (a, b):
        for (x0, y0), (x1, y1) in zip(quad, quad[1:] + quad[:1], strict=True):
            n = math.hypot(x1 - x0, y1 - y0)
            if n == 0:
                continue
            nx, ny = (y0 - y1) / n, (x1 - x0) / n
            pa = [x * nx + y * ny for x, y in a]
            pb = [x * nx + y * ny for x, y in b]
            depth = min(depth, min(max(pa), max(pb)) - max(min(pa), min(pb)))
    return depth


def overlapping_labels(measured: dict, tolerance: float = OVERLAP_PX) -> list[str]:
    """Each pair of texts whose boxes overlap by more than ``tolerance`` px."""
    return [
        f"{a['text']!r} overlaps {b['text']!r} by {depth:.1f} px"
        for a, b in itertools.combinations(measured["texts"], 2)
        if (depth := overlap_depth(a["corners"], b["corners"])) > tolerance
    ]


def legends_on_data(measured: dict, tolerance: int = COVERED_PX) -> list[str]:
    """Each legend whose box has more than ``tolerance`` pixels of data under it."""
    return [
        f"the legend of {', '.join(e['label'] for e in legend['entries'][:3])}... covers {legend['covered']} px of data"
        for legend in measured["legends"]
        if legend["covered"] > tolerance
    ]


def _rgb(css: str) -> tuple[int, int, int] | None:
    match = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", css)
    if match is None or match[4] == "0":
        return None
    return int(match[1]), int(match[2]), int(match[3])


def colour_problems(measured: dict, min_delta_e: float = MIN_DELTA_E) -> list[str]:
    """Series colours that break one meaning per figure: a label whose handle looks different in two
    of the figure's legends, two labels with the same look, and two colours of the legends closer
    than ``min_delta_e`` (CIEDE2000)."""
    looks: dict[str, set] = defaultdict(set)
    colours: dict[tuple[int, int, int], set[str]] = defaultdict(set)
    for legend in measured["legends"]:
        for entry in legend["entries"]:
            look = tuple(sorted(tuple(sorted(part.items())) for part in entry["look"]))
            looks[entry["label"]].add(look)
            for part in entry["look"]:
                for css in (part["stroke"], part["fill"]):
                    if (rgb := _rgb(css)) is not None:
                        colours[rgb].add(entry["label"])
    problems = [f"{label!r} is drawn {len(seen)} ways in one figure" for label, seen in looks.items() if len(seen) > 1]
    by_look = defaultdict(list)
    for label, seen in looks.items():
        for look in seen:
            by_look[look].append(label)
    problems += [f"{' and '.join(map(repr, labels))} look the same" for labels in by_look.values() if len(labels) > 1]
    for (c1, l1), (c2, l2) in itertools.combinations(sorted(colours.items()), 2):
        if (delta := ciede2000(srgb_to_lab(c1), srgb_to_lab(c2))) < min_delta_e:
            problems.append(
                f"colours rgb{c1} ({', '.join(sorted(l1))}) and rgb{c2} ({', '.join(sorted(l2))}) are "
                f"{delta:.1f} CIEDE2000 apart (at least {min_delta_e:g} needed)"
            )
    return problems


def srgb_to_lab(rgb: tuple[int, int, int]) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an 8-bit sRGB colour."""

    def linear(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    r, g, b = (linear(float(c)) for c in rgb)
    x = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047
    y = 0.2126729 * r + 0.7151522 * g + 0.0721750 * b
    z = (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def ciede2000(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    """The CIEDE2000 colour difference of two L*a*b* colours (Sharma, Wu and Dalal 2005)."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean**7 / (c_mean**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    if c1p * c2p == 0:
        dh, h_mean = 0.0, h1p + h2p
    else:
        dh = h2p - h1p if abs(h2p - h1p) <= 180 else h2p - h1p - math.copysign(360, h2p - h1p)
        h_mean = (h1p + h2p) / 2 if abs(h1p - h2p) <= 180 else (h1p + h2p + (360 if h1p + h2p < 360 else -360)) / 2
    d_h = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_mean, c_mean_p = (l1 + l2) / 2, (c1p + c2p) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(h_mean - 30))
        + 0.24 * math.cos(math.radians(2 * h_mean))
        + 0.32 * math.cos(math.radians(3 * h_mean + 6))
        - 0.20 * math.cos(math.radians(4 * h_mean - 63))
    )
    r_t = (
        -math.sin(math.radians(60 * math.exp(-(((h_mean - 275) / 25) ** 2))))
        * 2
        * math.sqrt(c_mean_p**7 / (c_mean_p**7 + 25**7))
    )
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c, s_h = 1 + 0.045 * c_mean_p, 1 + 0.015 * c_mean_p * t
    dl, dc, dhh = (l2 - l1) / s_l, (c2p - c1p) / s_c, d_h / s_h
    return math.sqrt(dl**2 + dc**2 + dhh**2 + r_t * dc * dhh)
