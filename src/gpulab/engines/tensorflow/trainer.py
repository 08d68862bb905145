"""``TfTrainer``: the TensorFlow engine's part of the fit whose loop is ``gpulab.core.loop`` (every
engine's), owned by gpulab rather than ``model.fit``.

Keras 3's ``model.fit`` fails under MultiWorkerMirroredStrategy ("unsupported type PerReplica"), so the
step is written out: ``tf.GradientTape`` inside ``strategy.run``, ``tf.nn.compute_average_loss`` (the sum
of per-example losses over the *global* batch, so the replicas' gradients add up to the big batch's) and
``strategy.reduce`` for the loss. The same semantics as torch's Trainer:

- epochs or max_steps; ``accumulate`` micro-batches per optimizer step, each loss divided by the window's
  length inside one step function, so a window equals one large batch (as torch's ``loss / window``);
- ``clip_grad_norm`` on the global gradient (after the all-reduce when there are several replicas);
- metrics stay tensors and are read every ``log_every`` steps (no host sync per step); a NaN/inf loss
  stops the fit there, naming the step; validation at each epoch end with loss and accuracy;
- preemption as torch's: ``StopOnSignal`` (given by ``gpulab train``) ends the fit at a step boundary, the
  same step on every worker (``stop_flag.py``), with a checkpoint and ``extras["preempted"]``;
- the engine-neutral callbacks (progress, metrics.jsonl, TensorBoard) and a ``FitResult``.

``gpulab profile --engine tensorflow`` drives the same step through ``built(recipe)``, ``step``,
``train_batches()`` and ``memory()``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.config.schema import TrainerSettings
from gpulab.config.validate import check_engine, engine_checked, trainer_settings_of
from gpulab.core import loop
from gpulab.core.callbacks import Callback, CallbackList, default_callbacks
from gpulab.core.clock import Clock
from gpulab.core.context import FitContext
from gpulab.core.engine_step import EngineStep
from gpulab.core.failure import add_failure_note
from gpulab.core.nonfinite import NonFiniteLossError
from gpulab.core.plan import plan_fit
from gpulab.core.state import FitResult, FitState
from gpulab.engines.tensorflow import data as tfdata
from gpulab.engines.tensorflow.compile import CompiledStep
from gpulab.engines.tensorflow.devices import configure_memory, device_facts, device_name
from gpulab.engines.tensorflow.diagnosis_advice import THREADS_HINT
from gpulab.engines.tensorflow.failure import describe_batch, describe_error, is_out_of_memory
from gpulab.engines.tensorflow.feed import as_built
from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.losses import combined_loss
from gpulab.engines.tensorflow.precision import resolve_precision
from gpulab.engines.tensorflow.stop_flag import StopFlag
from gpulab.engines.tensorflow.strategy import make_strategy
from gpulab.errors import ConfigError, GpulabWarning


@dataclass
class TfRecipe:
    """What ``TfTrainer.fit`` needs; built under the fit's strategy scope and precision policy.

    ``model``: ``() -> keras.Model`` (its output layer in float32; Sequential, functional or subclassed);
    ``loss_fn``: ``(y, output) -> per-example losses``, or for several outputs a dict of losses by output
    name (a list in their order) with ``loss_weights`` alike, as ``model.compile`` takes them
    (``losses.py``); ``optimizer``: ``(total_steps) -> keras optimizer`` (a schedule needs the length);
    ``correct_fn``: ``(y, output) -> per-example 0/1`` for accuracy, or None.
    """

    model: Callable[[], Any]
    train_data: Any
    loss_fn: Callable
    optimizer: Callable[[int], Any]
    val_data: Any = None
    correct_fn: Callable | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    loss_weights: Any = None  # last: a recipe that gave the fields above by position still does


class TfTrainer(EngineStep):
    """``TfTrainer(**settings).fit(recipe) -> FitResult``; settings are ``TrainerSettings``'s (or
    ``settings=`` one validated already: ``RunConfig.trainer_settings()``)."""

    _agree_on_stop = False  # fit() sets it with several workers (gpulab profile builds steps without it)
    sample_scale = 1  # samples_seen counts the global batch
    threads_hint = THREADS_HINT

    def __init__(
        self,
        *,
        callbacks: Sequence[Callback] = (),
        trajectory: dict[str, Any] | None = None,
        settings: TrainerSettings | None = None,
        **given: Any,
    ) -> None:
        if settings is None:
            given.setdefault("engine", "tensorflow")
        self.requested = trainer_settings_of(settings, given)
        if self.requested.engine != "tensorflow":
            raise ConfigError("TfTrainer is the tensorflow engine; for engine 'torch' use gpulab.Trainer")
        if not engine_checked(self.requested):  # a run's settings were, by validate_run
            check_engine(self.requested)
        self.settings = self.requested
        self._extra_callbacks = list(callbacks)
        self.state = FitState()
        self.history: list[dict[str, Any]] = []
        self.trajectory = dict(trajectory or {})  # as torch's: stored in checkpoints, checked on resume
        self.resumed_from = None  # the checkpoint a fit resumed from (callbacks read it)
        self.extras: dict[str, Any] = {}
        self.is_rank_zero = True

    # -- the story ------------------------------------------------------------------------------------
    def fit(self, recipe: TfRecipe, resume: str | None = None) -> FitResult:
        """Train; ``resume``: ``latest`` (under the checkpoint root), a checkpoint's path, or ``auto``."""
        tf = self._tf = require_tensorflow()
        import keras

        self._configure(tf, keras)
        self._agree_on_stop = self.dist.num_workers > 1
        with self.precision.applied(tf, keras):
            return loop.fit(self, lambda: self._setup(tf, keras, recipe, resume))

    @contextlib.contextmanager
    def built(self, recipe: TfRecipe) -> Iterator[TfTrainer]:
        """The fit's set-up without its loop (``gpulab profile`` times ``step`` on ``train_batches()``):
        device, precision, strategy, model, optimizer, data and the compiled step, under the precision's
        policy until the block ends; no stop agreement between workers, no resume, no callback runs."""
        tf = self._tf = require_tensorflow()
        import keras

        self._configure(tf, keras)
        with self.precision.applied(tf, keras):
            self._setup(tf, keras, recipe, None)
            yield self

    def train_batches(self) -> Iterator[Any]:
        """The training batches, epoch after epoch, in the order the fit takes them (one a micro-batch)."""
        for epoch in itertools.count():
            self.state.epoch, self.state.batch_in_epoch = epoch, 0
            yield from self._epoch_data()

    def _configure(self, tf: Any, keras: Any) -> None:
        """Device, memory, precision, strategy and seed (``gpulab profile`` starts from here too)."""
        s = self.settings
        self.device = device_name(tf, s.device)
        self.memory_settings = configure_memory(tf, self.device, s.memory_limit)
        facts = device_facts(tf, self.device)
        self.precision = resolve_precision(s.precision, facts, s.init_scale, s.growth_interval)
        self.dist = make_strategy(tf, s.strategy, self.device)
        self.is_rank_zero = self.dist.is_rank_zero
        keras.utils.set_random_seed(s.seed)  # Python, NumPy and TensorFlow: the model's initial weights
        if s.deterministic:
            tf.config.experimental.enable_op_determinism()

    def _setup(self, tf: Any, keras: Any, recipe: TfRecipe, resume: str | None) -> CallbackList:
        s, dist = self.settings, self.dist
        self.extras["engine"] = "tensorflow"
        if s.clip_grad_norm is not None and dist.replicas > 1 and self.precision.scales_loss:
            raise ConfigError(
                "clip_grad_norm with fp16-mixed over several replicas is not available on engine "
                "'tensorflow' (the loss scaler unscales after the all-reduce); use bf16-mixed or one replica"
            )
        self.global_batch = s.batch_size * dist.replicas
        self.train_arrays, came_in = tfdata.read(recipe.train_data)
        if came_in is not None and came_in != self.global_batch and self.is_rank_zero:
            warnings.warn(
                f"the recipe's training data comes in batches of {came_in}: the TensorFlow engine reads its "
                f"samples and batches them itself, {self.global_batch} a step (batch_size "
                f"{s.batch_size}), shuffled per epoch; set --batch-size {came_in // dist.replicas or 1} to "
                "train on batches of its size",
                GpulabWarning,
                stacklevel=3,
            )
        self.n_train = tfdata.num_samples(self.train_arrays)
        self.plan = plan_fit(s, tfdata.batches_per_epoch(self.n_train, self.global_batch), s.accumulate)
        self.state = self.plan.fresh_state()
        with dist.strategy.scope():
            self.model = recipe.model()
            # fed in the structure it was built on (feed.py: else Keras warns at its first call)
            self.train_arrays = (as_built(self.model, self.train_arrays[0]), *self.train_arrays[1:])
            self.loss_fn = self._loss(recipe)
            self.optimizer = self.precision.wrap_optimizer(keras, recipe.optimizer(self.state.total_steps))
            if s.clip_grad_norm is not None and dist.replicas == 1:
                # Keras clips after unscaling (fp16) and before applying: exact with one replica.
                inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
                inner.global_clipnorm = s.clip_grad_norm
            self.optimizer.build(self.model.trainable_variables)
        self._resume(tf, resume)
        self.train_source = tfdata.source(tf, self.train_arrays, s.data_cache)
        self.extras["data"] = {
            "cache": tfdata.caches(self.train_arrays, s.data_cache),
            "prefetch": s.prefetch_factor or "AUTOTUNE",
        }
        self.val_data = None
        if recipe.val_data is not None:
            x, *rest = tfdata.as_arrays(recipe.val_data)
            val = tfdata.make_dataset(
                tf, (as_built(self.model, x), *rest), self.global_batch, shuffle=False, seed=0,
                cache=s.data_cache, prefetch=s.prefetch_factor,
            )  # fmt: skip
            self.val_data = self._distribute(val)
        self.correct_fn = recipe.correct_fn
        # Outside the strategy's scope: each worker's own request, read by its replicas.
        self.stop_flag = StopFlag(tf) if self._agree_on_stop else None
        self.step = CompiledStep(tf, self._step_fn(tf), jit=s.compile)
        self.val_step = tf.function(self._distributed(tf, self._replica_val), reduce_retracing=True)
        return CallbackList(self._default_callbacks() + self._extra_callbacks)  # the loop's

    def _loss(self, recipe: TfRecipe) -> Callable:
        """The recipe's loss as the step takes it. A subclassed model has no variables before its first
        call (the optimizer would build on none), and a dict of losses must match the outputs: one sample
        through the model, in inference mode (no dropout draw), settles both before anything else runs."""
        one_loss = not isinstance(recipe.loss_fn, (Mapping, list, tuple))
        if self.model.built and one_loss and recipe.loss_weights is None:
            return recipe.loss_fn
        x = self._tf.nest.map_structure(lambda a: a[:1], self.train_arrays[0])
        try:
            output = self.model(x, training=False)
        except Exception as error:  # the user's model: its traceback, and where gpulab called it
            add_failure_note(error, "gpulab: the model's first call failed (one training sample through it, "
                             "before the fit, to create its variables and read its outputs)")  # fmt: skip
            raise
        return combined_loss(recipe.loss_fn, recipe.loss_weights, output)

    def _resume(self, tf: Any, resume: str | None) -> None:
        """Checkpoints: the model, the optimizer (slots, iterations, loss scale) and the step in a
        ``tf.train.Checkpoint``; the storage, manifest and ``latest`` are torch's (``checkpoints.py``)."""
        from gpulab.engines.tensorflow.checkpoints import TfCheckpointer

        s = self.settings
        root = s.checkpoint_dir or (f"{s.out_dir}/checkpoints" if s.out_dir else None)
        self.checkpointer = None if root is None else TfCheckpointer(root, s.keep_last)
        self._step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        # The layer graph does not reach the dropout layers' seed generators (Keras's SeedGenerator is not
        # trackable): their states go in by hand, or a resumed run would draw other dropout masks.
        self.tf_checkpoint = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            step=self._step_var,
            model_state=list(self.model.non_trainable_variables),
        )
        if resume and self.checkpointer is None:
            raise ConfigError("resume needs a checkpoint directory: set out_dir or checkpoint_dir")
        # auto, or latest where no checkpoint was written yet: None, a fresh start
        resume = self.checkpointer.choose(resume, self.is_rank_zero) if resume else None
        if resume:
            self.resumed_from = self.checkpointer.resume(self, resume, self.tf_checkpoint, s.force_resume)
            self.extras["resumed_from"] = str(self.resumed_from)
            if int(self._step_var.numpy()) != self.state.global_step:
                from gpulab.errors import CheckpointError

                raise CheckpointError(f"{self.resumed_from}: its step variable disagrees with meta.json")

    @property
    def has_schedule(self) -> bool:
        """The learning rate is a schedule (a function of the planned length, so a resume keeps it)."""
        import keras

        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        return isinstance(
            getattr(inner, "_learning_rate", None), keras.optimizers.schedules.LearningRateSchedule
        )

    def save_checkpoint(self) -> Path:
        values = self._read_losses()  # never checkpoint NaN (raises, as the next log would)
        # The unread loss window, so a resumed run logs the numbers this one would have.
        self.loss_window = [
            [int(st), float(v)]
            for st, v in zip(self._loss_steps, values if values is not None else [], strict=True)
        ]
        self._step_var.assign(self.state.global_step)
        return self.checkpointer.save(self, self.tf_checkpoint)

    def _epoch_data(self) -> Any:
        """This epoch's batches, from the next one not yet taken (a resumed run starts mid-epoch)."""
        state = self.state
        ds = tfdata.epoch_dataset(
            self._tf, self.train_source, self.n_train, self.global_batch,
            seed=self.settings.seed, epoch=state.epoch, skip=state.batch_in_epoch,
            prefetch=self.settings.prefetch_factor,
        )  # fmt: skip
        return self._distribute(ds)

    def _distribute(self, dataset: Any) -> Any:
        """Split over the replicas; one device takes the dataset as it is (the distributed iterator cost
        ~2 ms a batch on this CPU, measured with cProfile: more than the mlp step itself)."""
        if self.dist.name == "single":
            return dataset
        return self.dist.strategy.experimental_distribute_dataset(dataset)

    # -- the loop's steps (gpulab.core.loop.EngineStep) ---------------------------------------------------
    def on_loop_start(self, clock: Clock) -> None:
        """The loss window a resumed run carries on with (the checkpoint's unread losses)."""
        tf = self._tf
        window = getattr(self, "loss_window", None) if self.resumed_from is not None else None
        self._losses = [tf.constant(v, tf.float32) for _, v in window or []]
        self._loss_steps: list[int] = [st for st, _ in window or []]
        self._window: list[Any] = []  # the accumulation window's micro-batches so far

    def epoch_batches(self) -> Iterable[Any]:
        return self._epoch_data()

    def micro_step(self, batch: Any, window: int, closes: bool) -> int:
        """Micro-batches wait for their window: the whole window is one compiled step."""
        self._window.append(batch)
        samples = tfdata.batch_samples(self.n_train, self.global_batch, self.state.batch_in_epoch)
        if closes:
            loss = self.step(*self._window)
            self._window = []
            if self.stop_flag is not None:
                loss, stop = loss
                self.stop_flag.record(stop)
            self._losses.append(loss)  # a tensor: read only at the next log
            self._loss_steps.append(self.state.global_step + 1)
        return samples

    def drop_window(self) -> None:
        self._window = []

    def first_step(self) -> float | None:
        return float(self._losses[-1])  # a sync, where the clock starts anyway

    def read_loss(self) -> float | None:
        values = self._read_losses()
        if values is None:
            return None
        self._losses, self._loss_steps = [], []
        return float(values.mean())

    def learning_rate(self) -> float:
        return self._lr()

    @property
    def has_validation(self) -> bool:
        return self.val_data is not None

    def _step_fn(self, tf: Any) -> Callable:
        """The step to compile: the window's loss; with ``stop_flag``, (loss, the workers' summed stop
        requests), reduced together in one collective."""
        if self.stop_flag is None:
            return self._distributed(tf, self._replica_step)
        fold = self.stop_flag.fold
        run = self._distributed(tf, lambda *window: fold(self._replica_step(*window)))

        def step(*window: Any) -> Any:
            both = run(*window)
            return both[0], both[1]

        return step

    def _distributed(self, tf: Any, replica_fn: Callable) -> Callable:
        """``replica_fn`` on every replica, its results summed across them (one tensor per result)."""
        strategy = self.dist.strategy

        def run(*args: Any) -> Any:
            out = strategy.run(replica_fn, args=args)
            return tf.nest.map_structure(
                lambda v: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None), out
            )

        return run

    def _replica_step(self, *window: Any) -> Any:
        """One optimizer step over a window of micro-batches, on one replica. Returns its share of the
        window's mean loss (the shares sum to the global mean)."""
        tf = self._tf
        model, opt, k = self.model, self.optimizer, len(window)
        variables = model.trainable_variables
        total, grads = 0.0, None
        for x, y in window:
            with tf.GradientTape() as tape:
                out = model(x, training=True)
                loss = tf.nn.compute_average_loss(self.loss_fn(y, out))  # sum / global batch
                scaled = loss / k if k > 1 else loss
                if self.precision.scales_loss:
                    scaled = opt.scale_loss(scaled)
            g = tape.gradient(scaled, variables)
            grads = g if grads is None else [a + b for a, b in zip(grads, g, strict=True)]
            total += loss
        if self.settings.clip_grad_norm is not None and self.dist.replicas > 1:
            # The global norm is the all-reduced gradient's; apply_gradients sums again, hence / replicas.
            ctx = tf.distribute.get_replica_context()
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            grads, _ = tf.clip_by_global_norm(grads, self.settings.clip_grad_norm)
            grads = [g / self.dist.replicas for g in grads]
        opt.apply_gradients(zip(grads, variables, strict=True))
        return total / k

    def _replica_val(self, x: Any, y: Any) -> Any:
        """Sums over this replica's batch: loss, samples, right predictions and predictions (per token for a
        sequence model, so accuracy counts tokens as torch's does)."""
        tf = self._tf
        out = self.model(x, training=False)
        losses = tf.cast(self.loss_fn(y, out), tf.float32)
        n = tf.cast(tf.shape(losses)[0], tf.float32)
        if self.correct_fn is None:
            return tf.reduce_sum(losses), n, n * 0, n * 0
        right = tf.cast(self.correct_fn(y, out), tf.float32)
        return tf.reduce_sum(losses), n, tf.reduce_sum(right), tf.cast(tf.size(right), tf.float32)

    # -- metrics --------------------------------------------------------------------------------------
    def _read_losses(self) -> Any:
        """The unread losses (one host sync; None if none), kept for the next log; NaN/inf stops the fit."""
        if not self._losses:
            return None
        values = self._tf.stack(self._losses).numpy()
        # fp16-mixed: the loss scaler skips non-finite steps instead (as on torch).
        if not math.isfinite(float(values.mean())) and not self.precision.scales_loss:
            first = next(st for st, v in zip(self._loss_steps, values, strict=True) if not math.isfinite(v))
            raise NonFiniteLossError(
                f"the training loss became NaN/inf at step {first}; the fit stopped. Lower the learning "
                "rate, set clip_grad_norm, or check the data for NaN/inf (fp16-mixed would skip such steps)"
            )
        return values

    def _lr(self) -> float:
        opt = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        # Keras gives a schedule's value at the current iteration; read outside any replica context.
        return float(self._tf.convert_to_tensor(opt.learning_rate))

    def validate(self, track: Callable[[Iterable[Any]], Iterator[Any]]) -> dict[str, float]:
        totals = [0.0, 0.0, 0.0, 0.0]  # loss sum, samples, right, predictions
        for batch in track(self.val_data):
            totals = [a + b for a, b in zip(totals, self.val_step(*batch), strict=True)]
        loss_sum, count, right, predictions = (float(t) for t in totals)
        if not count:
            return {}
        metrics = {"val_loss": loss_sum / count}
        if self.correct_fn is not None and predictions:
            metrics["val_accuracy"] = right / predictions
        return metrics

    # -- set-up and results ---------------------------------------------------------------------------
    def _default_callbacks(self) -> list[Callback]:
        return default_callbacks(self.settings, self.is_rank_zero)

    def fit_context(self) -> FitContext:
        """What the callbacks know of this fit (TensorFlow's /GPU:N is CUDA's visible device N)."""
        on_gpu = self.device.startswith("/GPU")
        return FitContext(
            engine="tensorflow",
            device=self.device,
            device_type="cuda" if on_gpu else "cpu",
            device_index=int(self.device.rpartition(":")[2]) if on_gpu else None,
            rank=self.dist.rank,
            world_size=self.dist.num_workers,
            settings=self.settings,
            state=self.state,
            resumed_from=self.resumed_from,
            trajectory=self.trajectory,
            agree_stop=self.stop_flag.lagged if self.stop_flag is not None else None,
        )

    def synchronize(self) -> None:
        if self.device.startswith("/GPU"):
            self._tf.test.experimental.sync_devices()

    def reset_peak_memory(self) -> None:
        tf = self._tf
        if self.device.startswith("/GPU"):
            tf.config.experimental.reset_memory_stats(self.device.lstrip("/"))
        else:
            from gpulab.hardware.host_memory import reset_peak_rss

            reset_peak_rss()

    def memory(self) -> tuple[int, dict[str, Any]]:
        tf = self._tf
        if self.device.startswith("/GPU"):
            info = tf.config.experimental.get_memory_info(self.device.lstrip("/"))
            return int(info["peak"]), {"current_bytes": int(info["current"]), "peak_bytes": int(info["peak"])}
        from gpulab.hardware.host_memory import host_memory_json, peak_rss_bytes

        return peak_rss_bytes(), host_memory_json()

    def result_facts(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "precision": self.precision.name,
            "strategy": self.dist.name,
            "world_size": self.dist.num_workers,
            "batch_size": self.settings.batch_size,
        }

    def result_extras(self) -> dict[str, Any]:
        tf = self._tf
        return {
            "channels_last": "on (TensorFlow's own layout: its images are NHWC)",  # torch's summary field
            "runtime": {
                "engine": "tensorflow",
                "tensorflow": tf.__version__,
                "device": self.device,
                "precision": self.precision.name,
                "keras_policy": self.precision.policy,
                "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
                "loss_scale": float(self.optimizer.dynamic_scale) if self.precision.scales_loss else None,
                "strategy": self.dist.name,
                "replicas": self.dist.replicas,
                "xla": self.step.compiled,
                **self.memory_settings,
            },
        }

    def skipped_steps(self) -> int:
        opt = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        return self.state.global_step - int(opt.iterations) if self.precision.scales_loss else 0

    def compiled(self) -> bool:
        return bool(self.step.compiled)

    describe_batch = staticmethod(describe_batch)
    describe_error = staticmethod(describe_error)
    is_out_of_memory = staticmethod(is_out_of_memory)
