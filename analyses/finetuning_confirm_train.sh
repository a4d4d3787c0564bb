#!/usr/bin/env bash
# Train the chains of analyses/finetuning_confirm.toml: its 12 seeds one after another, each
# `headstats finetune` with the design's recipe, by one pinned version of the code.
#
#   nohup nice -n 19 env OMP_NUM_THREADS=1 analyses/finetuning_confirm_train.sh > /dev/null 2>&1 &
#
# Resumable: run it again after an interruption. A seed whose chain finished is skipped (its
# seed-N.done marker); an unfinished one resumes where `headstats finetune` left it (finished
# checkpoints are kept, a stage resumes from its last saved trainer state). Each seed has its own lock:
# a second copy started while one runs trains the seeds nobody is training (two copies, two cores:
# half the wall time), and skips the one the first copy holds.
#
# Everything lives under ROOT (default /root/.cache/headstats/finetuning-confirm), outside every git
# worktree, so that it outlives them:
#   ROOT/code/            a clone of this repository at the commit that trains every seed, made by the
#                         first run (its commit in ROOT/code.commit): later runs train with it, whatever
#                         the checkout they are started from holds
#   ROOT/chains/          the chains: gemma3-270m-<recipe hash>-seed-N/ (headstats.jobs.finetune.layout)
#   ROOT/logs/train.log   one line per seed started, finished or skipped, with times
#   ROOT/logs/seed-N.log  the seed's `headstats finetune` output (a line per training step)
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${FINETUNING_CONFIRM_ROOT:-/root/.cache/headstats/finetuning-confirm}
PYTHON=${PYTHON:-/work/main/.venv/bin/python}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7 8 9 10 11"}
CODE=$ROOT/code
LOGS=$ROOT/logs
mkdir -p "$ROOT/chains" "$LOGS"

exec 9>"$ROOT/clone.lock"
flock 9  # one copy at a time makes or checks the pinned clone
if [ ! -f "$ROOT/code.commit" ]; then
  git -C "$HERE" rev-parse HEAD > "$ROOT/code.commit.tmp"
  rm -rf "$CODE"
  git clone -q "$HERE" "$CODE"
  git -C "$CODE" checkout -q --detach "$(cat "$ROOT/code.commit.tmp")"
  mv "$ROOT/code.commit.tmp" "$ROOT/code.commit"
fi
COMMIT=$(cat "$ROOT/code.commit")
if [ "$(git -C "$CODE" rev-parse HEAD)" != "$COMMIT" ] || [ -n "$(git -C "$CODE" status --porcelain --untracked-files=no)" ]; then
  echo "$(date -u +%FT%TZ) $CODE is not the pinned commit $COMMIT unchanged: restore it (git -C $CODE checkout --detach $COMMIT)" >> "$LOGS/train.log"
  exit 1
fi
flock -u 9

export PYTHONPATH=$CODE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for SEED in $SEEDS; do
  if [ -f "$LOGS/seed-$SEED.done" ]; then
    echo "$(date -u +%FT%TZ) seed $SEED: finished before, skipped" >> "$LOGS/train.log"
    continue
  fi
  exec 8>"$ROOT/seed-$SEED.lock"
  if ! flock -n 8; then
    echo "$(date -u +%FT%TZ) seed $SEED: another copy is training it, skipped" >> "$LOGS/train.log"
    continue
  fi
  if [ -f "$LOGS/seed-$SEED.done" ]; then  # finished while this copy waited
    flock -u 8
    continue
  fi
  echo "$(date -u +%FT%TZ) seed $SEED: training (code $COMMIT, threads ${OMP_NUM_THREADS:-unset})" >> "$LOGS/train.log"
  start=$(date +%s)
  if (cd "$CODE" && "$PYTHON" -m headstats finetune --base gemma3-270m \
      --recipe analyses/finetuning_confirm_recipe.json --seed "$SEED" --out "$ROOT/chains") >> "$LOGS/seed-$SEED.log" 2>&1; then
    touch "$LOGS/seed-$SEED.done"
    echo "$(date -u +%FT%TZ) seed $SEED: finished in $(( ($(date +%s) - start) / 60 )) min" >> "$LOGS/train.log"
  else
    echo "$(date -u +%FT%TZ) seed $SEED: failed after $(( ($(date +%s) - start) / 60 )) min (see seed-$SEED.log); stopping" >> "$LOGS/train.log"
    exit 1
  fi
  flock -u 8
done
left=$(for S in $SEEDS; do [ -f "$LOGS/seed-$S.done" ] || echo "$S"; done | tr '\n' ' ')
if [ -z "$left" ]; then
  echo "$(date -u +%FT%TZ) every seed finished" >> "$LOGS/train.log"
else
  echo "$(date -u +%FT%TZ) this copy is done; seeds still training in another copy: $left" >> "$LOGS/train.log"
fi
