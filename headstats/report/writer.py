"""``headstats report``: a report of a results folder, built from its Parquet tables alone.

:func:`build_report` reads what ``headstats collect`` (score tables, ``model=<slug>/dataset=<name>/``)
and ``headstats ablate`` (intervention results, ``model=<slug>/task=<name>/``) wrote anywhere under
RESULTS_DIR, through :mod:`headstats.io.store`, and never loads a model, so it can be rebuilt on any
machine from the results alone. What the report holds is the list
:data:`headstats.report.sections.SECTIONS`: each section writes its headings, text, tables and
figures when its inputs are there. This module is the writer they write to (:class:`ReportWriter`),
which renders one content stream twice:

- ``index.html``: self-contained (figures embedded as PNG, tables inline);
- ``summary.md``: the same content in markdown, linking the figure files;
- ``figures/*.png|svg`` and ``tables/*.csv``.

Nothing written names a local folder: the cache directory becomes ``$HEADSTATS_CACHE`` and the home
directory ``~`` (:func:`public_text`).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import logging
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headstats.io import store
from headstats.io.assets import cache_dir
from headstats.jobs.specs import ReportSpec
from headstats.report import plots
from headstats.report import sections as report_sections
from headstats.report.sections.context import Context, Section

logger = logging.getLogger("headstats")

# --- no local paths in what is written ------------------------------------------------------------


def _local_roots() -> list[tuple[str, str]]:
    """(absolute path, its public name), longest first, so the cache (often under home) wins."""
    roots: dict[str, str] = {}
    home = Path.home()
    for path, name in ((cache_dir(), "$HEADSTATS_CACHE"), (home, "~")):
        for variant in (path, path.resolve()):
            text = str(variant).rstrip("/")
            if len(text) > 1 and text not in roots:
                roots[text] = name
    return sorted(roots.items(), key=lambda item: -len(item[0]))


def public_text(text: str, roots: list[tuple[str, str]] | None = None) -> str:
    """``text`` with the cache directory written ``$HEADSTATS_CACHE`` and the home directory ``~``."""
    for root, name in _local_roots() if roots is None else roots:
        text = re.sub(re.escape(root) + r"(?![\w.-])", lambda _m, n=name: n, text)
    return text


def _public_frame(frame: pd.DataFrame) -> pd.DataFrame:
    roots = _local_roots()

    def clean(value: object) -> object:
        return public_text(value, roots) if isinstance(value, str) else value

    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(clean)
    if out.index.dtype == object:
        out.index = out.index.map(clean)
    return out


# --- the writer: one content stream, two renderings -----------------------------------------------


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: .2em; } p.subtitle { margin-top: 0; color: #444; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table.t { border-collapse: collapse; font-size: .82em; margin: .5em 0 1.2em; }
table.t th, table.t td { border: 1px solid #ddd; padding: .2em .5em; text-align: right; }
table.t th { background: #f4f4f4; } table.t td:first-child { text-align: left; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; } figcaption { font-size: .85em; color: #555; }
code { background: #f4f4f4; padding: 0 .2em; } pre { background: #f8f8f8; padding: .6em; overflow-x: auto;
font-size: .8em; } details { margin: .5em 0 1em; } summary { cursor: pointer; color: #225; }
"""


def _inline_html(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", escaped)


def _format_cell(value: object, floatfmt: str) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, (float, np.floating)):
        return format(float(value), floatfmt)
    return str(value)


