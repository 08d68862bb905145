#!/usr/bin/env bash
# Every GPU measurement docs/PERF.md waits for, in one go, on a machine with a CUDA GPU:
#   scripts/gpu_measure.sh OUT_DIR [STEP...]
# STEP names (doctor, overhead, pytest-gpu, ..., bench, transformer) run only those: all of them may no
# longer fit one 10-minute call (issue 24's figures alone: `scripts/gpu_measure.sh OUT transformer`).
# Runs gpulab from src/ with the machine's own python3 and torch (nothing is installed into it). Wheels
# in .whl/ go to a private target first: the lent GPU machines lack pydantic (see docs/PERF.md).
# Each step's full log lands in OUT_DIR (ten files at most, for tools that fetch only a few); a step
# that fails is reported and the next one still runs.
set -uo pipefail
out=${1:?usage: scripts/gpu_measure.sh OUT_DIR [STEP...]}
shift
only="$*"  # gpu_lib.sh's step runs only these, when given
source "$(dirname "$0")/gpu_lib.sh"  # $work, PYTHONPATH, step

# Limits bound each step (together they pass one 10-minute call of the device tool since the transformer
# step: name the steps to run, above); a step cut off still leaves its log.
step doctor 60 python3 -m gpulab doctor --peak
step overhead 120 python3 benchmarks/overhead.py --device cuda --repeats 7
step pytest-gpu 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests
step profile-chargpt 80 python3 -m gpulab profile chargpt --device cuda --out "$work/profile" \
    --set options.n_layer=12 --set options.n_embd=768 --set options.block_size=1024
step single-rank-nccl-fsdp2 90 bash -c "python3 -m gpulab launch --nproc-per-node 1 -- gpulab train mlp \
    --out $work/ddp --max-steps 200 --set strategy=ddp && python3 -m gpulab launch --nproc-per-node 1 -- \
    gpulab train chargpt --out $work/fsdp2 --max-steps 50 --set strategy=fsdp2"
step bench 110 python3 -m gpulab bench matmul precision memory accumulate compile parallel transfer \
    inference --quick --out "$work/bench"
# issue 24: GPT-2-small (bf16-mixed, batch 32 x 1024) per variant: eager, compile, compile+opt,
# cuda-graph and float8 (each skipped with its reason where it cannot run), then MFU per variant.
STEP_TAIL=16 step transformer 300 bash -c "python3 -m gpulab bench transformer --quick --device cuda \
    --out $work/transformer && python3 benchmarks/transformer_mfu.py $work/transformer/results.json"
# issue 24 item 1: the whole step as one CUDA graph. Graph vs eager loss trajectories (mlp, chargpt in bf16
# and fp16), then what cuda_graph auto measures and picks on each recipe (its one line); the speed-up itself
# is overhead's (cg) row and transformer's cuda-graph row.
step cuda-graph 240 bash -c "python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_graph_gpu.py \
    && for r in mlp chargpt; do python3 -m gpulab train \$r --device cuda --max-steps 200 --out $work/graph-\$r \
    --set cuda_graph=auto | grep -E 'cuda_graph|done in'; done"
cp "$work/bench/results.json" "$out/bench-results.json" 2>/dev/null
cp "$work/profile/profile.json" "$out/profile-chargpt.json" 2>/dev/null
cp "$work/transformer/results.json" "$out/transformer-results.json" 2>/dev/null
echo "logs in $out; everything else in $work"
