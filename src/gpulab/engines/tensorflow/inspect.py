"""``gpulab inspect --engine tensorflow``: the Keras model layer by layer, in the torch table's rows.

The recipe's model is built and called once, eagerly, on one example batch under the run's precision
policy, with ``Layer.__call__`` wrapped for the duration: a row per layer call (nested calls indented),
its inputs and outputs (shapes, dtypes: the compute dtype under a mixed policy), trainable / frozen
parameters (Keras's weights, children included) and activation memory = its outputs' bytes. A leaf
whose floating output is not the run's dtype (the float32 output layer under mixed_bfloat16) is flagged.
FLOPs are TensorFlow's graph profiler's count (``float_operation``, as ``engines/tensorflow/profile.py``) of a
``tf.function`` of each layer on the inputs it got, and of one training step (forward, loss, gradients)
for the total. Predicted peak memory: n/a (the estimate is the torch engine's).

A layer that raises on its input (also while a ``keras.Input`` model is being built) ends the table:
the innermost open call is named with the shapes it got.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from gpulab.engines.tensorflow.data import as_arrays, tree_map
from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.errors import ConfigError
from gpulab.measure.inspection import Inspection, LayerFailure, LayerRow, TensorInfo, first_line
from gpulab.precisions import DeviceFacts

SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64"}
SHORT |= {"int32": "i32", "bool": "bool", "uint8": "u8"}
NO_MEMORY = "the predicted peak of a training step is the torch engine's estimate, not made on TensorFlow"


def inspect_tf(user: dict[str, Any]) -> Any:
    """The ``InspectReport`` of the TensorFlow run ``user`` describes."""
    from gpulab.engines.tensorflow.precision import resolve_precision
    from gpulab.engines.tensorflow.run import resolve_tf_config
    from gpulab.measure.inspection import InspectReport

    user["engine"] = "tensorflow"
    config, recipe = resolve_tf_config(user)
    tf = require_tensorflow()
    if not isinstance(config.batch_size, int):
        raise ConfigError("inspect needs a number for the batch size (not auto): e.g. --batch-size 32")
    import keras

    tf.get_logger().setLevel("ERROR")  # the v1 profiler's deprecation warnings are not the user's business
    keras.backend.clear_session()  # layer names as in a fresh process (dense, dense_1), whatever ran before
    keras.utils.set_random_seed(config.seed)
    cpu = DeviceFacts("cpu", "/CPU:0")
    precision = resolve_precision(config.precision, cpu, config.init_scale, config.growth_interval)
    # NumPy arrays, tensors, a tf.data.Dataset or a generator of (x, y) batches: as model.fit takes them;
    # x may be a dict or a tuple of arrays (several inputs).
    x, y = (tree_map(lambda a: a[: config.batch_size], part) for part in as_arrays(recipe.train_data)[:2])
    with precision.applied(tf, keras):
        run_dtype = SHORT.get(keras.mixed_precision.global_policy().compute_dtype, "?")
        rec = _Recorder(run_dtype)
        with rec.wrapped(keras):
            try:
                model = recipe.model()
            except Exception as exc:  # a keras.Input model runs its layers symbolically while it is built
                failed = rec.failed(exc, config.batch_size, building=True)
                return _report(InspectReport, config, precision, failed)
            rec.rows.clear()  # the build's symbolic calls: the eager call below is the table
            rec.calls.clear()
            try:
                out = model(x, training=False)
            except Exception as exc:
                failed = rec.failed(exc, config.batch_size, building=False)
                return _report(InspectReport, config, precision, failed)
        # The model's forward traced on the whole input: its recorded call kept positional tensors only, so
        # a dict or a tuple of several inputs left it without a figure ("forward n/a").
        forward = _graph_flops(tf, _layer_function(tf, model), (x,))
        for row, layer, args in rec.calls:  # after the trace: the layer's own graph, nothing recorded
            is_model = layer is model  # its row takes the figure above rather than a second trace
            row.flops_forward = forward if is_model else _graph_flops(tf, _layer_function(tf, layer), args)
        from gpulab.engines.tensorflow.losses import combined_loss

        loss_fn = combined_loss(recipe.loss_fn, recipe.loss_weights, out)  # a dict of losses: per output
        step = _step_function(tf, keras, model, loss_fn)
        total = _graph_flops(tf, step, (x, y))
    inspection = Inspection(rec.rows, total, forward, config.batch_size, run_dtype, "an eager Keras call")
    del out
    trainable = sum(_count(w) for w in model.trainable_weights)
    frozen = sum(_count(w) for w in model.non_trainable_weights)
    report = _report(InspectReport, config, precision, inspection)
    report.params_trainable, report.params_frozen = trainable, frozen
    report.params_bytes = _bytes(model)
    if total is None:
        report.notes.append("FLOPs: n/a, TensorFlow's graph profiler could not count the training step")
    return report


def _report(cls, config, precision, inspection: Inspection):
    report = cls(
        recipe=config.recipe,
        device="/CPU:0",
        precision=f"{precision.name} (keras policy {precision.policy})",
        optimizer=None,
        inspection=inspection,
        params_trainable=0,
        params_frozen=0,
        params_bytes=0,
        memory_note=NO_MEMORY,
        limit_source="",
        engine="tensorflow",
    )
    return report


class _Recorder:
    """``Layer.__call__`` wrapped: a row per call, a stack of the calls still open (the innermost fails)."""

    def __init__(self, run_dtype: str) -> None:
        self.run_dtype = run_dtype
        self.rows: list[LayerRow] = []
        self.open: list[tuple[int, Any]] = []
        self.calls: list[tuple[LayerRow, Any, tuple]] = []  # (row, layer, positional tensors) for FLOPs

    @contextlib.contextmanager
    def wrapped(self, keras: Any) -> Iterator[None]:
        layer_cls = keras.layers.Layer
        original = layer_cls.__call__
        recorder = self

        def call(layer, *args, **kwargs):
            recorder.pre(layer, args, kwargs)
            out = original(layer, *args, **kwargs)
            recorder.post(out)
            return out

        layer_cls.__call__ = call
        try:
            yield
        finally:
            layer_cls.__call__ = original

    def pre(self, layer: Any, args: tuple, kwargs: dict) -> None:
        depth = len(self.open)
        if self.open:
            parent = self.rows[self.open[-1][0]].name
            name = f"{parent}.{layer.name}" if parent else layer.name
        else:  # the model's own call is the root (""); a keras.Input model's build calls its layers at 0
            name = layer.name if _is_input_model_child(layer) else ""
        row = LayerRow(
            name=name,
            depth=depth,
            type=type(layer).__name__,
            inputs=_describe((args, kwargs)),
            params_trainable=sum(_count(w) for w in layer.trainable_weights),
            params_frozen=sum(_count(w) for w in layer.non_trainable_weights),
            leaf=not layer._layers if hasattr(layer, "_layers") else True,
            status="unfinished",
        )
        self.rows.append(row)
        self.open.append((len(self.rows) - 1, layer))
        self.calls.append((row, layer, tuple(a for a in args if _is_tensor(a))))

    def post(self, output: Any) -> None:
        index, layer = self.open.pop()
        row = self.rows[index]
        row.outputs = _describe(output)
        row.activation_bytes = sum(_nbytes(t) for t in _tensors(output))
        row.params_trainable = sum(_count(w) for w in layer.trainable_weights)  # built during the call
        row.params_frozen = sum(_count(w) for w in layer.non_trainable_weights)
        row.leaf = not getattr(layer, "_layers", None)
        row.status = "ok"
        floating = {t.dtype for t in row.outputs if t.dtype in ("f32", "f16", "bf16", "f64")}
        if row.leaf and floating and self.run_dtype not in floating:
            row.cast_dtype = "/".join(sorted(floating))

    def failed(self, exc: BaseException, batch: int, *, building: bool) -> Inspection:
        error = _keras_first_line(exc)
        if self.open:
            index, layer = self.open[-1]
            row = self.rows[index]
            row.status = "failed"
            failure = LayerFailure(row.name, row.type, row.inputs, _expects(layer), error)
        else:
            failure = LayerFailure("", "building the model" if building else "the model", [], None, error)
        method = "an eager Keras call"
        if building:  # the layers ran symbolically (batch dimension -1) with no root call: add the root
            for row in self.rows:
                row.depth += 1
            self.rows.insert(0, LayerRow(name="", depth=0, type="(model being built)", status="unfinished"))
            method = "the symbolic call that builds a keras.Input model"
        return Inspection(self.rows, 0, 0, batch, self.run_dtype, method, failure)


def _keras_first_line(exc: BaseException) -> str:
    """Keras wraps a layer's error as "Exception encountered when calling X.call()." + the real message."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Exception encountered when calling"):
        return f"{type(exc).__name__}: {lines[1][:200]}"
    return first_line(exc)


