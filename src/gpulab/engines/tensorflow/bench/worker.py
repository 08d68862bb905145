"""``python -m gpulab.engines.tensorflow.bench.worker SPEC.json``: the TensorFlow suites, in a process of
their own.

``run_bench`` writes the spec (suites, profile, device, repeats...), this process runs each suite through
the same ``run_suite`` as the torch side (busy-machine note, plots, status) and writes
``OUT/tf-suites.json`` after every suite: ``{"suites": {"tf-<name>": SUITE}, "environment": {...}}``, or
``{"error": "<one line>"}`` for a user's mistake (a GPU TensorFlow does not see).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULT_FILE = "tf-suites.json"


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    out = Path(spec["out"])
    from gpulab.errors import GpulabError

    try:
        return _run(spec, out)
    except GpulabError as exc:
        _write(out, {"error": str(exc)})
        return exc.exit_code


def _run(spec: dict[str, Any], out: Path) -> int:
    import importlib

    import keras

    from gpulab.engines.tensorflow.bench import TF_PREFIX
    from gpulab.engines.tensorflow.bench.context import TfBenchContext
    from gpulab.engines.tensorflow.devices import configure_memory, device_name
    from gpulab.engines.tensorflow.importing import require_tensorflow
    from gpulab.measure.knobs import DeviceName
    from gpulab.measure.suite_run import run_suite

    tf = require_tensorflow()
    if spec.get("threads"):
        tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf_device = device_name(tf, spec["device"])
    configure_memory(tf, tf_device, None)  # memory growth on GPUs: peak figures are the step's, not a map
    # the device as torch names it, without torch (the suites' sizes and notes read it); ``auto`` resolved
    # by TensorFlow
    cpu = tf_device == "/CPU:0"
    device = DeviceName("cpu") if cpu else DeviceName("cuda", int(tf_device.rpartition(":")[2]))
    ctx = TfBenchContext(
        device=device,
        profile=spec["profile"],
        warmup=spec["warmup"],
        repeats=spec["repeats"],
        memory_limit_bytes=spec.get("memory_limit_bytes"),
        log=lambda line: print(line, flush=True),
        tf_device=tf_device,
    )
    doc: dict[str, Any] = {
        "environment": {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "tf_device": tf_device,
            "bench_device": str(device),
        },
        "suites": {},
    }
    for name in spec["suites"]:
        ctx.log(f"[{TF_PREFIX}{name}] running on {tf_device} ({ctx.profile})")
        suite_run = importlib.import_module(f"gpulab.engines.tensorflow.bench.{name}").run
        suite = run_suite(name, ctx, out, suite_run=suite_run, engine="tensorflow")
        doc["suites"][TF_PREFIX + name] = suite
        ctx.log(
            f"[{TF_PREFIX}{name}] {suite['status']}: {len(suite['rows'])} rows in {suite['seconds']:.1f} s"
        )
        _write(out, doc)
    _write(out, doc)
    return 0


def _write(out: Path, doc: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (RESULT_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, allow_nan=False))
    tmp.replace(out / RESULT_FILE)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
