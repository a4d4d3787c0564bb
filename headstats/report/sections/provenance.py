"""Last section: the provenance of every table the report used."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd

from headstats.report.sections.context import Context, Writer

# The fields shown in the summary table; the full records follow as JSON.
SUMMARY_KEYS = (
    "partition",
    "kind",
    "model",
    "revision",
    "dtype",
    "device",
    "prompt_format",
    "max_length",
    "calibration",
    "created",
    "schema_version",
    "source",
)
SHOWN_IN_PLACE = 3  # provenance rows shown as a table in place; more are collapsed


def write_provenance(writer: Writer, records: Iterable[dict]) -> None:
    """A summary table of ``records`` and the full records, in the appendix (shared with
    ``headstats paper``)."""
    records = list(records)
    with writer.appendix():
        _write_records(writer, records)


def _write_records(writer: Writer, records: list[dict]) -> None:
    writer.heading("Provenance of the tables used", 3)
    if not records:
        writer.text("No provenance records were found next to the tables.")
        return
    rows = []
    for rec in records:
        row = {k: rec.get(k) for k in SUMMARY_KEYS if k in rec}
        versions = rec.get("versions")
        if isinstance(versions, dict):
            row.update({dist: versions.get(dist) for dist in ("headstats", "torch", "transformers")})
        rows.append(row)
    # One row per table: long and wide, so it is collapsed (summary.md links its CSV) unless it is a
    # few rows, which read better in place.
    frame = pd.DataFrame(rows).astype(object)
    many = len(frame) > SHOWN_IN_PLACE
    writer.table(
        frame,
        "provenance",
        collapsed=f"every table's model, revision, dtype, device and versions ({len(frame)})" if many else None,
    )
    writer.details(
        "full provenance records (JSON)",
        json.dumps(records, indent=2, sort_keys=True, default=str),
        file="tables/provenance.json",
    )


def provenance(writer: Writer, context: Context) -> None:
    records = []
    for p in context.partitions:
        rec = dict(p.provenance or {"note": "no provenance record found"})
        rec["partition"] = p.path.relative_to(context.results).as_posix()
        rec.setdefault("kind", p.kind)
        records.append(rec)
    write_provenance(writer, records)