def _is_input_model_child(layer: Any) -> bool:
    """A layer called at depth 0 while a ``keras.Input`` model is built (no root call): keep its name."""
    import keras

    return not isinstance(layer, keras.Model)


def _expects(layer: Any) -> str | None:
    """What a built layer expects of its input, from its own weights (None when nothing simple says)."""
    kernel = getattr(layer, "kernel", None) if getattr(layer, "built", False) else None
    if kernel is None:
        return None
    if type(layer).__name__ == "Dense":
        return f"{kernel.shape[0]} as the last dimension (its kernel is {tuple(kernel.shape)})"
    if type(layer).__name__.startswith("Conv"):
        return f"{kernel.shape[-2]} channels as the last dimension (its kernel is {tuple(kernel.shape)})"
    return None


def _layer_function(tf: Any, layer: Any) -> Any:
    def forward(*args):
        return layer(*args, training=False)

    return tf.function(forward)


def _step_function(tf: Any, keras: Any, model: Any, loss_fn: Any) -> Any:
    """One training step's graph (forward, loss, gradients), as the trainer runs it, for its FLOPs."""

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(loss_fn(y, model(x, training=True)))
        return tape.gradient(loss, model.trainable_variables)

    return tf.function(step)


def _graph_flops(tf: Any, fn: Any, args: tuple) -> int | None:
    """TensorFlow's graph profiler's float-op count of ``fn`` traced on ``args``; None when it has none."""
    try:
        graph = fn.get_concrete_function(*args).graph
        opts = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        opts["output"] = "none"
        total = tf.compat.v1.profiler.profile(graph, options=opts).total_float_ops
    except Exception:  # the table stands without it: the row says n/a
        return None
    return int(total) if total else None


def _is_tensor(t: Any) -> bool:
    return hasattr(t, "shape") and hasattr(t, "dtype")


def _tensors(obj: Any) -> Iterator[Any]:
    if _is_tensor(obj):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def _dtype(t: Any) -> str:
    name = getattr(t.dtype, "name", str(t.dtype))
    return SHORT.get(name, name)


def _describe(obj: Any) -> list[TensorInfo]:
    return [TensorInfo([-1 if d is None else int(d) for d in t.shape], _dtype(t)) for t in _tensors(obj)]


def _nbytes(t: Any) -> int:
    import numpy as np

    if any(d is None for d in t.shape):
        return 0
    name = getattr(t.dtype, "name", str(t.dtype))
    itemsize = 2 if name == "bfloat16" else np.dtype(name).itemsize  # numpy has no bfloat16
    return int(np.prod(t.shape, dtype=np.int64)) * itemsize


def _count(w: Any) -> int:
    import numpy as np

    return int(np.prod(w.shape, dtype=np.int64))


def _bytes(model: Any) -> int:
    return sum(_nbytes(w) for w in model.weights)


__all__ = ["inspect_tf"]
