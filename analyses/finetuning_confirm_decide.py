"""The pre-registered decision of analyses/finetuning_confirm.toml, from the seeds' score tables.

    python analyses/finetuning_confirm_decide.py SCORES OUT [--chains CHAINS]

SCORES holds one folder per seed, ``seed-N/`` (analyses/finetuning_confirm_score.sh writes them);
each checkpoint's stage and seed are read from its tables' provenance. Learning comes from each
seed's chain ``metrics.json`` under CHAINS (default: the design's ``chains``). OUT receives
``distances.csv`` (every base -> stage and seed -> seed W1/IQR), ``learning.csv`` (the primary
metric's change per seed and stage, with ``kept`` and its reason), ``verdicts.csv`` (per stage,
dataset and score) and ``sentences.csv`` (per stage end). The rule is headstats.stats.seeds.decide
with the design's margin, alpha and min_seeds.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

import pandas as pd

from headstats.io import store
from headstats.stats import seeds

DESIGN = Path(__file__).resolve().parent / "finetuning_confirm.toml"


def checkpoints_of(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(score rows of every seed folder under ``root``, one row per model: stage and seed); the
    base is the one whose tables record stage ``base``."""
    frames, rows = [], []
    for folder in sorted(root.glob("seed-*")):
        partitions, _ = store.find_partitions(folder, "scores")
        for p in partitions:
            info = (p.provenance or {}).get("checkpoint") or {}
            if not info.get("stage") or info.get("seed") is None:
                raise ValueError(f"{p.path}: its provenance records no checkpoint stage and seed; not a chain's table")
            rows.append((p.model, info["stage"], int(info["seed"])))
        frames.append(store.read_scores(folder))
    checkpoints = pd.DataFrame(sorted(set(rows)), columns=["model", "stage", "seed"])
    return pd.concat(frames, ignore_index=True), checkpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scores", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--chains", type=Path, default=None)
    args = parser.parse_args()
    design = tomllib.loads(DESIGN.read_text())
    d, c = design["design"], design["collect"]
    chains = (args.chains or Path(d["chains"])).expanduser()

    scores, checkpoints = checkpoints_of(args.scores)
    stages = [end.split("@")[0] for end in d["stage_ends"]]
    distances = seeds.seed_distances(scores, checkpoints, c["scores"])
    metrics = {}
    for seed in sorted(set(checkpoints.loc[checkpoints["stage"] != seeds.BASE, "seed"])):
        path = chains / f"gemma3-270m-{d['recipe_hash']}-seed-{seed}" / "metrics.json"
        metrics[seed] = json.loads(path.read_text()) if path.is_file() else {}
    learning = seeds.learning_by_seed(metrics)
    kept, verdicts, sentences = seeds.decide(
        distances,
        learning,
        margin=d["margin"],
        alpha=d["alpha"],
        min_seeds=d["min_seeds"],
        stages=stages,
        family=d["family"],
    )
    args.out.mkdir(parents=True, exist_ok=True)
    distances.to_csv(args.out / "distances.csv", index=False)
    learning.merge(kept, on=["seed", "stage"], how="outer").to_csv(args.out / "learning.csv", index=False)
    verdicts.to_csv(args.out / "verdicts.csv", index=False)
    sentences.to_csv(args.out / "sentences.csv", index=False)
    print(sentences.to_string(index=False))
    print(verdicts[["stage", "dataset", "score", "n_seeds", "from_base", "between_seeds", "verdict"]].to_string())


if __name__ == "__main__":
    main()
