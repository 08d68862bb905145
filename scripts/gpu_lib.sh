# Sourced by gpu_measure.sh and gpu_measure_more.sh (after they set $out): the set-up and `step` they share.
# gpulab runs from src/ with the machine's own python3 and torch (nothing is installed into it). Wheels in
# .whl/ go to a private target first: the lent GPU machines lack pydantic (see docs/PERF.md).
mkdir -p "$out"
work=$(mktemp -d /tmp/gpulab-gpu.XXXX)
# GPULAB_NO_WHEELS=1: this machine's own packages (the CPU test of the steps, in the project's venv).
if [[ -z ${GPULAB_NO_WHEELS:-} ]] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" .whl/*.whl || exit 1
    export PYTHONPATH="$work/site"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GPULAB_TORCH=keep

step() {  # step NAME SECONDS CMD...: run under a time limit, keep the log in $out, show its tail
    local name=$1 limit=$2
    # $only (space-separated step names, set by the calling script): run just those.
    if [[ -n "${only:-}" && " $only " != *" $name "* ]]; then return 0; fi
    shift 2
    echo "== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    echo "   exit $? after $((SECONDS - t0)) s"
    tail -n "${STEP_TAIL:-12}" "$out/$name.log"
}
