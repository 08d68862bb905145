#!/usr/bin/env bash
# What decides issue 29 on a GPU, in one device call of about 7.5 minutes:
#   scripts/gpu_measure.sh OUT_DIR [STEP...]
# Steps: env (device, driver, torch, each SDPA kernel timed on GPT-2-small's attention), transformer (gpulab
# bench transformer at GPT-2-small: the hand-written loop beside eager, compile, compile+opt and cuda-graph,
# gpulab / hand and MFU per row), autotune (the hand loop beside compile+max-autotune, the lever not yet
# measured; its own step and limit, as its GEMM tuning takes minutes), train (gpulab train mlp with the
# default cuda_graph, and a compiled GPT-2-small chargpt run's diagnosis), overhead (the seed's loop against
# gpulab's fast path, whole job, fresh processes). The rows measured already (compile+chunked-ce, float8)
# and the cuda-graph GPU tests are gpu_measure_more.sh's steps.
# STEP names run only those. At most 8 files land in OUT_DIR: one log per step and the bench results.
# GPULAB_MEASURE_DEVICE=cpu runs the same steps on a CPU at tiny sizes (tests/test_gpu_measure.py), so a
# broken step shows in CI and not in the first GPU minute.
# gpulab runs from src/ with the machine's own python3 and torch; wheels in .whl/ (pydantic, torchao: the
# lent machines lack them) go to a private target first (gpu_lib.sh).
set -uo pipefail
out=${1:?usage: scripts/gpu_measure.sh OUT_DIR [STEP...]}
shift
only="$*"  # gpu_lib.sh's step runs only these, when given
source "$(dirname "$0")/gpu_lib.sh"  # $work, PYTHONPATH, step

dev=${GPULAB_MEASURE_DEVICE:-cuda}
if [[ $dev == cpu ]]; then  # tiny shapes, the same commands
    size=(--smoke --threads 1) gpt=(--set options.n_layer=1 --set options.n_embd=32 --set options.block_size=32)
    steps=(--max-steps 20) mlp_steps=(--max-steps 30)
    overhead=(--repeats 1 --warmup-rounds 0 --variants a,cm)
else
    size=(--quick) gpt=(--set options.n_layer=12 --set options.n_head=12 --set options.n_embd=768
        --set options.block_size=1024 --batch-size 32) steps=(--max-steps 40) mlp_steps=(--max-steps 2000)
    overhead=(--repeats 3 --variants a,cm,cg)
fi
py=${PYTHON:-python3}

step env 30 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3; \
    $py -c 'import torch, sys; print(\"torch\", torch.__version__, \"python\", sys.version.split()[0], \
    \"cuda\", torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else \"no GPU\")'; $py scripts/sdpa_kernel_check.py"
# gpulab's variants and the hand-written loop in one run, then MFU and gpulab / hand per row against the targets.
STEP_TAIL=16 step transformer 170 bash -c "$py -m gpulab bench transformer ${size[*]} --device $dev \
    --variants hand-written,eager,compile,compile+opt,cuda-graph --out $work/transformer \
    && $py benchmarks/transformer_mfu.py $work/transformer/results.json"
# Inductor's GEMM autotuning beside the hand loop (on a CPU the row says why it is skipped).
STEP_TAIL=8 step autotune 180 bash -c "$py -m gpulab bench transformer ${size[*]} --device $dev \
    --variants hand-written,compile+max-autotune --out $work/autotune \
    && $py benchmarks/transformer_mfu.py $work/autotune/results.json"
# The default cuda_graph (auto) on the launch-bound mlp says what it chose; a compiled GPT-2-small run's
# closing diagnosis must not call it host-bound.
STEP_TAIL=8 step train 120 bash -c "$py -m gpulab train mlp --device $dev ${mlp_steps[*]} --out $work/mlp \
    | grep -E 'cuda_graph|done in' ; $py -m gpulab train chargpt --device $dev --compile ${gpt[*]} \
    ${steps[*]} --out $work/gpt2 --set progress=false --set tensorboard=false \
    && $py -c 'import json; s=json.load(open(\"$work/gpt2/summary.json\")); \
    print(\"diagnosis:\", s[\"diagnosis\"][\"bound\"], \"-\", s[\"diagnosis\"][\"reason\"]); \
    print(\"mfu:\", s.get(\"mfu\")); print(\"compile:\", s.get(\"compile\"))'"
step overhead 90 $py benchmarks/overhead.py --device $dev "${overhead[@]}"
cp "$work/transformer/results.json" "$out/transformer-results.json" 2>/dev/null
cp "$work/autotune/results.json" "$out/autotune-results.json" 2>/dev/null
echo "logs in $out; everything else in $work"
