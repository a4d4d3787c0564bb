#!/bin/bash
# The GPU checks of issue 13 as one prepared script, for the device machine (one H200; no registry).
#
#   here:   python benchmarks/device_bundle.py            # writes .devcache/ (data, tokenizer, wheels)
#   device: run(command="bash benchmarks/device.sh", carry=[".devcache"], timeout_s=600)
#
# Random-weight bf16 models of real configurations (Llama-3.2-1B, Llama-3.1-8B) built on the GPU, real
# MMLU 5-shot prompts tokenised by SmolLM2's tokenizer. Each step has its own time limit, so one that
# fails or runs long leaves the others' results; every log lands in $OUT. Test it here first with
# DEVICE=cpu DTYPE=float32 MODEL_SMALL=config:smollm2-135m MODEL_LARGE=config:smollm2-135m \
#   SEQLEN_CONFIG=smollm2-135m QUICK=1 bash benchmarks/device.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headstats-device}
mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}
SMALL=${MODEL_SMALL:-config:llama-3.2-1b}
LARGE=${MODEL_LARGE:-config:llama-3.1-8b}
SEQLEN_CONFIG=${SEQLEN_CONFIG:-llama-3.1-8b}
QUICK=${QUICK:-0}
DTYPE=${DTYPE:-bfloat16}
export HEADSTATS_CACHE=$PWD/.devcache/cache PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ -d .devcache/wheels ] && [ "$DEVICE" != cpu ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .devcache/wheels/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
else
    export PYTHONPATH=$PWD
fi

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $OUT/NAME.txt, go on either way
    local name=$1 limit=$2
    shift 2
    echo "== $name ($(date -u +%T), limit ${limit}s): $*" | tee "$OUT/$name.txt"
    timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$name.txt"
    echo "== $name: exit ${PIPESTATUS[0]}" | tee -a "$OUT/$name.txt"
}

if [ "$QUICK" = 1 ]; then subjects=1; per=3; questions=4; repeats=1; lengths=256,512; else
    subjects=4; per=8; questions=32; repeats=3; lengths=1024,2048,4096,8192,16384; fi

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi";
  python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__,
  'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"; } 2>&1 | tee "$OUT/machine.txt"

# 1. Prefix reuse vs whole prompts (collection, plain SDPA forward, baseline), FLOPs and roof fraction.
step prefix-1b 110 python3 benchmarks/bench_prefix.py --model "$SMALL" --device "$DEVICE" --dtype "$DTYPE" \
    --subjects "$subjects" --per-subject "$per" --batch-size 16 --repeats "$repeats"
step prefix-8b 150 python3 benchmarks/bench_prefix.py --model "$LARGE" --device "$DEVICE" --dtype "$DTYPE" \
    --subjects "$subjects" --per-subject "$per" --batch-size 8 --repeats "$repeats"
# 2. Cost of dynamic zeroing against the plain forward, and one pass per question vs per choice.
step intervene-8b 110 python3 benchmarks/bench_intervene.py --model "$LARGE" --device "$DEVICE" --dtype "$DTYPE" \
    --questions "$questions" --batch-size 8 --repeats "$repeats"
# 3. bf16 body vs fp32: speed and agreement (scores, log-likelihoods, predictions).
step bf16-1b 80 python3 benchmarks/bench_prefix.py --bf16 --model "$SMALL" --device "$DEVICE" \
    --subjects "$subjects" --per-subject "$per" --batch-size 16 --repeats "$repeats"
# 4. Time and memory of all scores against sequence length (4 of the 8B's layers: the peak is per layer).
step seqlen-8b 100 python3 benchmarks/bench_seqlen.py --config "$SEQLEN_CONFIG" --device "$DEVICE" \
    --dtype "$DTYPE" --layers 4 --lengths "$lengths" --repeats 1
echo "done $(date -u +%T)" | tee -a "$OUT/machine.txt"
