#!/usr/bin/env bash
# The GPU measurements beyond gpu_measure.sh (the cuda-graph GPU tests, the transformer rows measured
# already, tune, inference, the TensorFlow engine, the inductor check, the mlp's hand-written peer, every
# transformer variant), for further calls of the device tool:
#   scripts/gpu_measure_more.sh OUT_DIR [STEP...]
# All the steps' limits add up to more than one call's 10 minutes: name the steps a call runs (STEP names
# run only those). Same rules as gpu_measure.sh: gpulab from src/ on the machine's own python3, .whl/ to a
# private target, one log per step in OUT_DIR, a failed step reported and the next one run.
set -uo pipefail
out=${1:?usage: scripts/gpu_measure_more.sh OUT_DIR [STEP...]}
shift
only="$*"  # gpu_lib.sh's step runs only these, when given
STEP_TAIL=14
source "$(dirname "$0")/gpu_lib.sh"  # $work, PYTHONPATH, step

# The whole-step graph's GPU tests (7 passed on an H100 on 2026-11-26 and 2026-11-27).
step cuda-graph 90 python3 -m pytest -p no:cacheprovider -m gpu -q tests/gpu/test_cuda_graph_gpu.py
# The transformer rows measured already on an H100, beside the hand loop: chunked cross-entropy, Float8.
step transformer-rest 200 bash -c "python3 -m gpulab bench transformer --quick --device cuda \
    --variants hand-written,compile+chunked-ce,float8 --out $work/transformer-rest \
    && python3 benchmarks/transformer_mfu.py $work/transformer-rest/results.json"
# Does the inductor scheduler bug that gpulab works around on the CPU also hit Triton (GPU) code?
step inductor-repro 90 python3 benchmarks/inductor_maxpool_repro.py --device cuda
# issue 15's done-when on a GPU: tune chargpt at GPT-2-small size.
step tune-chargpt 260 python3 -m gpulab tune chargpt --device cuda --budget 240 --out "$work/tune" \
    --set options.n_layer=12 --set options.n_embd=768 --set options.block_size=1024
step bench-inference 120 python3 -m gpulab bench inference --quick --device cuda --out "$work/inference"
step tf-digits 100 python3 -m gpulab tune digits --engine tensorflow --device cuda --budget 80 --out "$work/tftune"
# The launch-bound mlp beside its hand-written peer (the seed's loop): vs_hand per compile variant.
step bench-compile 150 python3 -m gpulab bench compile --quick --device cuda --out "$work/compile"
# The full profile: every variant of the transformer suite, compile+max-autotune included (minutes of GEMM
# autotuning: too long for gpu_measure.sh's quick step), then MFU and gpulab / hand per row.
step transformer-full 540 bash -c "python3 -m gpulab bench transformer --device cuda \
    --out $work/transformer-full && python3 benchmarks/transformer_mfu.py $work/transformer-full/results.json"
cp "$work/tune/tune.json" "$out/tune-chargpt.json" 2>/dev/null
cp "$work/compile/results.json" "$out/compile-results.json" 2>/dev/null
cp "$work/transformer-full/results.json" "$out/transformer-full-results.json" 2>/dev/null
cp "$work/inference/results.json" "$out/inference-results.json" 2>/dev/null
echo "logs in $out; everything else in $work"
