"""``headstats inactive RESULTS``: which heads a score calls inactive in a results folder's score tables,
and on what share of the texts (:func:`headstats.stats.inactive.inactive_heads`); the flags are
:class:`headstats.specs.InactiveSpec`'s."""

from __future__ import annotations

import argparse
import json

from headstats.cli.options import examples, spec_command, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import InactiveSpec

DEFAULT_SHARE = 0.1


def add(sub: Subparsers) -> None:
    spec_command(
        sub,
        "inactive",
        run,
        InactiveSpec,
        help="which heads a score calls inactive in score tables, on what share of the texts (no model is loaded)",
        description=(
            "Read the score tables under RESULTS (headstats collect writes them) and list, per model and dataset, "
            "the heads the score calls inactive: on what share of the texts its value crosses the threshold, with "
            "a 95% interval over texts (by cluster where the texts have clusters: MMLU subjects, source "
            "documents). The threshold is --share's quantile, calibrated as a zeroing sweep calibrates it, or "
            "--threshold."
        ),
        epilog=examples(
            "headstats inactive results/demo --score ahon_ln --share 0.1",
            "headstats inactive results/demo --dataset wikipedia --threshold 0.5 --format csv > heads.csv",
        ),
    )


def _read(spec: InactiveSpec):
    import pyarrow.dataset as ds

    from headstats.io import store

    condition = None
    for column, wanted in (("model", spec.names), ("dataset", spec.datasets)):
        if wanted:
            term = ds.field(column).isin(list(wanted))
            condition = term if condition is None else condition & term
    table = store.read_scores(str(spec.results), filter=condition)
    if table.empty:
        have = store.read_scores(str(spec.results), columns=["model", "dataset"])
        found = sorted({f"{m}/{d}" for m, d in zip(have["model"], have["dataset"], strict=True)})
        raise ValueError(
            f"no score rows under {spec.results} for --model {','.join(spec.names or ['*'])} --dataset "
            f"{','.join(spec.datasets or ['*'])}; the folder holds: {', '.join(found) or 'no score tables'}"
        )
    return table


def _text(heads, top: int) -> str:
    from headstats.engine.scores import get_score

    out = []
    for (model, dataset), group in heads.groupby(["model", "dataset"], sort=True, observed=True):
        first = group.iloc[0]
        sign = ">" if get_score(first["score"]).inactive_when == "above" else "<"
        clusters = "" if first["cluster"] == "text" else f", {first['n_clusters']} clusters by {first['cluster']}"
        out += [
            f"{model} / {dataset}: {first['n_texts']} texts{clusters}; inactive when {first['score']} {sign} "
            f"{first['threshold']:.4g}",
            f"{'layer':>5}  {'head':>4}  {'inactive on (95% CI)':>26}  {'texts':>9}  {'mean ' + first['score']:>14}",
        ]
        shown = group if top == 0 else group.head(top)
        for _, row in shown.iterrows():
            share = f"{row['inactive_share']:.0%} [{row['low']:.0%}, {row['high']:.0%}]"
            count = f"{row['n_inactive']}/{row['n_texts']}"
            out.append(f"{row['layer']:>5}  {row['head']:>4}  {share:>26}  {count:>9}  {row['mean_score']:>14.4g}")
        if len(shown) < len(group):
            out.append(f"  ... {len(group) - len(shown)} heads more (--top 0 lists all)")
        out.append("")
    return "\n".join(out).rstrip()


def run(args: argparse.Namespace) -> int:
    from headstats.stats.inactive import inactive_heads

    spec = spec_from_args(args, InactiveSpec)
    share = DEFAULT_SHARE if spec.share is None and spec.tau is None else spec.share
    heads = inactive_heads(_read(spec), spec.score, share=share, threshold=spec.tau)
    if spec.format == "csv":
        print(heads.to_csv(index=False).rstrip("\n"), flush=True)
    elif spec.format == "json":
        print(json.dumps(json.loads(heads.to_json(orient="records", double_precision=15)), indent=1), flush=True)
    else:
        print(_text(heads, spec.top), flush=True)
    return 0


register_command(Command("inactive", add, position=120))
