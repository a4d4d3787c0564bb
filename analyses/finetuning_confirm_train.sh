#!/usr/bin/env bash
# Train and score the chains of a seed study's design file (DESIGN, default analyses/finetuning_confirm.toml):
# its seeds one after another, each `headstats finetune` with the design's recipe, then the seed's stage
# ends (and, with the first seed, the base) scored on the design's texts, all by one pinned version of
# the code.
#
#   nohup nice -n 19 env OMP_NUM_THREADS=1 analyses/finetuning_confirm_train.sh > /dev/null 2>&1 &
#   nohup nice -n 19 env OMP_NUM_THREADS=1 DESIGN=analyses/finetuning_confirm2.toml analyses/finetuning_confirm_train.sh > /dev/null 2>&1 &
#
# Resumable: run it again after an interruption. A seed whose chain finished is not trained again (its
# seed-N.done marker); an unfinished one resumes where `headstats finetune` left it (finished
# checkpoints are kept, a stage resumes from its last saved trainer state). A seed whose tables are
# complete in RESULTS (its seed-N/.complete marker, which is committed with them) is skipped whole, so
# a fresh machine goes on from the seeds the repository lacks. Each seed has its own lock: a second
# copy started while one runs takes the seeds nobody holds (two copies, two cores: half the wall time).
#
# The code that trains and scores every seed is the commit in the design's .commit file (DESIGN with
# .commit for .toml; a clone of this repository checked out there; each checkpoint's provenance records
# it). The seeds, the recipe, the chains' folder (ROOT/chains) and RESULTS come from the design file.
# Its outputs:
#   RESULTS/seed-N/        (the design's results folder) the seed's score tables, its chain's
#                          metrics.json and recipe.json (_chain/), the training log (_chain/train.log)
#                          and the machine it ran on (_chain/machine.txt); commit them
#   ROOT/code/             the pinned clone
#   ROOT/chains/           the chains: <base>-<recipe hash>-seed-N/ (headstats.jobs.finetune.layout)
#   ROOT/logs/train.log    one line per seed started, finished or skipped, with times and the CPU
#   ROOT/logs/seed-N.log   the seed's `headstats finetune` output (a line per training step)
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$HERE/.venv/bin/python}
DESIGN=${DESIGN:-analyses/finetuning_confirm.toml}
# The design's seeds, chains' folder, recipe file and results folder, as the current checkout reads them.
read -r DESIGN_SEEDS CHAINS RECIPE DESIGN_RESULTS < <(cd "$HERE" && "$PYTHON" -c '
import sys
from headstats.jobs.finetune.study import load_seed_study
s = load_seed_study(sys.argv[1])
print(",".join(map(str, s.design.seeds)), s.chains, s.design.recipe_file or "analyses/finetuning_confirm_recipe.json", s.results)
' "$DESIGN")
ROOT=$(dirname "$CHAINS")
SEEDS=${SEEDS:-${DESIGN_SEEDS//,/ }}
RESULTS=${RESULTS:-$HERE/$DESIGN_RESULTS}
CODE=$ROOT/code
LOGS=$ROOT/logs
COMMIT=$(cat "$HERE/${DESIGN%.toml}.commit")
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
mkdir -p "$CHAINS" "$LOGS" "$RESULTS"

exec 9>"$ROOT/clone.lock"
flock 9  # one copy at a time makes or checks the pinned clone
if [ ! -d "$CODE/.git" ]; then
  rm -rf "$CODE"
  git clone -q "$HERE" "$CODE"
  git -C "$CODE" checkout -q --detach "$COMMIT"
fi
if [ "$(git -C "$CODE" rev-parse HEAD)" != "$COMMIT" ] || [ -n "$(git -C "$CODE" status --porcelain --untracked-files=no)" ]; then
  echo "$(date -u +%FT%TZ) $CODE is not the pinned commit $COMMIT unchanged: restore it (git -C $CODE checkout --detach $COMMIT)" >> "$LOGS/train.log"
  exit 1
fi
flock -u 9

say() { echo "$(date -u +%FT%TZ) seed $SEED: $*" >> "$LOGS/train.log"; }
export PYTHONPATH=$CODE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for SEED in $SEEDS; do
  if [ -f "$RESULTS/seed-$SEED/.complete" ]; then
    say "its tables are complete in $RESULTS, skipped"
    continue
  fi
  exec 8>"$ROOT/seed-$SEED.lock"
  if ! flock -n 8; then
    say "another copy holds it, skipped"
    continue
  fi
  if [ -f "$RESULTS/seed-$SEED/.complete" ]; then  # finished while this copy waited
    flock -u 8
    continue
  fi
  if [ ! -f "$LOGS/seed-$SEED.done" ]; then
    say "training (code $COMMIT, threads ${OMP_NUM_THREADS:-unset}, $CPU)"
    start=$(date +%s)
    if (cd "$CODE" && "$PYTHON" -m headstats finetune --base gemma3-270m \
        --recipe "$RECIPE" --seed "$SEED" --out "$CHAINS") >> "$LOGS/seed-$SEED.log" 2>&1; then
      touch "$LOGS/seed-$SEED.done"
      say "trained in $(( ($(date +%s) - start) / 60 )) min"
    else
      say "training failed after $(( ($(date +%s) - start) / 60 )) min (see seed-$SEED.log); stopping"
      exit 1
    fi
  fi
  say "scoring"
  start=$(date +%s)
  if (cd "$CODE" && "$PYTHON" -m headstats -q run "$DESIGN" --stages collect \
      --seeds "$SEED" --results "$RESULTS") >> "$LOGS/seed-$SEED.log" 2>&1; then
    mkdir -p "$RESULTS/seed-$SEED/_chain"
    # the committed log names no local folder: the cache and the checkout as variables
    sed -e "s|$HOME/.cache/headstats|\$HEADSTATS_CACHE|g" -e "s|$HERE|\$REPO|g" "$LOGS/seed-$SEED.log" \
      > "$RESULTS/seed-$SEED/_chain/train.log"
    printf 'cpu: %s\ncores: %s\nthreads: %s\ncode: %s\n' "$CPU" "$(nproc)" "${OMP_NUM_THREADS:-unset}" "$COMMIT" \
      > "$RESULTS/seed-$SEED/_chain/machine.txt"
    touch "$RESULTS/seed-$SEED/.complete"
    say "scored in $(( ($(date +%s) - start) / 60 )) min; its tables are complete"
  else
    say "scoring failed after $(( ($(date +%s) - start) / 60 )) min (see seed-$SEED.log); stopping"
    exit 1
  fi
  flock -u 8
done
left=$(for S in $SEEDS; do [ -f "$RESULTS/seed-$S/.complete" ] || echo "$S"; done | tr '\n' ' ')
SEED=all
if [ -z "$left" ]; then
  say "every seed's tables are complete"
else
  say "this copy is done; seeds another copy holds: $left"
fi
