"""How ``headstats summary`` prints the per-point and per-curve summaries
(:mod:`headstats.stats.summary`): an aligned table of the main columns for reading, grouped by
model and task, at most :data:`WIDTH` characters a line; or every column as CSV or JSON for scripts."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence

import pandas as pd

WIDTH = 120  # a terminal, a pull-request comment, a log line: none scrolls sideways


def _num(value: object, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value):.{digits}f}"


def _interval(value: object, low: object, high: object) -> str:
    return "-" if _num(value) == "-" else f"{_num(value)} [{_num(low)}, {_num(high)}]"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def _within(row: pd.Series) -> str:
    """The first-drop reading: a lower bound (>=) when the curve never dropped, * when it recovered."""
    value = row.get("within_1pt")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "none zeroed" if bool(row.get("zeroes_none", False)) else "-"
    text = (">=" if bool(row.get("censored", False)) else "") + _num(value)
    return text + ("*" if bool(row.get("non_monotone", False)) else "")


def _certified(value: object, is_open: object) -> str:
    text = _num(value)
    return text if text == "-" else (">=" if bool(is_open) else "") + text


# (header, width, cell) for each column; the widths add up, with two spaces between columns, to
# at most WIDTH (tested).
Column = tuple[str, int, Callable[[pd.Series], str]]

POINT_COLUMNS: tuple[Column, ...] = (
    ("score", 14, lambda r: _cut("baseline" if pd.isna(r["score"]) else str(r["score"]), 14)),
    ("target", 6, lambda r: _num(r["target"], 2)),
    ("zeroed%", 7, lambda r: _num(r["realised_pct"])),
    ("accuracy [95% CI]", 19, lambda r: _interval(r["accuracy"], r["acc_low"], r["acc_high"])),
    ("diff [95% CI]", 21, lambda r: _interval(r["diff"], r["diff_low"], r["diff_high"])),
    ("drop<=", 6, lambda r: _num(r["drop_upper"])),
    ("cert", 4, lambda r: "yes" if bool(r["certified"]) else "no"),
    ("McNemar p", 9, lambda r: _num(r["mcnemar_p"], 3)),
    ("Holm p", 6, lambda r: _num(r["mcnemar_p_holm"], 3)),
)
CURVE_COLUMNS: tuple[Column, ...] = (
    ("score", 14, lambda r: _cut(str(r["score"]), 14)),
    ("points", 6, lambda r: str(int(r["n_points"]))),
    ("max zeroed%", 11, lambda r: _num(r["max_realised_pct"])),
    ("within 1pt", 11, _within),
    ("certified", 9, lambda r: _certified(r["within_1pt_certified"], r["certified_open"])),
    ("cert (fw)", 9, lambda r: _certified(r["within_1pt_certified_fw"], r["certified_fw_open"])),
    ("grid AUC", 8, lambda r: _num(r["grid_auc"])),
    ("norm AUC", 8, lambda r: _num(r["norm_auc"])),
    ("mdd80", 6, lambda r: _num(r["mdd_80"])),
)


def _rows(frame: pd.DataFrame, columns: Sequence[Column]) -> list[str]:
    widths = [width for _, width, _ in columns]

    def line(cells: Sequence[str]) -> str:
        padded = [cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(padded).rstrip()

    out = [line([header for header, _, _ in columns])]
    out += [line([cell(row) for _, _, cell in columns]) for _, row in frame.iterrows()]
    return out


def _groups(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    keys = [k for k in ("model", "task") if k in frame.columns]
    if not keys or frame.empty:
        return [("", frame)]
    return [
        (" / ".join(map(str, key if isinstance(key, tuple) else (key,))), group)
        for key, group in frame.groupby(keys, sort=True, dropna=False)
    ]


def summary_table(points: pd.DataFrame, curves: pd.DataFrame, *, metric: str, table: str = "both") -> str:
    """The aligned text ``headstats summary`` prints by default (at most :data:`WIDTH` characters a line)."""
    out: list[str] = []
    if table in ("both", "points"):
        out.append(
            f"per point ({metric}): accuracy and its paired difference from the baseline in points, "
            "zeroed in % of heads;"
        )
        out.append("  drop<= = one-sided 95% bound of the drop; cert = drop<= <= 1 point")
        for name, group in _groups(points):
            clusters = group["cluster"].iloc[0] if "cluster" in group and len(group) else "question"
            n = int(group["n_questions"].max()) if len(group) else 0
            out += ["", _cut(f"{name}: {n} questions, resampled by {clusters}", WIDTH), *_rows(group, POINT_COLUMNS)]
    if table in ("both", "curves") and len(curves):
        if out:
            out.append("")
        out.append(
            "per curve: within 1pt = % of heads zeroed at the first drop to baseline - 1 (>= never dropped, "
            "* recovered);"
        )
        out.append("  certified = largest % with every point certified (fw: Bonferroni over the curves); AUC in points")
        for name, group in _groups(curves):
            out += ["", _cut(name, WIDTH), *_rows(group, CURVE_COLUMNS)]
    return "\n".join(out)


def _records(frame: pd.DataFrame) -> list[dict]:
    return json.loads(frame.to_json(orient="records", double_precision=15))


def format_summary(
    points: pd.DataFrame, curves: pd.DataFrame, *, metric: str, fmt: str = "table", table: str = "both"
) -> str:
    """``headstats summary``'s output in ``fmt`` (table, csv or json) for ``table`` (points, curves, both)."""
    if fmt == "table":
        return summary_table(points, curves, metric=metric, table=table)
    if fmt == "csv":
        if table == "both":
            raise ValueError("csv holds one table: give table='points' or table='curves'")
        return (points if table == "points" else curves).to_csv(index=False).rstrip("\n")
    if fmt == "json":
        payload = {"metric": metric}
        if table in ("both", "points"):
            payload["points"] = _records(points)
        if table in ("both", "curves"):
            payload["curves"] = _records(curves)
        return json.dumps(payload, indent=1)
    raise ValueError(f"unknown summary format {fmt!r}: choose table, csv or json")
