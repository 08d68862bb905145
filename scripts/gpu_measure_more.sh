#!/usr/bin/env bash
# The GPU measurements added after gpu_measure.sh (tune, inference, the TensorFlow engine, the inductor
# check), for a second call of the device tool:   scripts/gpu_measure_more.sh OUT_DIR
# Same rules as gpu_measure.sh: gpulab from src/ on the machine's own python3, .whl/ to a private target,
# one log per step in OUT_DIR, a failed step reported and the next one run.
set -uo pipefail
out=${1:?usage: scripts/gpu_measure_more.sh OUT_DIR}
STEP_TAIL=14
source "$(dirname "$0")/gpu_lib.sh"  # $work, PYTHONPATH, step

# Does the inductor scheduler bug that gpulab works around on the CPU also hit Triton (GPU) code?
step inductor-repro 90 python3 benchmarks/inductor_maxpool_repro.py --device cuda
# issue 15's done-when on a GPU: tune chargpt at GPT-2-small size.
step tune-chargpt 260 python3 -m gpulab tune chargpt --device cuda --budget 240 --out "$work/tune" \
    --set options.n_layer=12 --set options.n_embd=768 --set options.block_size=1024
step bench-inference 120 python3 -m gpulab bench inference --quick --device cuda --out "$work/inference"
step tf-digits 100 python3 -m gpulab tune digits --engine tensorflow --device cuda --budget 80 --out "$work/tftune"
cp "$work/tune/tune.json" "$out/tune-chargpt.json" 2>/dev/null
cp "$work/inference/results.json" "$out/inference-results.json" 2>/dev/null
echo "logs in $out; everything else in $work"
