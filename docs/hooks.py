"""MkDocs hooks of the headstats documentation.

- The CLI reference is generated at build time: the marker ``<!-- headstats:cli-reference -->`` in a
  page becomes one section per command, rendered from the argparse parser that
  :mod:`headstats.cli.options` derives from the option declarations (:mod:`headstats.specs`), so the
  page lists exactly the flags, allowed names and defaults the command line accepts.
- Docstrings cross-reference in Sphinx roles (``:func:`name```); the API reference shows the name alone.
- The committed reports (``reports/``) are published with the site under ``reports/``, so that the
  findings pages link to them. A report links its terms to the glossary as the checkout lays it out
  (``../../docs/statistics.md#certified``, which works when the report is opened from the repository);
  the published copies point at the site's page instead (``../../statistics/#certified``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

MARKER = "<!-- headstats:cli-reference -->"
ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
GLOSSARY_IN_CHECKOUT = re.compile(r'href="((?:\.\./)+)docs/statistics\.md#')
SPHINX_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj):(<code>)~?")


def _cell(text: str) -> str:
    """``text`` in one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _help(action: argparse.Action) -> str:
    return (action.help or "").replace("%%", "%")


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    value = ""
    if action.nargs != 0:
        value = " " + str(action.metavar or action.dest.upper())
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _table(actions: list[argparse.Action]) -> list[str]:
    rows = ["| option | meaning |", "|---|---|"]
    for action in actions:
        required = " (required)" if getattr(action, "required", False) and action.option_strings else ""
        rows.append(f"| {_invocation(action)} | {_cell(_help(action))}{required} |")
    return rows


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Every subcommand of ``parser``: name -> (its parser, its one-line help)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


def _groups(parser: argparse.ArgumentParser) -> list[tuple[str, list[argparse.Action]]]:
    """The parser's argument groups in order, each with its documented actions (``--help`` left out)."""
    groups = []
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        ]
        if actions:
            groups.append((group.title or "options", actions))
    return groups


def command_section(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    """The Markdown section of one command: summary, usage, description, examples, options by group."""
    lines = [f"## `headstats {name}` {{#{name}}}", "", summary[:1].upper() + summary[1:] + ".", ""]
    if parser.add_help:
        lines += ["```text", parser.format_usage().strip(), "```", ""]
    if parser.description:
        lines += [parser.description, ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip(), "```", ""]
    for title, actions in _groups(parser):
        lines += [f"**{title[:1].upper() + title[1:]}**", "", *_table(actions), ""]
    return lines


def cli_reference() -> str:
    """The reference of every ``headstats`` command, from the parser the option declarations build."""
    from headstats.cli import build_parser

    parser = build_parser()
    lines = [
        "Options every command takes:",
        "",
        *_table([a for _, actions in _groups(parser) for a in actions]),
        "",
    ]
    for name, (sub, summary) in subcommands(parser).items():
        lines += command_section(name, sub, summary)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown


def on_page_content(html: str, page, config, files) -> str:
    return SPHINX_ROLE.sub(r"\1", html)


def on_files(files, config):
    """Publish the committed reports (every file but their Markdown twins, which are not site pages)."""
    from mkdocs.structure.files import File

    for path in sorted(REPORTS.rglob("*")):
        if path.is_file() and path.suffix != ".md":
            uri = path.relative_to(ROOT).as_posix()
            files.append(File(uri, src_dir=str(ROOT), dest_dir=config["site_dir"], use_directory_urls=False))
    return files


def on_post_build(config) -> None:
    """Point the published reports' glossary links at the site's statistics page."""
    site = Path(config["site_dir"]) / "reports"
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        published = GLOSSARY_IN_CHECKOUT.sub(r'href="\1statistics/#', text)
        if published != text:
            page.write_text(published, encoding="utf-8")