def markdown_table(frame: pd.DataFrame, floatfmt: str = ".3g", index: bool = False) -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""
    data = frame.reset_index() if index else frame
    header = [str(c) for c in data.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in data.itertuples(index=False):
        lines.append("| " + " | ".join(_format_cell(v, floatfmt).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


class ReportWriter:
    """Collects headings, text, tables and figures, and writes ``index.html`` + ``summary.md``.

    Figures go to ``out/figures`` (PNG and SVG) and are embedded in the HTML as PNG; tables are
    written as CSV (``out/tables/<name>.csv`` unless given another path relative to ``out``).
    :meth:`write` then removes the tables and figures an earlier build left in those two folders and
    this one did not write (a section renamed, a table no longer produced), so that every file of the
    report belongs to the text beside it.
    """

    def __init__(self, out: str | os.PathLike, title: str, *, dpi: int = 90, subtitle: str | None = None) -> None:
        self.out = Path(out)
        self.title = title
        self.subtitle = subtitle  # under the title, e.g. the exact identity of every model
        self.dpi = dpi
        self._html: list[str] = []
        self._md: list[str] = []
        self._written: set[Path] = set()

    def heading(self, text: str, level: int = 2) -> None:
        self._html.append(f"<h{level}>{_inline_html(text)}</h{level}>")
        self._md.append(f"{'#' * level} {text}")

    def text(self, text: str) -> None:
        """A paragraph; a blank line in ``text`` starts another (an analysis file's long notes)."""
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
        self._html.extend(f"<p>{_inline_html(p)}</p>" for p in paragraphs)
        self._md.append("\n\n".join(paragraphs))

    def table(
        self,
        frame: pd.DataFrame,
        name: str,
        *,
        floatfmt: str = ".3g",
        index: bool = False,
        csv: str | None = None,
        collapsed: str | None = None,
        max_md_rows: int = 60,
    ) -> Path:
        """Add a table (in a collapsed block titled ``collapsed`` if given) and write it as CSV."""
        frame = _public_frame(frame)
        path = self.out / (csv or f"tables/{name}.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp"
        frame.to_csv(tmp, index=index)
        os.replace(tmp, path)
        self._written.add(path)
        body = frame.to_html(
            index=index, border=0, classes="t", na_rep="", float_format=lambda v: format(v, floatfmt), escape=True
        )
        link = (
            f'<p><small>CSV: <a href="{html.escape(path.relative_to(self.out).as_posix())}">'
            f"{html.escape(path.relative_to(self.out).as_posix())}</a></small></p>"
        )
        block = body + link
        if collapsed:
            block = f"<details><summary>{_inline_html(collapsed)}</summary>{block}</details>"
        self._html.append(block)
        shown = frame if len(frame) <= max_md_rows else frame.head(max_md_rows)
        md = markdown_table(shown, floatfmt, index)
        if len(frame) > max_md_rows:
            md += f"\n\n({len(frame) - max_md_rows} more rows in `{path.relative_to(self.out).as_posix()}`)"
        elif collapsed:
            md = f"{collapsed}:\n\n{md}"
        self._md.append(md)
        return path

    def figure(self, fig: Figure, name: str, caption: str) -> Path:
        paths = plots.save_figure(fig, self.out / "figures", name, dpi=self.dpi)
        self._written.update(paths.values())
        data = base64.b64encode(paths["png"].read_bytes()).decode("ascii")
        rel_svg = paths["svg"].relative_to(self.out).as_posix()
        self._html.append(
            f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
            f'<figcaption>{_inline_html(caption)} <a href="{html.escape(rel_svg)}">(SVG)</a></figcaption></figure>'
        )
        self._md.append(f"![{name}]({paths['png'].relative_to(self.out).as_posix()})\n\n*{caption}*")
        return paths["png"]

    def details(self, summary: str, body: str) -> None:
        self._html.append(
            f"<details><summary>{_inline_html(summary)}</summary><pre>{html.escape(body)}</pre></details>"
        )
        self._md.append(f"<details><summary>{summary}</summary>\n\n```\n{body}\n```\n\n</details>")

    def write(self) -> Path:
        """Write ``index.html`` and ``summary.md`` atomically; returns the HTML path."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        from headstats import __version__

        footer = f"Generated by headstats {__version__} on {stamp}."
        page = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(self.title)}</title>'
            f"<style>{_CSS}</style></head><body>\n<h1>{html.escape(self.title)}</h1>\n"
            + (f'<p class="subtitle">{_inline_html(self.subtitle)}</p>\n' if self.subtitle else "")
            + "\n".join(self._html)
            + f"\n<hr><p><small>{html.escape(footer)}</small></p></body></html>\n"
        )
        head = f"# {self.title}\n\n" + (f"{self.subtitle}\n\n" if self.subtitle else "")
        md = head + "\n\n".join(self._md) + f"\n\n---\n{footer}\n"
        index = self.out / "index.html"
        for path, text in ((index, page), (self.out / "summary.md", md)):
            tmp = path.parent / f".{path.name}.tmp"
            tmp.write_text(public_text(text), encoding="utf-8")
            os.replace(tmp, path)
        self._remove_stale()
        return index

    def _remove_stale(self) -> None:
        """Remove the ``tables/*.csv`` and ``figures/*.png|svg`` this build did not write."""
        stale = [
            path
            for folder, suffixes in (("tables", {".csv"}), ("figures", {".png", ".svg"}))
            if (self.out / folder).is_dir()
            for path in sorted((self.out / folder).iterdir())
            if path.is_file() and path.suffix in suffixes and path not in self._written
        ]
        for path in stale:
            path.unlink()
        if stale:
            logger.info(
                "removed %d table(s) and figure(s) of an earlier build: %s",
                len(stale),
                ", ".join(p.relative_to(self.out).as_posix() for p in stale),
            )


# --- a report: the list of sections over one results folder ---------------------------------------


def build_report(
    results_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    sections: Sequence[Section] | None = None,
    planned: pd.DataFrame | None = None,
    **options: object,
) -> Path:
    """Build the report of everything under ``results_dir`` into ``out``; returns ``out/index.html``.

    ``options`` are those of :class:`headstats.jobs.specs.ReportSpec` (declared and checked there,
    as for the command line and an analysis file's ``[report_options]``): ``title``; ``metric``, the
    accuracy column (``correct`` or ``correct_norm``); ``rank_by``, the curve area that ranks score
    functions (``grid_auc``, or the study's ``norm_auc``); ``n_boot``, ``n_perm``, ``n_split``:
    bootstrap resamples, permutations and random halvings behind each W1 interval, p-value and
    noise floor; ``depth_bins``; ``rates``, the selection rates of the score-overlap table;
    ``figure_scores``, the scores drawn in distribution figures when present (tables cover every
    score); ``seed``, ``dpi``, ``progress``. ``sections``: the sections to write, in order
    (default: :data:`headstats.report.sections.SECTIONS`). ``planned``: the sweep points an analysis
    file plans (columns model, task, score, target; :func:`headstats.jobs.analysis.planned_points`),
    so that a report of an unfinished run says what is missing.
    """
    spec = ReportSpec.from_kwargs(options)
    results = Path(results_dir)
    store.check_schema_versions(results)  # mixed schema versions cannot be analysed together
    context = Context(results, spec, planned)
    if not context.partitions:
        raise store.StoreError(
            f"no score or intervention tables under {str(results)!r}: expected "
            ".../model=<slug>/dataset=<name>/*.parquet (headstats collect) or "
            ".../model=<slug>/task=<name>/*.parquet (headstats ablate)"
        )
    out_dir = store.ensure_writable(out)
    models = "; ".join(f"`{slug}`" + (f" = {ident}" if ident != slug else "") for slug, ident in context.models.items())
    writer = ReportWriter(
        out_dir, spec.title or f"headstats report: {results.name}", dpi=spec.dpi, subtitle=f"Models: {models}."
    )
    kinds = [p.kind for p in context.partitions]
    title = f" --title {shlex.quote(spec.title)}" if spec.title else ""
    writer.text(
        f"Built from `{results}` only (no model loaded): {kinds.count('scores')} score table(s), "
        f"{kinds.count('interventions')} intervention table(s). Rebuild with "
        f"`headstats report {results} --out {out}{title}`."
    )
    if context.stray:
        writer.text(
            f"{len(context.stray)} Parquet file(s) outside the results layout were ignored, e.g. "
            f"`{context.stray[0].relative_to(results).as_posix()}`."
        )
    for section in report_sections.SECTIONS if sections is None else sections:
        section(writer, context)
    return writer.write()
