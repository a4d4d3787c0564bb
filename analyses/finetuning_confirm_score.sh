#!/usr/bin/env bash
# Score the design's texts with every finished checkpoint of the given seeds (analyses/finetuning_confirm.toml).
#
#   analyses/finetuning_confirm_score.sh 0 1          # seeds 0 and 1; no argument: seeds 0..11
#   nohup nice -n 19 analyses/finetuning_confirm_score.sh 0 > scores-seed-0.log 2>&1 &
#
# Seed N's checkpoints (its SFT, DPO and GRPO stage ends; seed 0 also the base, the one base every
# chain shares) are collected into $OUT/seed-N/model=<chain>-<stage>-<step>/dataset=<name>/ with the
# [collect] settings of the design file (128 texts per dataset, seed 48, the chat format, its three
# scores), read from that file so that they cannot drift from it. A stage end still training (no
# HEADSTATS_CHECKPOINT.json yet) is skipped and named. Rerun the same command to resume: a
# collection adds only the texts its table lacks and refuses a table of other settings.
#
# OUT (default ~/.cache/headstats/finetuning-confirm-scores) lies outside the repository: the tables
# are committed under results/finetuning-confirm/seed-N/ once every seed's are complete.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
design="$repo/analyses/finetuning_confirm.toml"
python="${PYTHON:-python}"
out="${OUT:-$HOME/.cache/headstats/finetuning-confirm-scores}"
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(0 1 2 3 4 5 6 7 8 9 10 11)

# chains folder, recipe hash, stage ends (stage/step-NNNNN) and the collect options, from the design
mapfile -t design_lines < <(
  "$python" - "$design" <<'EOF'
import sys, tomllib
from pathlib import Path

design = tomllib.loads(Path(sys.argv[1]).read_text())
d, c = design["design"], design["collect"]
print(Path(d["chains"]).expanduser())
print(d["recipe_hash"])
print(" ".join(f"{stage}/step-{int(step):05d}" for stage, step in (e.split("@") for e in d["stage_ends"])))
options = [
    "--dataset", ",".join(c["datasets"]), "--limit", str(c["limit"]), "--sample", c["sample"],
    "--seed", str(c["seed"]), "--scores", ",".join(c["scores"]), "--batch-size", str(c["batch_size"]),
    "--max-length", str(c["max_length"]), "--prompt-format", c["prompt_format"],
]
print(" ".join(options))
EOF
)
chains="${CHAINS:-${design_lines[0]}}"
recipe="${design_lines[1]}"
read -r -a ends <<<"${design_lines[2]}"
read -r -a options <<<"${design_lines[3]}"

export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
for seed in "${seeds[@]}"; do
  chain="$chains/gemma3-270m-$recipe-seed-$seed"
  checkpoints=()
  [ "$seed" = 0 ] && checkpoints+=("$chain/base")
  for end in "${ends[@]}"; do checkpoints+=("$chain/$end"); done
  for checkpoint in "${checkpoints[@]}"; do
    if [ ! -f "$checkpoint/HEADSTATS_CHECKPOINT.json" ]; then
      echo "seed $seed: ${checkpoint#"$chains"/} is not finished; skipped (rerun when it is)"
      continue
    fi
    echo "seed $seed: scoring ${checkpoint#"$chains"/} ($(date -u +%H:%M:%S) UTC)"
    "$python" -m headstats -q collect --model "$checkpoint" "${options[@]}" --out "$out/seed-$seed"
  done
done
echo "done: $out ($(date -u +%H:%M:%S) UTC)"
