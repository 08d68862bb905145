"""``Trainer``: a short training loop on ``Runtime`` that reads top to bottom.

fit = set up (runtime, model, data, schedule) -> for each epoch: train steps, validate -> result.
Nothing here branches on device, precision or strategy: the Runtime owns those differences.
Metrics stay on the device and are read every ``log_every`` steps, so steps never wait on the host.

With several ranks the same loop runs on each: the data is sharded by rank, logged metrics are
all-reduced, only rank 0 prints and writes shared files, and a NaN loss stops every rank together.

What a fit measures goes to ``FitResult.extras``: the time spent waiting for data, memory, MFU and GPU
utilisation (callbacks), and from those the diagnosis of what bounds the run and how to fix it.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from gpulab.checkpoint.io import one_line
from gpulab.config import TrainerSettings, check_engine, parse_config
from gpulab.core.callbacks import Callback, CallbackList, default_callbacks
from gpulab.core.context import FitContext
from gpulab.core.preemption import preemption_report
from gpulab.core.state import FitResult, FitState
from gpulab.distributed.debug_dumps import direct_dumps_to
from gpulab.engines.torch.data import LoaderPolicy, is_stream, len_or_none, make_loader, stop_together
from gpulab.engines.torch.distributed.process_group import launched_world_size
from gpulab.engines.torch.measure.timers import DataWaitMeter
from gpulab.engines.torch.runtime import Runtime
from gpulab.engines.torch.runtime.batch_search import search_batch_size
from gpulab.engines.torch.runtime.compile import (
    CompileFallback,
    apply_activation_checkpointing,
    compile_model,
)
from gpulab.engines.torch.runtime.compile_check import FirstStepCheck
from gpulab.engines.torch.runtime.memory import (
    memory_limit_bytes,
    memory_stats,
    peak_memory_bytes,
    reset_peak_memory,
    set_memory_limit,
    synchronize,
)
from gpulab.engines.torch.runtime.memory_estimate import holds_shards
from gpulab.engines.torch.runtime.memory_format import (
    channels_last_batch,
    has_conv2d,
    resolve_channels_last,
    to_channels_last,
)
from gpulab.engines.torch.runtime.metrics import LossWindow, Mean
from gpulab.engines.torch.runtime.recompiles import RecompileWatch
from gpulab.engines.torch.runtime.signature import Signature
from gpulab.engines.torch.runtime.step_call import (
    LossCall,
    accuracy_counts,
    call_model,
    check_batch,
    samples_in,
    shifts_labels,
    step_loss,
)
from gpulab.engines.torch.train import NAME, THREADS_HINT
from gpulab.engines.torch.train.checkpointing import Checkpointer, training_rng_untouched
from gpulab.engines.torch.train.failure import FitPosition, add_failure_note, failure_line, is_out_of_memory
from gpulab.engines.torch.train.graph_step import WholeStepGraph, make_graph_step
from gpulab.engines.torch.train.items import item_counter, scale_gradients
from gpulab.engines.torch.train.mfu import MfuCallback
from gpulab.engines.torch.train.nonfinite_watch import NonFiniteWatch, check_parameters
from gpulab.engines.torch.train.oom_step import GuardedStep
from gpulab.errors import ConfigError, DataError, GpulabError, GpulabWarning, ValidationFailed
from gpulab.hardware.load import OtherCpuLoad, load_during
from gpulab.hardware.native_dtypes import native_dtypes
from gpulab.measure.diagnosis import Diagnosis, diagnose_fit


class Trainer:
    """``Trainer(**settings).fit(model, train_data, loss_fn=..., optimizer=...) -> FitResult``.

    How a batch reaches the model and the loss (tuples, dicts as keyword arguments, a loss the model
    computed itself) is ``gpulab.engines.torch.runtime.step_call``'s rule.

    ``settings`` are those of ``gpulab.config.TrainerSettings`` (an unknown one is a ConfigError);
    ``callbacks`` are added after the built-in ones; ``runtime`` replaces the one built from settings.
    ``trajectory``: anything else that changes what the run computes (``gpulab train`` passes the recipe
    and its ``options``); it is stored in checkpoints and a resume that changes it is refused.
    """

    graph_backend: Any = None  # cuda_graph's capture and replay (graph_step.py); None: torch.cuda's

    def __init__(
        self,
        *,
        callbacks: Sequence[Callback] = (),
        runtime: Runtime | None = None,
        trajectory: dict[str, Any] | None = None,
        **settings: Any,
    ):
        self.requested = parse_config(TrainerSettings, settings)
        if self.requested.engine != NAME:
            raise ConfigError(
                f"Trainer is the torch engine; for engine {self.requested.engine!r} use "
                "gpulab.engines.tensorflow.TfTrainer (or gpulab train --engine tensorflow)"
            )
        check_engine(self.requested)
        self.trajectory = dict(trajectory or {})
        self.settings = self.requested  # during a fit: with batch_size: auto resolved to a number
        self._extra_callbacks = list(callbacks)
        self._given_runtime = runtime
        self.runtime = runtime
        self.state = FitState()
        self.history: list[dict[str, Any]] = []
        self.resumed_from = None  # the checkpoint path a fit resumed from
        self.last_checkpoint = None  # the checkpoint this fit wrote last
        self._position = FitPosition()  # named under the traceback if the fit fails (failure.py)

    # -- the story ------------------------------------------------------------------------------------
    def fit(
        self,
        model: nn.Module,
        train_data: Any,
        *,
        loss_fn: Callable | None = None,
        optimizer: Any,
        val_data: Any = None,
        scheduler: Any = None,
        resume: str | None = None,
    ) -> FitResult:
        """Train; ``resume`` is ``"latest"`` (under the checkpoint directory), a checkpoint's path, or
        ``"auto"`` (``latest`` when the checkpoint directory holds a checkpoint, else a fresh start).

        ``loss_fn``: ``(output, target)``, ``(output, batch)`` when it has a parameter named ``batch``, or
        None when the model's output carries its loss (see ``gpulab.engines.torch.runtime.step_call``).
        ``optimizer``: an Optimizer, or a factory called with the model when its parameter is named
        ``model`` (for weight-decay groups by parameter name), else with ``model.parameters()``.

        A Runtime the Trainer built itself is torn down at the end (process-wide flags such as TF32 are
        restored); one passed in by the caller is left as it is.
        """
        self.settings, self.extras = self.requested, {}
        self.runtime = self._given_runtime or self._make_runtime()
        self.is_rank_zero = self.runtime.is_rank_zero
        self.callbacks = None
        try:
            with _memory_limit(self.runtime.device, self.settings.memory_limit):
                train, val = self._setup(model, train_data, val_data, loss_fn, optimizer, scheduler, resume)
                if self.resumed_from is not None and self._done():
                    return self._nothing_left()
                return self._loop(train, val)
        except BaseException as error:
            if self.callbacks is not None:
                self.callbacks.on_exception(self, self.state, error)
                self._note_failure(error)
            raise
        finally:
            if self._given_runtime is None:
                self.runtime.teardown()

    def _setup(self, model, train_data, val_data, loss_fn, optimizer, scheduler, resume):
        s, rt = self.settings, self.runtime
        rt.seed_everything(s.seed, s.deterministic)
        apply_activation_checkpointing(model, s.activation_checkpointing)
        self._setup_channels_last(model)
        self.model, self.optimizer = rt.setup(model, optimizer)
        self.forward = (
            compile_model(self.model, s.compile_mode, s.compile_backend, check=s.compile_check)
            if s.compile
            else self.model
        )
        self.loss_fn = loss_fn
        # How a batch becomes forward's arguments and the output the predictions (signature.py), and how
        # the loss is taken from the output (step_call.py).
        self.signature = Signature(model, s.model_inputs, s.model_output)
        self.loss = LossCall(loss_fn, self.signature)
        # Forward and loss as one compiled region, where the model is the user's own module: a DDP or
        # DataParallel wrapper is compiled as torch documents it (the wrapper itself), not inside another
        # function, whose trace would break at the wrapper's forward.
        if isinstance(self.forward, CompileFallback) and self.model is model:
            self.forward.fuse_loss(self.loss)
        self._shift_labels = shifts_labels(model)  # a causal LM's accuracy: logits at t vs label t+1
        # A mean over items (tokens): micro-batches and ranks weighed by their items (items.py).
        several = s.accumulate > 1 or rt.world_size > 1
        self._count_items = item_counter(model, loss_fn, self._shift_labels) if several else None
        self._window_items: torch.Tensor | None = None
        self._micro_items: torch.Tensor | None = None  # the last micro-batch's items: its loss's weight
        s = self.settings = self._resolve_batch_size(train_data)
        # micro_batch: auto -- each loader batch is a whole step, which the OOM guard splits (oom_step.py).
        self.guarded = GuardedStep(self) if s.micro_batch == "auto" else None
        self._forward_backward = self.guarded or self._accumulate
        self._compile_check = FirstStepCheck(s.compile_check, self.forward, rt.world_size, bool(self.guarded))
        loader_batch, per_step = (
            (s.batch_size * s.accumulate, 1) if self.guarded else (s.batch_size, s.accumulate)
        )
        policy = LoaderPolicy.for_device(rt.device).overridden(
            num_workers=s.num_workers, pin_memory=s.pin_memory, prefetch_factor=s.prefetch_factor
        )
        # each rank its share, loaded as the policy says
        shard = {"device": rt.device, "rank": rt.rank, "world_size": rt.world_size, "policy": policy}
        # A stream keeps its own order (an IterableDataset cannot be shuffled by the loader).
        shuffle = not is_stream(train_data)
        train = make_loader(train_data, batch_size=loader_batch, shuffle=shuffle, seed=s.seed, **shard)
        val = None
        if val_data is not None:
            val = make_loader(val_data, batch_size=s.batch_size, shuffle=False, **shard)
        self.train_source = train
        self._batches_per_epoch = len_or_none(train)  # None: a stream (see gpulab.engines.torch.data.streams)
        self.state = self._plan(self._batches_per_epoch, per_step)
        self.scheduler = _build_scheduler(scheduler, self.optimizer, self.state.total_steps)
        self.checkpointer = self._make_checkpointer()
        if resume:
            if self.checkpointer is None:
                raise ConfigError("resume needs a checkpoint directory: set out_dir or checkpoint_dir")
            resume = self.checkpointer.choose(resume, rt.is_rank_zero)  # auto/none yet: None, fresh
        if resume:
            self.resumed_from = self.checkpointer.resume(self, resume, force=s.force_resume)
            self.extras["resumed_from"] = str(self.resumed_from)
        self.callbacks = CallbackList(self._default_callbacks() + self._extra_callbacks)
        self._graph = self._setup_graph()
        return train, val

    def _setup_graph(self) -> WholeStepGraph | None:
        """``cuda_graph``: the whole step as one graph where this fit allows it; one line says why not."""
        if self.settings.cuda_graph is False:
            return None
        graph, line = make_graph_step(self, self.graph_backend)
        if not line:  # auto on a device without graphs (a CPU): eager, nothing to say
            return None
        if graph is None:
            self.extras["cuda_graph"] = {"mode": "eager", "reason": line}
        if (graph is None or self.settings.cuda_graph is True) and self.settings.progress is not False:
            self.runtime.print(line)  # auto with a graph: its measured choice is the line, later
        return graph

    def _setup_channels_last(self, model: nn.Module) -> None:
        """Convert the model now (before the optimizer holds its parameters) and each 4-D input batch in
        the loop; say what was chosen, in summary.json and in one line for a conv net."""
        on, why = resolve_channels_last(self.settings.channels_last, model, self.runtime.device)
        self._channels_last = on
        self.extras["channels_last"] = why
        if on:
            to_channels_last(model)
        if (on or has_conv2d(model)) and self.settings.progress is not False:  # progress=False: quiet
            self.runtime.print(f"channels_last: {why}")

    def _loop(self, train, val) -> FitResult:
        """Epochs of steps, validation at each epoch end (and at the last step), checkpoints, result."""
        state, callbacks = self.state, self.callbacks
        reset_peak_memory(self.runtime.device)
        self._clock = _Clock(self.runtime.device)
        self._recompiles = RecompileWatch(self.settings.compile, self._clock.exclude)
        self._data_wait = DataWaitMeter()
        self._others = OtherCpuLoad()  # did other processes compete for the CPU during the run?
        val_metrics: dict[str, float] = {}
        self.context = self._context()
        callbacks.on_fit_start(self, state)
        while not self._done():
            train.set_epoch(state.epoch)
            ran_out = self._train_epoch(train)
            self._position.between()
            n = self._batches_per_epoch
            epoch_complete = ran_out or (n is not None and state.batch_in_epoch >= n)
            # Preempted (stop_signal): no final log or validation, only the checkpoint, whose loss window
            # stays whole so that the resumed run logs what this one would have.
            finishing = self._done() and state.stop_signal is None
            if finishing:
                self._flush_log()  # before the epoch counter moves, so the record names its own epoch
            # Checkpoint first, then validate: a validation that fails (a user's metric, an eval path
            # that differs) never costs the epoch's training.
            # Checkpoints and validation are not training: their time is left out of the clock, so
            # samples/s, MFU and the diagnosis describe the steps (a compiled GPT-2-small run once read
            # "host-bound" at 8 % MFU, its validations and checkpoint writes counted as idle steps).
            if epoch_complete:
                with self._at_next_epoch(), self._clock.excluding():  # resumes at the next epoch's start
                    self._save_checkpoint()
            elif finishing and self.checkpointer is not None and not self._saved_this_step():
                with self._clock.excluding():
                    self._save_checkpoint()
            if (epoch_complete or finishing) and val is not None:
                with self._clock.excluding():
                    val_metrics = self._validate_after_save(val)
            if epoch_complete:
                callbacks.on_epoch_end(self, state)
                state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        if state.stop_signal is None:
            self._flush_log()
        if self.checkpointer is not None and self.checkpointer.last_saved_step != state.global_step:
            self._save_checkpoint()
        result = self._result(val_metrics)
        if self.settings.compile and self.settings.progress is not False:
            self.runtime.print(self._recompiles.line())
        callbacks.on_fit_end(self, state, result)  # MFU and NVML callbacks add their reports to extras
        result.extras["diagnosis"] = self._diagnose(result).to_json()
        return result

    # -- steps ----------------------------------------------------------------------------------------
    def _train_epoch(self, train) -> bool:
        """Train on this epoch's remaining batches; True when they ran out (False: the fit is done)."""
        state, n = self.state, self._batches_per_epoch
        self.model.train()
        batches = self._data_wait.wrap(train)
        if n is None and self.runtime.world_size > 1:  # streams end unevenly: ranks stop together
            batches = stop_together(batches, self.runtime.reduce_flag)
        start = state.batch_in_epoch
        graph = self._graph
        for batch in self._position.track("training", batches, start):
            batch = check_batch(batch)
            if self._channels_last:
                batch = channels_last_batch(batch)
            if graph is not None and not self._compile_check.pending:  # one batch is one step here
                with self._recompiles.watch():
                    loss = graph.step(
                        batch, last_in_epoch=None if n is None else state.batch_in_epoch == n - 1
                    )
                self._train_loss.add(loss, state.global_step + 1)
                state.batch_in_epoch += 1
                state.samples_seen += samples_in(batch)
                self._after_step()
                if self._done():
                    return False
                continue
            with self._recompiles.watch():
                loss, steps_now = self._forward_backward(batch, n)  # _accumulate, or the OOM-guarded step
            # keeps the tensor: no kernel, no sync; a mean over items is weighted by them in the log
            self._train_loss.add(loss, state.global_step + 1, self._micro_items)
            state.batch_in_epoch += 1
            state.samples_seen += samples_in(batch)
            if steps_now:
                self._optimizer_step()
                if self._done():
                    return False
        if n is None:
            self._end_of_stream(state.batch_in_epoch - start)
        return True

    def _end_of_stream(self, batches: int) -> None:
        """A stream's epoch ended: refuse one that gave nothing (the fit would never reach max_steps), and
        drop a partial accumulation window -- its micro-batches ran under no_sync, so dropping them needs
        no collective, where stepping on them would."""
        if batches == 0:
            raise DataError(
                f"the training stream gave no batch in epoch {self.state.epoch}, so max_steps "
                f"({self.state.total_steps}) cannot be reached; make its __iter__ start over on each pass"
            )
        pending = self.state.batch_in_epoch % self.settings.accumulate
        if pending:
            self.optimizer.zero_grad(set_to_none=True)
            self._window_items = None
            if self.runtime.is_rank_zero:
                warnings.warn(
                    f"the training stream ended {pending} micro-batch(es) into an accumulation window of "
                    f"{self.settings.accumulate}: their gradients were dropped (no optimizer step)",
                    stacklevel=2,
                )

    def _accumulate(self, batch: Any, n: int | None) -> tuple[torch.Tensor, bool]:
        """Forward and backward of one micro-batch; True when it completes the accumulation window."""
        s, rt, i = self.settings, self.runtime, self.state.batch_in_epoch
        # The last window of an epoch may be short (a stream's length is unknown: its windows are full).
        window = s.accumulate if n is None else min(s.accumulate, n - (i - i % s.accumulate))
        steps_now = (i % s.accumulate) == window - 1

        def step(forward) -> torch.Tensor:
            with rt.autocast():
                loss = step_loss(forward, self.loss, batch)
            if self._count_items is None:
                rt.backward(loss / window if window > 1 else loss)  # the window's mean, as one big batch
                return loss
            items = self._count_items(batch)  # the sum now; divided by the window's items at the step
            self._micro_items = items
            self._window_items = items if self._window_items is None else self._window_items + items
            rt.backward(loss * items)
            return loss

        with rt.no_sync(self.model, enabled=not steps_now):
            if self._compile_check.pending:  # the fit's first micro-batch, compiled and eager compared
                return self._compile_check.run(self.model, self.forward, step), steps_now
            return step(self.forward), steps_now

    def _optimizer_step(self) -> None:
        s, rt = self.settings, self.runtime
        if self._window_items is not None:  # the large batch's mean: one all-reduce of one number
            items = (
                rt.all_reduce(self._window_items.float(), "sum") if rt.world_size > 1 else self._window_items
            )
            scale_gradients(self.model.parameters(), rt.world_size / items.clamp(min=1))
            self._window_items = None
        if s.clip_grad_norm is not None:
            rt.clip_grad_norm(self.model, self.optimizer, s.clip_grad_norm)
        rt.step(self.optimizer, self.scheduler)
        self._after_step()

    def _after_step(self) -> None:
        """What follows every optimizer step, eager or replayed: counters, clock, log, checkpoint."""
        s, state = self.settings, self.state
        state.global_step += 1
        if self._clock.t0 is None:
            self._clock.start(state.samples_seen)  # the first step pays compile and autotune: not timed
            self._recompiles.armed = True  # later compilations are left out of the clock, and counted
            self._data_wait.seconds = 0.0  # nor its data (worker start-up): waits count from here too
            state.first_loss = self._train_loss.mean()  # the clock just synchronised: no extra wait
        if state.global_step % s.log_every == 0:
            self._flush_log()
        if self.checkpointer is not None and self.checkpointer.due(state.global_step):
            self._save_checkpoint()
        self.callbacks.on_step_end(self, state)

    def _flush_log(self) -> None:
        """Read the training metrics (one host sync) and hand them to the loggers."""
        rt, state = self.runtime, self.state
        loss = self._train_loss.mean(reduce=rt.all_reduce)
        if loss is None:
            return
        # A NaN/inf loss on any rank stops every rank here, together.
        self._nonfinite.check(rt, loss, self._train_loss.first_bad_step)
        self._train_loss.reset()
        lr = self.optimizer.param_groups[0]["lr"]  # a device tensor under cuda_graph: read at the log only
        metrics = {"loss": loss, "lr": float(lr) if isinstance(lr, torch.Tensor) else lr}
        speed = self._clock.interval_rate(state.samples_seen)
        if speed is not None:
            metrics["samples_per_s"] = speed * rt.world_size
        state.metrics.update(metrics)
        if rt.is_rank_zero:
            self.callbacks.on_log(self, state, metrics)  # may add to metrics (mfu, GPU utilisation) ...
        self.history.append({"step": state.global_step, "epoch": state.epoch, **metrics})  # ... kept here

    @contextlib.contextmanager
    def _at_next_epoch(self) -> Iterator[None]:
        """The state as the next epoch starts (what an epoch-end checkpoint records), then back: validation
        and ``on_epoch_end`` still see the epoch that ended."""
        state = self.state
        kept = state.epoch, state.batch_in_epoch
        state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        try:
            yield
        finally:
            state.epoch, state.batch_in_epoch = kept

    def _validate_after_save(self, val) -> dict[str, float]:
        """Validation after the checkpoint: it draws nothing from the training's random streams (the
        checkpoint holds them as they are, and a resumed run continues as this one does); a failure
        names itself and the checkpoint that keeps the training; a best metric is recorded for
        ``keep_best`` now that it is known."""
        try:
            with training_rng_untouched(self):
                metrics = self._validate(val)
        except Exception as exc:
            raise ValidationFailed(self._validation_failure(exc)) from exc
        if self._saved_this_step() and self.is_rank_zero and self.settings.checkpoints:
            self.checkpointer.record_validation(self.state.global_step, metrics)
        return metrics

    def _saved_this_step(self) -> bool:
        return self.checkpointer is not None and self.checkpointer.last_saved_step == self.state.global_step

    def _validation_failure(self, exc: BaseException) -> str:
        state = self.state
        where = (
            f"checkpoint {self.last_checkpoint} holds the training up to it: fix the validation, then "
            "continue with --resume latest"
            if self._saved_this_step() and self.last_checkpoint is not None
            else "no checkpoint holds this step (checkpoints are off)"
        )
        return (
            f"validation failed at step {state.global_step} (epoch {state.epoch}): {type(exc).__name__}: "
            f"{one_line(exc)}; {where}"
        )

    @torch.inference_mode()
    def _validate(self, val) -> dict[str, float]:
        rt = self.runtime
        self.model.eval()
        loss, correct, count = Mean(), None, 0
        for batch in self._position.track("validation", val):
            batch = check_batch(batch)
            if self._channels_last:
                batch = channels_last_batch(batch)
            with rt.autocast(), self._recompiles.watch(validation=True):
                out = call_model(self.forward, batch, self.signature)
                loss.add(self.loss(out, batch), weight=samples_in(batch))
            counts = accuracy_counts(out, batch, shift=self._shift_labels, signature=self.signature)
            if counts is not None:
                correct = counts[0] if correct is None else correct + counts[0]
                count = count + counts[1]
        self.model.train()
        metrics = {"val_loss": loss.read(reduce=rt.all_reduce)}
        if correct is not None:
            metrics["val_accuracy"] = float(rt.all_reduce(correct.float() / count).item())
        self.state.metrics.update(metrics)
        self.history.append({"step": self.state.global_step, "epoch": self.state.epoch, **metrics})
        if rt.is_rank_zero:
            self.callbacks.on_validation_end(self, self.state, metrics)
        return metrics

    # -- set-up and results ---------------------------------------------------------------------------
    def _make_runtime(self) -> Runtime:
        s = self.settings
        if s.out_dir and launched_world_size() > 1:  # NCCL's flight-recorder dumps go with the run
            direct_dumps_to(s.out_dir)
        return Runtime.from_settings(s)

    def _loaders_batch_size(self, loader: DataLoader) -> TrainerSettings:
        """A user's DataLoader batches its own data: the settings say its batch size (what summary.json and
        checkpoints record), and a batch_size set to another number is told in one line."""
        s, own = self.settings, loader.batch_size  # None: a batch_sampler decides
        if s.batch_size == "auto":
            raise ConfigError(
                "batch_size: auto needs a Dataset or tensors; a DataLoader keeps its own batch size"
            )
        if own is None or own == s.batch_size:
            return s
        if "batch_size" in self.requested.model_fields_set and self.runtime.is_rank_zero:
            warnings.warn(
                f"batch_size {s.batch_size} does not apply to the DataLoader given, which batches its own "
                f"data ({own} a batch): training on batches of {own}; build the DataLoader with "
                f"batch_size={s.batch_size}, or give its Dataset for gpulab to batch",
                GpulabWarning,
                stacklevel=4,
            )
        return s.model_copy(update={"batch_size": own})

    def _resolve_batch_size(self, train_data: Any) -> TrainerSettings:
        """The settings with ``batch_size: auto`` replaced by the largest batch whose real step fits
        (under ``memory_limit``; checkpoints then record the number, so a resume that would pick
        another is refused)."""
        s = self.settings
        if isinstance(train_data, DataLoader):
            return self._loaders_batch_size(train_data)
        if s.batch_size != "auto":
            return s
        if is_stream(train_data):
            raise ConfigError("batch_size: auto needs a map-style Dataset or tensors, not an IterableDataset")
        if holds_shards(self.model):
            raise ConfigError("batch_size: auto cannot trace a model sharded by fsdp2 yet: give a number")
        search = search_batch_size(
            self.runtime,
            self.model,
            self.optimizer,
            self.loss_fn,
            train_data,
            step=lambda forward, batch: step_loss(forward, self.loss, batch),  # dict batches too
        )
        self.extras["batch_search"] = search.to_json()
        self.runtime.print(f"batch_size: auto picked {search.batch_size} ({search.reason})")  # else unsaid
        return s.model_copy(update={"batch_size": search.batch_size})

    def _plan(self, batches_per_epoch: int | None, batches_per_step: int) -> FitState:
        self._train_loss = LossWindow()
        self._nonfinite = NonFiniteWatch(enabled=not self.runtime.skips_nonfinite_steps)
        if batches_per_epoch is None:
            if not self.settings.max_steps:
                raise ConfigError(
                    "the training data has no length (an IterableDataset): set max_steps; epochs then "
                    "count its passes"
                )
            return FitState(total_steps=self.settings.max_steps)
        if batches_per_epoch == 0:
            raise DataError(
                "training data gives no batch (empty, or fewer samples than batch_size with drop_last)"
            )
        steps_per_epoch = math.ceil(batches_per_epoch / batches_per_step)
        total = self.settings.max_steps or self.settings.epochs * steps_per_epoch
        return FitState(total_steps=total, steps_per_epoch=steps_per_epoch)

    def _make_checkpointer(self) -> Checkpointer | None:
        s = self.settings
        root = s.checkpoint_dir or (f"{s.out_dir}/checkpoints" if s.out_dir else None)
        return None if root is None else Checkpointer(root, s.checkpoint_every, s.keep_last, s.keep_best)

    def _save_checkpoint(self) -> None:
        if self.checkpointer is not None and self.settings.checkpoints:
            self._refuse_nonfinite()
            self.last_checkpoint = self.checkpointer.save(self)

    def _refuse_nonfinite(self) -> None:
        """Never checkpoint NaN: the unread loss window and the parameters must be finite (every rank
        stops together otherwise; the loss window is read without being reset, so logging is unchanged)."""
        rt, step = self.runtime, self.state.global_step
        loss = self._train_loss.mean(reduce=rt.all_reduce)
        if loss is not None:
            note = f"; checkpoint {step} was not written"
            self._nonfinite.check(rt, loss, self._train_loss.first_bad_step, note=note)
        check_parameters(rt, self.model, step)

    def train_loss_state(self) -> dict[str, Any]:
        """The running training-loss window, so a resumed run logs the same numbers."""
        return self._train_loss.state_dict()

    def load_train_loss_state(self, saved: dict[str, Any] | None) -> None:
        self._train_loss.load_state_dict(saved, self.runtime.device)

    def micro_batch_state(self) -> dict[str, Any] | None:
        """The OOM guard's split (``micro_batch: auto``), so a resumed run keeps the smaller micro-batch."""
        return self.guarded.state_dict() if self.guarded is not None else None

    def load_micro_batch_state(self, saved: dict[str, Any] | None) -> None:
        if saved and self.guarded is not None:
            self.guarded.load_state_dict(saved)

    def _note_failure(self, error: BaseException) -> None:
        """Under a bug's traceback (a user's forward raising, a batch of another shape, memory running
        out), one line naming the step, the batch and the checkpoint to resume from. A GpulabError is
        already one line that says what to do; an interrupt is not a failure. A failed validation is
        noted on the user's own error under it (the traceback the CLI prints): its batch and shapes."""
        if isinstance(error, ValidationFailed) and isinstance(error.__cause__, Exception):
            error = error.__cause__
        if not isinstance(error, Exception) or isinstance(error, GpulabError):
            return
        try:
            line = failure_line(
                self._position,
                step=self.state.global_step,
                epoch=self.state.epoch,
                batches_per_epoch=self._batches_per_epoch,
                checkpoint=self.last_checkpoint or self.resumed_from,
                checkpoints_off=self._checkpoints_off(),
                out_of_memory=is_out_of_memory(error),
            )
        except Exception:  # an odd batch we cannot describe: never put our error in place of the user's
            return
        add_failure_note(error, line)

    def _checkpoints_off(self) -> str | None:
        if self.checkpointer is None:
            return "no out_dir or checkpoint_dir to write them to"
        return None if self.settings.checkpoints else "checkpoints are off"

    def _done(self) -> bool:
        return self.state.global_step >= self.state.total_steps or self.state.should_stop

    def _default_callbacks(self) -> list[Callback]:
        reporters: list[Callback] = [MfuCallback()] if self.settings.mfu else []
        return default_callbacks(self.settings, self.runtime.is_rank_zero, reporters)

    def _context(self) -> FitContext:
        rt = self.runtime
        return FitContext(
            engine=NAME,
            device=str(rt.device),
            device_type=rt.device.type,
            device_index=rt.device.index,
            rank=rt.rank,
            world_size=rt.world_size,
            settings=self.settings,
            state=self.state,
            resumed_from=self.resumed_from,
            trajectory=self.trajectory,
            agree_stop=rt.lagged_flag,
        )

    def _result(self, val_metrics: dict[str, float]) -> FitResult:
        rt, state = self.runtime, self.state
        seconds, rate = self._clock.total(state.samples_seen)
        return FitResult(
            **self._where_and_how_far(),
            final_loss=state.metrics.get("loss"),
            samples_per_s=None if rate is None else rate * rt.world_size,
            peak_memory_bytes=peak_memory_bytes(rt.device),
            train_seconds=seconds,
            val_loss=val_metrics.get("val_loss"),
            accuracy=val_metrics.get("val_accuracy"),
            skipped_steps=int(getattr(rt.precision, "skipped_steps", 0)),
            compiled=bool(self.settings.compile and not getattr(self.forward, "fell_back", False)),
            history=self.history,
            extras={
                **self.extras,
                "runtime": rt.describe(),  # what was chosen and why (device, precision, optimizer kernels)
                "data_wait_s": self._data_wait.seconds,
                # left out of samples_per_s and MFU: checkpoints, validation, recompiles after step 1
                "untimed_s": self._clock.excluded,
                "memory": memory_stats(rt.device).to_json(),
                "machine_load": load_during(
                    self._others, on_cpu=rt.device.type == "cpu", threads_hint=THREADS_HINT
                ),
                **({"oom": self.guarded.summary()} if self.guarded is not None else {}),
                # recompiles after the first step, whose wall time samples_per_s leaves out
                **({"compile": self._compile_report()} if self.settings.compile else {}),
                **({"cuda_graph": self._graph.report()} if self._graph is not None else {}),
                **({"preempted": self._preempted()} if state.stop_signal is not None else {}),
            },
        )

    def _compile_report(self) -> dict:
        """Recompiles after the first step, the first-batch check's verdict, and why it fell back, if so."""
        reason = getattr(self.forward, "reason", None)
        check = self._compile_check.report
        return {
            **self._recompiles.report(),
            **({"check": check} if check else {}),
            **({"fell_back": reason} if reason else {}),
        }

    def _nothing_left(self) -> FitResult:
        """The checkpoint resumed from already reached the planned length: no step, no log, no save.

        The result carries the checkpoint's own figures and ``extras["nothing_to_do"]``, one line saying so
        (``gpulab train`` prints it and leaves summary.json as the finished run wrote it)."""
        state = self.state
        further = (  # a schedule cannot be stretched (see checkpointing.py)
            "its LR schedule is complete: start a new run to train further"
            if self.scheduler is not None
            else "raise max_steps (or epochs) to train further"
        )
        message = (
            f"nothing to do: {self.resumed_from} is at step {state.global_step} of {state.total_steps}; "
            + further
        )
        return FitResult(
            **self._where_and_how_far(),
            final_loss=state.metrics.get("loss"),
            samples_per_s=None,
            peak_memory_bytes=0,
            train_seconds=0.0,
            val_loss=state.metrics.get("val_loss"),
            accuracy=state.metrics.get("val_accuracy"),
            extras={"nothing_to_do": message},
        )

    def _where_and_how_far(self) -> dict[str, Any]:
        """The result's fields every fit has, run or not: device, precision, strategy, progress."""
        rt, state = self.runtime, self.state
        return {
            "device": str(rt.device),
            "precision": rt.precision.name,
            "steps": state.global_step,
            "epochs": state.epoch + (1 if state.batch_in_epoch else 0),
            "strategy": rt.strategy.name,
            "world_size": rt.world_size,
            "batch_size": self.settings.batch_size,
        }

    def _preempted(self) -> dict[str, Any]:
        ckpt = self.checkpointer
        saved = self.last_checkpoint if ckpt and ckpt.last_saved_step == self.state.global_step else None
        return preemption_report(self.state.stop_signal, self.state.global_step, saved)

    def _diagnose(self, result: FitResult) -> Diagnosis:
        """What bounds this run, from its totals and the callbacks' reports."""
        return diagnose_fit(result, self.runtime.device.type, native_dtypes(self.runtime.device))


