#!/usr/bin/env bash
# Score the design's texts with every finished checkpoint of the given seeds (analyses/finetuning_confirm.toml):
# the file's collect stage, `headstats run analyses/finetuning_confirm.toml --stages collect`.
#
#   analyses/finetuning_confirm_score.sh 0 1          # seeds 0 and 1; no argument: every seed of the design
#   nohup nice -n 19 analyses/finetuning_confirm_score.sh 0 > scores-seed-0.log 2>&1 &
#
# Seed N's finished checkpoints (its stage ends; the first seed also the base every chain shares) are
# collected into $OUT/seed-N/model=<chain>-<stage>-<step>/dataset=<name>/ with the design's [collect]
# settings; a stage end still training is named and skipped. Rerun the same command to resume.
# OUT (default ~/.cache/headstats/finetuning-confirm-scores) lies outside the repository: the tables
# are committed under results/finetuning-confirm/seed-N/ once every seed's are complete.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
seeds="$(IFS=,; echo "$*")"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "${PYTHON:-python}" -m headstats run "$repo/analyses/finetuning_confirm.toml" --stages collect \
  --results "${OUT:-$HOME/.cache/headstats/finetuning-confirm-scores}" ${seeds:+--seeds "$seeds"}
