"""``headstats report``: a report of a results folder, built from its Parquet tables alone.

:func:`build_report` reads what ``headstats collect`` (score tables, ``model=<slug>/dataset=<name>/``)
and ``headstats ablate`` (intervention results, ``model=<slug>/task=<name>/``) wrote anywhere under
RESULTS_DIR, through :mod:`headstats.io.store`, and never loads a model, so it can be rebuilt on any
machine from the results alone. What the report holds is the list
:data:`headstats.report.sections.SECTIONS`: each section writes its headings, text, tables and
figures when its inputs are there. This module is the writer they write to (:class:`ReportWriter`),
which renders one content stream twice:

- ``index.html``: self-contained (figures embedded as SVG or PNG, tables inline), led by the
  answer: title, abstract, headline figure and main table, then contents, body and the
  "Methods and caveats" appendix;
- ``summary.md``: the same content in markdown, linking the figure files;
- ``figures/*.png|svg`` and ``tables/*.csv``.

Nothing written names a local folder: the cache directory becomes ``$HEADSTATS_CACHE`` and the home
directory ``~`` (:func:`public_text`).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import html
import logging
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
from markdown_it import MarkdownIt
from matplotlib.figure import Figure

from headstats.io import store
from headstats.io.assets import ELSEWHERE, cache_dir, portable_name
from headstats.report import sections as report_sections
from headstats.report.figure import CSS_PX_PER_PT, make_legible, save_figure
from headstats.report.freshness import INPUTS_KEY, report_inputs
from headstats.report.sections.context import ABSTRACT_WORDS, Context, Section, word_count
from headstats.specs import ReportSpec

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


def _public_frame(frame: pd.DataFrame, roots: list[tuple[str, str]] | None = None) -> pd.DataFrame:
    roots = _local_roots() if roots is None else roots

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

APPENDIX_TITLE = "Methods and caveats"
APPENDIX_ANCHOR = "methods-and-caveats"
MANIFEST_FILE = store.MANIFEST_FILE  # the files a build wrote: the only ones the next build may remove
SVG_RATIO = 1.5  # embed a figure as SVG (crisp) unless its SVG is this many times its PNG's size
HEADLINE_HEIGHT_PX = 640  # the headline figure's largest height on the page (report.css)
MD_ROWS = 25  # rows of a table shown in summary.md; the CSV has them all

GLOSSARY_PAGE = Path("docs") / "statistics.md"  # the glossary's page in a checkout; its anchors are terms
_GLOSSARY_LINK = re.compile(r"\[([^\]]+)\]\(glossary:([A-Za-z0-9_-]+)\)")
_MARKDOWN = MarkdownIt("commonmark", {"html": False})
_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("headstats.report", "templates"),
    autoescape=jinja2.select_autoescape(default=True),
    keep_trailing_newline=True,
)


def _inline_html(text: str) -> str:
    """One line of Markdown (code, bold, links) as HTML; raw HTML in ``text`` is escaped."""
    return _MARKDOWN.renderInline(text)


def _block_html(text: str) -> str:
    """Markdown paragraphs (a blank line starts another) as HTML; raw HTML in ``text`` is escaped."""
    return _MARKDOWN.render(text).strip()


def glossary_link(out: str | os.PathLike) -> str | None:
    """The glossary page as a link relative to the report folder ``out``, when ``out`` lies in a
    checkout that has it (``../../docs/statistics.md`` for ``reports/<name>``; the docs site's hook
    points the published copies at the site's page); None elsewhere."""
    folder = Path(out).resolve()
    for root in (folder, *folder.parents):
        if (root / GLOSSARY_PAGE).is_file():
            return Path(os.path.relpath(root / GLOSSARY_PAGE, folder)).as_posix()
    return None


def anchor_slug(text: str) -> str:
    """The anchor of a heading as GitHub derives it (lower case, punctuation dropped, spaces as
    hyphens), so that the contents' links work in ``summary.md`` on GitHub and in ``index.html``."""
    slug = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return slug.replace(" ", "-")


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


class _Stream:
    """One part of a report (its body, or the methods appendix) in both renderings."""

    def __init__(self) -> None:
        self.html: list[str] = []
        self.md: list[str] = []
        self.toc: list[tuple[int, str, str]] = []  # (level, text, anchor)


class ReportWriter:
    """Collects a report's parts and writes ``index.html`` + ``summary.md``, read top-down:

    1. the title, the :meth:`abstract` (at most :data:`ABSTRACT_WORDS` words), one :meth:`headline`
       figure and the :meth:`main_table` with its one-line legend, whatever the order of the calls;
    2. a table of contents linking every heading of levels 2 and 3;
    3. the body: what sections write with :meth:`heading`, :meth:`text`, :meth:`table`,
       :meth:`figure` and :meth:`details` (inside ``with`` :meth:`collapsed` in a ``<details>`` block);
    4. the "Methods and caveats" appendix: what sections write inside ``with`` :meth:`appendix`, and
       the legends of :meth:`note`, each written once however many tables it explains.

    Figures go to ``out/figures`` (PNG and SVG) and are embedded in the HTML, as SVG unless that is
    more than :data:`SVG_RATIO` times the PNG; tables are written as CSV (``out/tables/<name>.csv``
    unless given another path relative to ``out``) and shown in boxes that scroll sideways on their
    own, so the page never does. In ``summary.md`` a collapsed table is a link to its CSV.
    :meth:`write` lists every file it wrote in ``out/_manifest.json`` and removes the files the
    previous build's manifest lists and this one did not write (a section renamed, a table no longer
    produced), so that every file of the report belongs to the text beside it; a file that no build
    listed (a user's own) is never removed.
    """

    def __init__(self, out: str | os.PathLike, title: str, *, dpi: int = 90, subtitle: str | None = None) -> None:
        self.folder = store.claim_output_folder(out, expect=("index.html", "summary.md"))
        self.out = self.folder.root
        self.title = title
        self.subtitle = subtitle  # under the title, e.g. the exact identity of every model
        self.dpi = dpi
        self._lead: dict[str, tuple[str, str]] = {}  # abstract, headline, main table: (html, md)
        self._body, self._appendix = _Stream(), _Stream()
        self._stream = self._body
        self._collapsed = 0
        self._notes: dict[str, str] = {}  # note title -> its anchor
        self._anchors: set[str] = {APPENDIX_ANCHOR, "contents", "abstract"}
        # What the build read (headstats.report.freshness.report_inputs), recorded in the manifest.
        self.inputs: dict | None = None
        self._hidden: dict[str, str] = {}  # local folders outside the cache and home -> how the text names them
        # Subfolders of ``out`` another headstats job writes (a comparison's score tables in OUT/results):
        # not this report's files, and not a user's either.
        self.elsewhere: tuple[str, ...] = ()
        self.glossary = glossary_link(self.out)  # where [term](glossary:anchor) links lead; None: nowhere

    def hide(self, *paths: str | os.PathLike) -> None:
        """Name each of ``paths`` (a model folder, the results folder) by :func:`portable_name` in
        everything written, when it lies outside the cache and the home directory."""
        for path in paths:
            for variant in {os.fspath(path), str(Path(path).expanduser().absolute())}:
                if Path(variant).is_absolute() and portable_name(variant).startswith(ELSEWHERE):
                    self._hidden[variant.rstrip("/")] = portable_name(variant)

    def _resolve(self, text: str) -> str:
        """``text`` with each ``[term](glossary:anchor)`` pointed at the glossary page, or written as
        the plain term where the report has no glossary beside it."""
        if self.glossary is None:
            return _GLOSSARY_LINK.sub(r"\1", text)
        return _GLOSSARY_LINK.sub(lambda m: f"[{m[1]}]({self.glossary}#{m[2]})", text)

    def roots(self) -> list[tuple[str, str]]:
        """The local paths the text names otherwise, longest first (:func:`public_text`)."""
        return sorted([*_local_roots(), *self._hidden.items()], key=lambda item: -len(item[0]))

    # --- the lead: what a reader with 30 seconds sees ---

    def abstract(self, text: str) -> None:
        """The answer in plain words with the main numbers: at most :data:`ABSTRACT_WORDS` words."""
        words = word_count(text)
        if words > ABSTRACT_WORDS:
            raise ValueError(
                f"an abstract has at most {ABSTRACT_WORDS} words, this one {words}: keep the answer and its main "
                "numbers, and move the rest to the body"
            )
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", self._resolve(text)) if p.strip()]
        self._lead["abstract"] = (
            '<div id="abstract">' + _block_html("\n\n".join(paragraphs)) + "</div>",
            "\n\n".join(paragraphs),
        )

    def headline(self, fig: Figure, name: str, caption: str) -> Path:
        """The one figure shown under the abstract."""
        html_block, md = self._figure_blocks(fig, name, caption, css_class="headline")
        self._lead["headline"] = (html_block, md)
        return self.out / "figures" / f"{name}.png"

    def main_table(
        self,
        frame: pd.DataFrame,
        name: str,
        *,
        legend: str,
        full_legend: str | None = None,
        floatfmt: str = ".3g",
        csv: str | None = None,
    ) -> Path:
        """The report's main table under the headline figure, with a one-line ``legend`` and a link to
        the heading ``full_legend`` (its anchor) where the columns are explained in full; written as
        CSV like :meth:`table`."""
        frame = _public_frame(frame, self.roots())
        path = self._write_csv(frame, name, csv, False)
        more = f" [Full legend](#{full_legend})." if full_legend else ""
        legend = self._resolve(legend)
        self._lead["table"] = (
            self._table_html(frame, path, floatfmt, False, legend=_inline_html(legend + more)),
            markdown_table(frame, floatfmt) + f"\n\n*{legend}{more}*",
        )
        return path

    # --- the body, and the appendix ---

    @contextlib.contextmanager
    def appendix(self) -> Iterator[None]:
        """Write into the "Methods and caveats" appendix at the end (paths, dtypes, history, legends)."""
        previous, self._stream = self._stream, self._appendix
        try:
            yield
        finally:
            self._stream = previous

    def note(self, title: str, text: str) -> str:
        """A methods note: ``text`` under the heading ``title`` in the appendix, written the first time
        a title is given (a legend that several tasks share appears once); returns its anchor, for a
        ``[link](#anchor)`` in the body."""
        if title in self._notes:
            return self._notes[title]
        with self.appendix():
            anchor = self.heading(title, 3)
            self.text(text)
        self._notes[title] = anchor
        return anchor

    @contextlib.contextmanager
    def collapsed(self, summary: str) -> Iterator[None]:
        """Write into a ``<details>`` block titled ``summary`` (closed until the reader opens it)."""
        self._stream.html.append(f"<details><summary>{_inline_html(summary)}</summary>")
        self._stream.md.append(f"**{summary}** (collapsed in index.html):")
        self._collapsed += 1
        try:
            yield
        finally:
            self._collapsed -= 1
            self._stream.html.append("</details>")

    def heading(self, text: str, level: int = 2) -> str:
        """A heading with an anchor (returned; listed in the contents at levels 2 and 3)."""
        base = anchor_slug(text) or "section"
        anchor, n = base, 0
        while anchor in self._anchors:
            n += 1
            anchor = f"{base}-{n}"
        self._anchors.add(anchor)
        self._stream.html.append(f'<h{level} id="{anchor}">{_inline_html(text)}</h{level}>')
        self._stream.md.append(f"{'#' * level} {text}")
        if level <= 3 and not self._collapsed:
            self._stream.toc.append((level, text, anchor))
        return anchor

    def text(self, text: str) -> None:
        """A paragraph; a blank line in ``text`` starts another (an analysis file's long notes)."""
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", self._resolve(text)) if p.strip()]
        self._stream.html.append(_block_html("\n\n".join(paragraphs)))
        self._stream.md.append("\n\n".join(paragraphs))

    def _write_csv(self, frame: pd.DataFrame, name: str, csv: str | None, index: bool) -> Path:
        path = self.folder.path(csv or f"tables/{name}.csv")
        return store.write_atomic(path, lambda tmp: frame.to_csv(tmp, index=index))

    def _table_html(
        self,
        frame: pd.DataFrame,
        path: Path,
        floatfmt: str,
        index: bool,
        *,
        legend: str = "",
        collapsed: str = "",
    ) -> str:
        # na_rep covers NaN only: a nullable count or flag (Int64, boolean) would print "<NA>".
        nullable = [c for c in frame.columns if isinstance(frame[c].dtype, pd.api.extensions.ExtensionDtype)]
        if nullable:
            frame = frame.copy()
            for c in nullable:
                frame[c] = frame[c].astype(object).where(frame[c].notna(), "")
        body = frame.to_html(
            index=index, border=0, classes="t", na_rep="", float_format=lambda v: format(v, floatfmt), escape=True
        )
        return _TEMPLATES.get_template("table.html.j2").render(
            table=body, csv=path.relative_to(self.out).as_posix(), legend=legend, collapsed=collapsed
        )

    def table(
        self,
        frame: pd.DataFrame,
        name: str,
        *,
        floatfmt: str = ".3g",
        index: bool = False,
        csv: str | None = None,
        collapsed: str | None = None,
        max_md_rows: int = MD_ROWS,
    ) -> Path:
        """Add a table (in a collapsed block titled ``collapsed`` if given) and write it as CSV."""
        frame = _public_frame(frame, self.roots())
        path = self._write_csv(frame, name, csv, index)
        block = self._table_html(frame, path, floatfmt, index, collapsed=_inline_html(collapsed) if collapsed else "")
        self._stream.html.append(block)
        rel = path.relative_to(self.out).as_posix()
        if collapsed or self._collapsed:
            title = f"{collapsed}: " if collapsed else ""
            self._stream.md.append(f"{title}[`{rel}`]({rel}) ({len(frame)} row{'' if len(frame) == 1 else 's'}).")
            return path
        shown = frame if len(frame) <= max_md_rows else frame.head(max_md_rows)
        md = markdown_table(shown, floatfmt, index)
        if len(frame) > max_md_rows:
            more = len(frame) - max_md_rows
            md += f"\n\n({more} more row{'' if more == 1 else 's'} in [`{rel}`]({rel}))"
        self._stream.md.append(md)
        return path

    def linked_table(self, frame: pd.DataFrame, name: str, summary: str) -> Path:
        """A table too long to show on the page: written as CSV like :meth:`table` (numbers to 6
        significant digits) and linked, with its row count, in both ``index.html`` and ``summary.md``."""
        frame = _public_frame(frame, self.roots())
        path = self.folder.path(f"tables/{name}.csv")
        store.write_atomic(path, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6g"))
        rel = path.relative_to(self.out).as_posix()
        self.text(f"{summary}: [`{rel}`]({rel}) ({len(frame)} row{'' if len(frame) == 1 else 's'}).")
        return path

    def _figure_blocks(self, fig: Figure, name: str, caption: str, css_class: str = "") -> tuple[str, str]:
        for fmt in ("png", "svg"):
            self.folder.path(f"figures/{name}.{fmt}")
        make_legible(fig, max_height_px=HEADLINE_HEIGHT_PX if css_class == "headline" else None)
        paths = save_figure(fig, self.out / "figures", name, dpi=self.dpi)
        svg, png = paths["svg"].read_bytes(), paths["png"].read_bytes()
        kind, data = ("svg+xml", svg) if len(svg) <= SVG_RATIO * len(png) else ("png", png)
        caption = self._resolve(caption)
        # Shown at the SVG's own size (1 pt = 4/3 CSS px) whichever file is embedded, so that a PNG's dpi
        # does not change how large its text reads; the headline at most HEADLINE_HEIGHT_PX high.
        w_in, h_in = fig.get_size_inches()
        width = 72 * w_in * CSS_PX_PER_PT
        if css_class == "headline":
            width = min(width, HEADLINE_HEIGHT_PX * w_in / h_in)
        block = _TEMPLATES.get_template("figure.html.j2").render(
            width=round(width),
            css_class=css_class,
            name=name,
            kind=kind,
            encoded=base64.b64encode(data).decode("ascii"),
            caption=_inline_html(caption),
            svg=paths["svg"].relative_to(self.out).as_posix(),
        )
        return block, f"![{name}]({paths['png'].relative_to(self.out).as_posix()})\n\n*{caption}*"

    def figure(self, fig: Figure, name: str, caption: str) -> Path:
        block, md = self._figure_blocks(fig, name, caption)
        self._stream.html.append(block)
        self._stream.md.append(md)
        return self.out / "figures" / f"{name}.png"

    def details(self, summary: str, body: str, file: str | None = None) -> None:
        """Preformatted text in a collapsed block; with ``file`` (a path relative to ``out``), also
        written there, and ``summary.md`` links the file instead of repeating it."""
        self._stream.html.append(
            f"<details><summary>{_inline_html(summary)}</summary><pre>{html.escape(body)}</pre></details>"
        )
        if file is None:
            self._stream.md.append(f"<details><summary>{summary}</summary>\n\n```\n{body}\n```\n\n</details>")
            return
        text = public_text(body, self.roots())
        store.write_atomic(self.folder.path(file), lambda tmp: tmp.write_text(text, encoding="utf-8"))
        self._stream.md.append(f"{summary}: [`{file}`]({file}).")

    # --- rendering ---

    def _contents(self) -> tuple[list[dict], str]:
        """The contents: level-2 entries with their level-3 children (for the page), and in Markdown."""
        entries = [*self._body.toc, (2, APPENDIX_TITLE, APPENDIX_ANCHOR)] if self._appendix.html else self._body.toc
        entries += [e for e in self._appendix.toc if e[0] <= 3 and self._appendix.html]
        tree: list[dict] = []
        for level, text, anchor in entries:
            entry = {"text": _inline_html(text), "anchor": anchor, "children": []}
            if level == 2 or not tree:
                tree.append(entry)
            else:
                tree[-1]["children"].append(entry)
        md = [("  " if level > 2 else "") + f"- [{text}](#{anchor})" for level, text, anchor in entries]
        return tree, ("**Contents**\n\n" + "\n".join(md)) if md else ""

    def write(self) -> Path:
        """Write ``index.html`` and ``summary.md`` atomically; returns the HTML path."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        from headstats import __version__

        footer = f"Generated by headstats {__version__} on {stamp}."
        lead = [self._lead[k] for k in ("abstract", "headline", "table") if k in self._lead]
        contents, md_nav = self._contents()
        page = _TEMPLATES.get_template("page.html.j2").render(
            title=self.title,
            css=(resources.files("headstats.report") / "templates" / "report.css").read_text(encoding="utf-8"),
            subtitle=_inline_html(self._resolve(self.subtitle)) if self.subtitle else "",
            lead=[h for h, _ in lead],
            contents=contents,
            body=self._body.html,
            appendix=self._appendix.html,
            appendix_title=APPENDIX_TITLE,
            appendix_anchor=APPENDIX_ANCHOR,
            footer=footer,
        )
        appendix_md = [f"## {APPENDIX_TITLE}", *self._appendix.md] if self._appendix.html else []
        head = f"# {self.title}\n\n" + (f"{self._resolve(self.subtitle)}\n\n" if self.subtitle else "")
        parts = [*(m for _, m in lead), md_nav, *self._body.md, *appendix_md]
        md = head + "\n\n".join(p for p in parts if p) + f"\n\n---\n{footer}\n"
        index = self.folder.path("index.html")
        roots = self.roots()
        for path, text in ((index, page), (self.folder.path("summary.md"), md)):
            store.write_atomic(path, lambda tmp, text=text: tmp.write_text(public_text(text, roots), encoding="utf-8"))
        self._remove_stale()
        return index

    def _remove_stale(self) -> None:
        """Write this build's manifest, and remove the files the previous build listed in its manifest
        that this one did not write (a section renamed, a table no longer produced). Nothing else in
        ``out`` is touched: files no headstats build wrote stay, with one warning naming them."""
        stale = self.folder.finish({INPUTS_KEY: self.inputs} if self.inputs is not None else None)
        if stale:
            logger.info("removed %d file(s) of the previous build: %s", len(stale), ", ".join(stale))
        foreign = self.folder.foreign(skip=self.elsewhere)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            logger.warning(
                "%s holds %d file(s) that no headstats build listed in %s; they were kept: %s",
                self.out,
                len(foreign),
                MANIFEST_FILE,
                shown,
            )


def read_manifest(out: Path) -> set[str]:
    """The files (relative paths) the previous build in ``out`` wrote, from its manifest; empty when
    there is none or it cannot be read. Entries that would leave ``out`` are ignored."""
    return store.outdir.read_manifest(Path(out))[0]


# --- a report: the list of sections over one results folder ---------------------------------------


def check_report_inputs(spec: ReportSpec, results: Path, context: Context) -> None:
    """Refuse, before anything is written, a ``reference`` model the results do not hold and a
    ``contrast`` folder without score tables (either would leave its sections silently empty)."""
    if spec.reference and spec.reference not in context.models:
        raise ValueError(
            f"--reference {spec.reference!r} is not a model of {str(results)!r} (its models: "
            f"{', '.join(context.models) or 'none'}); give one of them, or leave --reference out to compare every pair"
        )
    if spec.contrast:
        folder = Path(spec.contrast).expanduser()
        if not folder.is_dir() or not store.find_partitions(folder, "scores", provenance=False)[0]:
            raise ValueError(
                f"--contrast {spec.contrast!r} holds no score tables ("
                + ("no such folder" if not folder.exists() else "expected .../model=<slug>/dataset=<name>/*.parquet")
                + "); give the results folder of headstats collect run with the other prompt format"
            )


def models_line(context: Context) -> str:
    """The subtitle's list of models in training order: a checkpoint by its short label (``SFT 40``),
    another model by its slug and what the slug hides (a local folder's path is in the provenance
    appendix, as are checkpoints' full names)."""
    labels, names = context.short_labels, []
    for slug in context.model_order:
        ident = context.models[slug]
        if labels[slug] != slug:
            names.append(labels[slug])
        else:
            hidden = ident != slug and not Path(ident).is_absolute() and "/" not in ident
            names.append(f"`{slug}`" + (f" = {ident}" if hidden else ""))
    relabelled = any(labels[slug] != slug for slug in context.model_order)
    return f"Models{', in training order' if relabelled else ''}: {'; '.join(names)}." + (
        " Checkpoints' full names are in the appendix." if relabelled else ""
    )


def build_report(
    results_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    spec: ReportSpec | None = None,
    sections: Sequence[Section] | None = None,
    planned: pd.DataFrame | None = None,
    analysis: str | os.PathLike | None = None,
    **options: object,
) -> Path:
    """Build the report of everything under ``results_dir`` into ``out``; returns ``out/index.html``.

    The options are :class:`headstats.specs.ReportSpec`'s (``spec``, or its fields by name;
    declared, described and checked there, as for the command line and an analysis file's
    ``[report_options]``). ``sections``: the sections to write, in order
    (default: :data:`headstats.report.sections.SECTIONS`). ``planned``: the sweep points an analysis
    file plans (columns model, task, score, target; :func:`headstats.jobs.analysis.planned_points`),
    so that a report of an unfinished run says what is missing. ``analysis``: the analysis file the
    report is built from; the manifest records its hash and the results' (:mod:`headstats.report.freshness`).
    """
    spec = ReportSpec.from_kwargs(options, base=spec)
    results = Path(results_dir)
    store.check_schema_versions(results)  # mixed schema versions cannot be analysed together
    context = Context(results, spec, planned)
    if not context.partitions:
        raise store.StoreError(
            f"no score or intervention tables under {str(results)!r}: expected "
            ".../model=<slug>/dataset=<name>/*.parquet (headstats collect) or "
            ".../model=<slug>/task=<name>/*.parquet (headstats ablate)"
        )
    check_report_inputs(spec, results, context)
    writer = ReportWriter(
        out, spec.title or f"headstats report: {results.name}", dpi=spec.dpi, subtitle=models_line(context)
    )
    writer.hide(results, out, *(ident for ident in context.models.values() if Path(ident).is_absolute()))
    kinds = [p.kind for p in context.partitions]
    title = f" --title {shlex.quote(spec.title)}" if spec.title else ""
    with writer.appendix():
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
    for section in report_sections.SECTIONS.values() if sections is None else sections:
        section(writer, context)
    writer.inputs = report_inputs(results, spec.settings(), analysis, report=writer.out)
    return writer.write()
