"""``gpulab profile --engine tensorflow``: the TensorFlow engine's own training step, timed and traced.

The step is the one ``gpulab train --engine tensorflow`` runs (``TfTrainer.built``: model, optimizer,
precision, strategy, ``tf.data`` pipeline, XLA when ``compile``), driven here step by step:

1. warm-up steps, not timed (at least one: tracing, and XLA's compilation);
2. timed steps: ``data`` (the next batch from the pipeline) and ``compute`` (the step, its loss read back,
   which waits for the device) per step; the breakdown is their mean;
3. traced steps under TensorFlow's profiler (``tf.profiler.experimental.start/stop``) into
   ``OUT/tf_trace``: TensorBoard's profile plugin reads ``plugins/profile/<run>/<host>.xplane.pb``
   (``tensorboard --logdir OUT/tf_trace``, Profile tab). Apart from the timed steps: the profiler's own
   overhead would inflate them.

What TensorFlow does not give is ``None`` in profile.json and named in ``not_available`` with why: the
step is one graph, so forward, backward and optimizer are not timed apart (the trace shows their ops).
FLOPs are TensorFlow's own count of the step's graph (``tf.compat.v1.profiler``'s float_operation), when
it gives one.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from gpulab.artifact.ownership import claim_output_folder
from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.errors import ConfigError

TRACE_DIR = "tf_trace"
PROFILE_FILE = "profile.json"
NOT_AVAILABLE = {
    "forward": "the step is one TensorFlow graph: forward, backward and optimizer run fused (see the trace)",
    "backward": "as forward",
    "optimizer": "as forward",
    "communication": "not timed apart on TensorFlow (the strategy's all-reduce is inside the step's graph)",
    "mfu": "no peak-FLOP/s measurement for TensorFlow yet",
    "fixed_cost_s": "not measured on TensorFlow",
    "diagnosis": "needs the phase breakdown TensorFlow's fused step does not give",
    "nvml": "GPU utilisation sampling runs with the torch engine only",
}


def profile_tf(user: dict[str, Any], out_dir: str | Path, options: Any) -> Any:
    """Profile the TensorFlow run ``user`` describes; write ``out_dir/profile.json`` and the trace."""
    from gpulab.measure.profile_report import ProfileResult, write_json

    if options.memory_snapshot:
        raise ConfigError(
            "--memory-snapshot is not available on engine 'tensorflow' (it is CUDA's torch allocator "
            "history); remove it, or use --engine torch"
        )
    from gpulab.engines.tensorflow.run import resolve_tf_config
    from gpulab.engines.tensorflow.trainer import TfTrainer

    config, recipe = resolve_tf_config(user)
    tf = require_tensorflow()
    trainer = TfTrainer(settings=config.trainer_settings(unset=frozenset({"out_dir"})))
    out = claim_output_folder(Path(out_dir), "profile")  # a folder of the user's is refused, untouched
    with trainer.built(recipe):
        report = _profile(tf, trainer, out, options)
    report = {"recipe": config.recipe, **report, **recipe.info}
    result = ProfileResult(report, out)
    write_json(out / PROFILE_FILE, report)
    result.files["profile"] = str(out / PROFILE_FILE)
    traces = sorted((out / TRACE_DIR).glob("plugins/profile/*/*.xplane.pb"))
    if traces:
        result.files["trace"] = str(traces[-1])
    return result


def _profile(tf: Any, trainer: Any, out: Path, o: Any) -> dict[str, Any]:
    s = trainer.settings
    batches = trainer.train_batches()

    def window() -> list[Any]:
        return [next(batches) for _ in range(s.accumulate)]

    for _ in range(max(1, o.warmup)):  # the first pays tracing and XLA compilation
        float(trainer.step(*window()))
    flops_per_step, method = _graph_flops(tf, trainer, window())
    trainer.reset_peak_memory()
    data, compute = [], []
    for _ in range(o.steps):
        t0 = time.perf_counter()
        w = window()
        t1 = time.perf_counter()
        float(trainer.step(*w))  # the loss read back: the step has finished on the device
        data.append(t1 - t0)
        compute.append(time.perf_counter() - t1)
    peak, memory = trainer.memory()
    tf.profiler.experimental.start(str(out / TRACE_DIR))
    try:
        for i in range(o.active):
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                float(trainer.step(*window()))
    finally:
        tf.profiler.experimental.stop()
    steps = [d + c for d, c in zip(data, compute, strict=True)]
    median = statistics.median(steps)
    # A step over 3x the median is left out of the breakdown, as torch's profile does: here mostly the
    # epoch's last, shorter batch, which traces the step once more.
    keep = [i for i, t in enumerate(steps) if t <= 3 * median]
    step_s = statistics.fmean(steps[i] for i in keep)
    median = statistics.median(steps[i] for i in keep)  # of the steps the table's mean is of
    samples = trainer.global_batch * s.accumulate
    breakdown = {
        "data": statistics.fmean(data[i] for i in keep),
        "compute": statistics.fmean(compute[i] for i in keep),
        "step": step_s,
    }
    from gpulab.engines.tensorflow.run import environment
    from gpulab.hardware.load import machine_load

    return {
        "engine": "tensorflow",
        "device": trainer.device,
        "precision": trainer.precision.name,
        "strategy": trainer.dist.name,
        "world_size": trainer.dist.replicas,
        "compiled": bool(trainer.step.compiled),
        "batch_size": s.batch_size,
        "accumulate": s.accumulate,
        "warmup_steps": max(1, o.warmup),
        "timed_steps": o.steps,
        "profiled_steps": o.active,
        "breakdown_s": {**breakdown, **dict.fromkeys(("forward", "backward", "optimizer", "communication"))},
        "breakdown_fraction": {k: v / step_s for k, v in breakdown.items() if k != "step"},
        "step_s_median": median,
        "step_s_mean_all": statistics.fmean(steps),
        "outlier_steps": [i for i in range(len(steps)) if i not in keep],
        "samples_per_s": samples / step_s,
        "flops_per_step": flops_per_step,
        "flops_per_sample": flops_per_step / samples if flops_per_step else None,
        "flops_method": method,
        "achieved_flops_per_s": flops_per_step / step_s if flops_per_step else None,
        "mfu": None,
        "fixed_cost_s": None,
        "memory": {"peak_bytes": peak, **memory},
        "nvml": None,
        "diagnosis": None,
        "not_available": NOT_AVAILABLE,
        "trace_dir": str(out / TRACE_DIR),
        "timer": "perf_counter (the step's loss read back)",
        "machine_load": machine_load(),
        "environment": environment(),
        "date_unix": time.time(),
    }


def _graph_flops(tf: Any, trainer: Any, window: list[Any]) -> tuple[float | None, str]:
    """TensorFlow's own FLOP count of the step's graph (ops with a registered count: matmul, conv...)."""
    quiet = tf.get_logger().level
    tf.get_logger().setLevel("ERROR")  # the v1 profiler's deprecation warnings are not the user's business
    try:
        graph = trainer.step._plain.get_concrete_function(*window).graph
        opts = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        opts["output"] = "none"
        total = tf.compat.v1.profiler.profile(graph, options=opts).total_float_ops
    except Exception as exc:  # noqa: BLE001 -- a count is optional: say why there is none
        return None, f"n/a: TensorFlow's graph profiler could not count this step ({type(exc).__name__})"
    finally:
        tf.get_logger().setLevel(quiet)
    if not total:
        return None, "n/a: TensorFlow's graph profiler counts no float ops in this step"
    return float(total), "tensorflow graph profiler (float_operation of the training step's graph)"