@contextlib.contextmanager
def _memory_limit(device: torch.device, limit: int | float | None) -> Iterator[None]:
    """``memory_limit`` for the length of a fit: a later fit in this process starts with the limit
    that was in force before."""
    if limit is None:
        yield
        return
    before = memory_limit_bytes(device)
    set_memory_limit(device, limit)
    try:
        yield
    finally:
        set_memory_limit(device, before)


def _build_scheduler(scheduler: Any, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
    """A scheduler object is used as is; a factory is called as ``factory(optimizer, total_steps)``."""
    if scheduler is None or hasattr(scheduler, "step"):
        return scheduler
    return scheduler(optimizer, total_steps)


class _Clock:
    """Wall-clock throughput. The device is synchronised only here, at the start and the end of timing
    and when metrics are read anyway, never inside a step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.t0: float | None = None
        self.samples0 = 0
        self.last_t: float | None = None
        self.last_samples = 0
        self.excluded = self.interval_excluded = 0.0  # seconds left out (recompiles after the first step)

    def exclude(self, seconds: float) -> None:
        self.excluded += seconds
        self.interval_excluded += seconds

    @contextlib.contextmanager
    def excluding(self) -> Iterator[None]:
        """Leave the block's wall time out of the rates (a checkpoint, a validation: once an epoch, so the
        device is synchronised at its edges: the steps queued before it are training time)."""
        if self.t0 is None:  # not timing yet (before the first step, or a resume at the end)
            yield
            return
        synchronize(self.device)
        start, before = time.perf_counter(), self.excluded
        try:
            yield
        finally:
            synchronize(self.device)
            inside = self.excluded - before  # a validation's compilation, already left out
            self.exclude(max(time.perf_counter() - start - inside, 0.0))

    def start(self, samples: int) -> None:
        synchronize(self.device)
        self.t0 = self.last_t = time.perf_counter()
        self.samples0 = self.last_samples = samples

    def interval_rate(self, samples: int) -> float | None:
        if self.last_t is None:
            return None
        now = time.perf_counter()  # the caller just read a metric, so the device is synchronised
        rate = (samples - self.last_samples) / max(now - self.last_t - self.interval_excluded, 1e-9)
        self.last_t, self.last_samples, self.interval_excluded = now, samples, 0.0
        return rate if samples > self.samples0 else None

    def total(self, samples: int) -> tuple[float, float | None]:
        synchronize(self.device)
        if self.t0 is None:
            return 0.0, None
        seconds = time.perf_counter() - self.t0
        done, working = samples - self.samples0, seconds - self.excluded
        return seconds, (done / working if done and working > 0 else None)
