"""``Trainer``: the torch engine's part of the fit whose loop is ``gpulab.core.loop`` (every engine's).

fit = set up (runtime, model, data, schedule) -> the core loop, which calls back here for each micro-batch's
forward and backward, the optimizer step, the logged loss, checkpoints, validation and device facts.
Nothing here branches on device, precision or strategy: the Runtime owns those differences.
Metrics stay on the device and are read every ``log_every`` steps, so steps never wait on the host.

With several ranks the same loop runs on each: the data is sharded by rank, logged metrics are
all-reduced, only rank 0 prints and writes shared files, and a NaN loss stops every rank together.

What a fit measures goes to ``FitResult.extras``: the time spent waiting for data, memory, MFU and GPU
utilisation (callbacks), and from those the diagnosis of what bounds the run and how to fix it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from gpulab.config.schema import TrainerSettings
from gpulab.config.validate import check_engine, engine_checked, trainer_settings_of
from gpulab.core import loop
from gpulab.core.callbacks import Callback, CallbackList, default_callbacks
from gpulab.core.clock import Clock
from gpulab.core.context import FitContext
from gpulab.core.engine_step import EngineStep
from gpulab.core.plan import plan_fit
from gpulab.core.state import FitResult, FitState
from gpulab.distributed.debug_dumps import direct_dumps_to
from gpulab.engines.torch.data import LoaderPolicy, is_stream, len_or_none, make_loader, stop_together
from gpulab.engines.torch.data.worker_release import release_workers
from gpulab.engines.torch.distributed.process_group import launched_world_size
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
from gpulab.engines.torch.train.failure import describe_batch, is_out_of_memory
from gpulab.engines.torch.train.graph_step import WholeStepGraph, make_graph_step
from gpulab.engines.torch.train.items import item_counter
from gpulab.engines.torch.train.mfu import MfuCallback
from gpulab.engines.torch.train.nonfinite_watch import NonFiniteWatch, check_parameters
from gpulab.engines.torch.train.oom_step import GuardedStep
from gpulab.engines.torch.train.saving import Checkpointer, training_rng_untouched
from gpulab.engines.torch.train.step import TorchStep
from gpulab.errors import ConfigError, GpulabWarning
from gpulab.hardware.native_dtypes import native_dtypes


class Trainer(EngineStep):
    """``Trainer(**settings).fit(model, train_data, loss_fn=..., optimizer=...) -> FitResult``.

    How a batch reaches the model and the loss (tuples, dicts as keyword arguments, a loss the model
    computed itself) is ``gpulab.engines.torch.runtime.step_call``'s rule.

    ``settings`` are those of ``gpulab.config.TrainerSettings`` (an unknown one is a ConfigError);
    ``settings=`` takes them validated already (``RunConfig.trainer_settings()``: gpulab's verbs);
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
        settings: TrainerSettings | None = None,
        **given: Any,
    ):
        self.requested = trainer_settings_of(settings, given)
        if self.requested.engine != NAME:
            raise ConfigError(
                f"Trainer is the torch engine; for engine {self.requested.engine!r} use "
                "gpulab.engines.tensorflow.TfTrainer (or gpulab train --engine tensorflow)"
            )
        if not engine_checked(self.requested):  # a run's settings were, by validate_run
            check_engine(self.requested)
        self.trajectory = dict(trajectory or {})
        self.settings = self.requested  # during a fit: with batch_size: auto resolved to a number
        self._extra_callbacks = list(callbacks)
        self._given_runtime = runtime
        self.runtime = runtime
        self.state = FitState()
        self.history: list[dict[str, Any]] = []
        self.resumed_from = None  # the checkpoint path a fit resumed from

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
        try:
            with _memory_limit(self.runtime.device, self.settings.memory_limit):
                return loop.fit(
                    self,
                    lambda: self._setup(model, train_data, val_data, loss_fn, optimizer, scheduler, resume),
                )
        finally:
            for source in (getattr(self, "train_source", None), getattr(self, "_val", None)):
                release_workers(source)  # now, not 10 s later when the garbage collector gets to them
            if self._given_runtime is None:
                self.runtime.teardown()

    def _setup(self, model, train_data, val_data, loss_fn, optimizer, scheduler, resume) -> CallbackList:
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
        s = self.settings = self._resolve_batch_size(train_data)
        # micro_batch: auto -- each loader batch is a whole step, which the OOM guard splits (oom_step.py).
        self.guarded = GuardedStep(self) if s.micro_batch == "auto" else None
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
        train = make_loader(
            train_data,
            batch_size=loader_batch,
            shuffle=shuffle,
            seed=s.seed,
            resume_data=s.resume_data,
            **shard,
        )
        val = None
        if val_data is not None:
            val = make_loader(val_data, batch_size=s.batch_size, shuffle=False, **shard)
        self.train_source, self._val = train, val
        # len_or_none: None for a stream (see gpulab.engines.torch.data.streams)
        self.plan = plan_fit(s, len_or_none(train), per_step)
        self._train_loss = LossWindow()
        self._nonfinite = NonFiniteWatch(enabled=not self.runtime.skips_nonfinite_steps)
        self.state = self.plan.fresh_state()
        self.scheduler = _build_scheduler(scheduler, self.optimizer, self.state.total_steps)
        # The step itself (train/step.py), its routes picked now from the settings.
        self.torch_step = TorchStep(
            rt,
            self.model,
            self.forward,
            self.optimizer,
            self.loss,
            scheduler=self.scheduler,
            clip_grad_norm=s.clip_grad_norm,
            count_items=self._count_items,
        )
        self.checkpointer = self._make_checkpointer()
        if resume:
            if self.checkpointer is None:
                raise ConfigError("resume needs a checkpoint directory: set out_dir or checkpoint_dir")
            resume = self.checkpointer.choose(resume, rt.is_rank_zero)  # auto/none yet: None, fresh
        if resume:
            self.resumed_from = self.checkpointer.resume(self, resume, force=s.force_resume)
            self.extras["resumed_from"] = str(self.resumed_from)
        callbacks = CallbackList(self._default_callbacks() + self._extra_callbacks)
        self._graph = self._setup_graph(callbacks.callbacks)
        self._prepare = _batch_preparation(self._channels_last)
        self._route = self._pick_route()
        return callbacks  # the loop's

    def _pick_route(self) -> Callable[[Any, int, bool], int]:
        """How each micro-batch runs in this fit, chosen once: the whole-step CUDA graph, the OOM-guarded
        whole step (``micro_batch: auto``), or a window's micro-batch; the first goes through
        ``compile_check`` where it is on, which then hands over to the route."""
        if self._graph is not None:
            route = self._graph_step
        elif self.guarded is not None:
            route = self._guarded_step
        else:
            route = functools.partial(self._window_step, micro=self.torch_step.micro)
        if not self._compile_check.pending:
            return route
        step, check = self.torch_step, self._compile_check

        def checked_micro(batch: Any, window: int) -> torch.Tensor:
            return check.run(self.model, self.forward, lambda forward: step.through(forward)(batch, window))

        def checked_first(batch: Any, window: int, closes: bool) -> int:
            self._route = route  # every later micro-batch
            return self._window_step(batch, window, closes, micro=checked_micro)

        return checked_first

    def _setup_graph(self, callbacks: list[Callback]) -> WholeStepGraph | None:
        """``cuda_graph``: the whole step as one graph where this fit allows it (and ``callbacks``: none
        reads tensors every step); one line says why not."""
        if self.settings.cuda_graph is False:
            return None
        graph, line = make_graph_step(self, callbacks, self.graph_backend)
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

    # -- the loop's steps (gpulab.core.loop.EngineStep) ---------------------------------------------------
    def on_loop_start(self, clock: Clock) -> None:
        self._clock = clock
        self._recompiles = RecompileWatch(self.settings.compile, clock.exclude)

    def epoch_batches(self) -> Iterable[Any]:
        self.train_source.set_epoch(self.state.epoch)
        self.model.train()
        if self.plan.batches_per_epoch is None and self.runtime.world_size > 1:  # streams end unevenly:
            return stop_together(self.train_source, self.runtime.reduce_flag)  # ranks stop together
        return self.train_source

    def micro_step(self, batch: Any, window: int, closes: bool) -> int:
        return self._route(batch, window, closes)

    def _graph_step(self, batch: Any, window: int, closes: bool) -> int:
        """The whole step as one CUDA graph (graph_step.py): one batch is one step here."""
        batch = self._prepare(batch)
        n = self.plan.batches_per_epoch
        last = None if n is None else self.state.batch_in_epoch == n - 1
        with self._recompiles.watch():
            loss = self._graph.step(batch, last_in_epoch=last)
        self._train_loss.add(loss, self.state.global_step + 1)
        return samples_in(batch)

    def _guarded_step(self, batch: Any, window: int, closes: bool) -> int:
        """The OOM-guarded whole step (oom_step.py), then the optimizer step."""
        batch = self._prepare(batch)
        with self._recompiles.watch():
            loss, _ = self.guarded(batch, self.plan.batches_per_epoch)
        self._train_loss.add(loss, self.state.global_step + 1, self.torch_step.micro_items)
        if closes:
            self.torch_step.optimizer_step()
        return samples_in(batch)

    def _window_step(self, batch: Any, window: int, closes: bool, *, micro: Callable) -> int:
        """``micro``: forward and backward of one micro-batch of a window of ``window`` (the step's, or
        for the fit's first under ``compile_check``, compiled and eager compared); then the optimizer step
        when the window closes."""
        step = self.torch_step
        batch = self._prepare(batch)
        with self._recompiles.watch(), self.runtime.no_sync(self.model, enabled=not closes):
            loss = micro(batch, window)
        # keeps the tensor: no kernel, no sync; a mean over items is weighted by them in the log
        self._train_loss.add(loss, self.state.global_step + 1, step.micro_items)
        if closes:
            step.optimizer_step()
        return samples_in(batch)

    def drop_window(self) -> None:
        """Its micro-batches ran under no_sync, so dropping them needs no collective."""
        self.torch_step.drop_window()

    def first_step(self) -> float | None:
        self._recompiles.armed = True  # later compilations are left out of the clock, and counted
        return self._train_loss.mean()

    def read_loss(self) -> float | None:
        rt = self.runtime
        loss = self._train_loss.mean(reduce=rt.all_reduce)
        if loss is None:
            return None
        # A NaN/inf loss on any rank stops every rank here, together.
        self._nonfinite.check(rt, loss, self._train_loss.first_bad_step)
        self._train_loss.reset()
        return loss

    def learning_rate(self) -> float:
        lr = self.optimizer.param_groups[0]["lr"]  # a device tensor under cuda_graph: read at the log only
        return float(lr) if isinstance(lr, torch.Tensor) else lr

    def validate(self, track: Callable[[Iterable[Any]], Iterator[Any]]) -> dict[str, float]:
        """It draws nothing from the training's random streams (the checkpoint holds them as they are, and
        a resumed run continues as this one does)."""
        with training_rng_untouched(self):
            return self._validate(track)

    @torch.inference_mode()
    def _validate(self, track: Callable[[Iterable[Any]], Iterator[Any]]) -> dict[str, float]:
        rt = self.runtime
        self.model.eval()
        loss, correct, count = Mean(), None, 0
        for batch in track(self._val):
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
            accuracy = float(rt.all_reduce(correct.float() / count).item())
            if not math.isnan(accuracy):  # 0/0: no batch held labels (a regression's float targets)
                metrics["val_accuracy"] = accuracy
        return metrics

    @property
    def has_validation(self) -> bool:
        return self._val is not None

    @property
    def has_schedule(self) -> bool:
        return self.scheduler is not None

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

    def _make_checkpointer(self) -> Checkpointer | None:
        s = self.settings
        root = s.checkpoint_dir or (f"{s.out_dir}/checkpoints" if s.out_dir else None)
        return None if root is None else Checkpointer(root, s.keep_last, s.keep_best)

    def save_checkpoint(self) -> Path:
        self._refuse_nonfinite()
        return self.checkpointer.save(self)

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
        """The running training-loss window of every rank (summed over them: a collective), so a resumed
        run logs the same numbers with any number of ranks."""
        rt = self.runtime
        total = (lambda sums: rt.all_reduce(sums, "sum")) if rt.world_size > 1 else None
        return self._train_loss.state_dict(reduce=total)

    def load_train_loss_state(self, saved: dict[str, Any] | None) -> None:
        rt = self.runtime
        self._train_loss.load_state_dict(saved, rt.device, holder=rt.is_rank_zero)

    def micro_batch_state(self) -> dict[str, Any] | None:
        """The OOM guard's split (``micro_batch: auto``), so a resumed run keeps the smaller micro-batch."""
        return self.guarded.state_dict() if self.guarded is not None else None

    def load_micro_batch_state(self, saved: dict[str, Any] | None) -> None:
        if saved and self.guarded is not None:
            self.guarded.load_state_dict(saved)

    def _default_callbacks(self) -> list[Callback]:
        reporters: list[Callback] = [MfuCallback()] if self.settings.mfu else []
        return default_callbacks(self.settings, self.runtime.is_rank_zero, reporters)

    def fit_context(self) -> FitContext:
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

    def result_facts(self) -> dict[str, Any]:
        rt = self.runtime
        return {
            "device": str(rt.device),
            "precision": rt.precision.name,
            "strategy": rt.strategy.name,
            "world_size": rt.world_size,
            "batch_size": self.settings.batch_size,
        }

    def result_extras(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime.describe(),  # what was chosen and why (device, precision, kernels)
            **({"oom": self.guarded.summary()} if self.guarded is not None else {}),
            # recompiles after the first step, whose wall time samples_per_s leaves out
            **({"compile": self._compile_report()} if self.settings.compile else {}),
            **({"cuda_graph": self._graph.report()} if self._graph is not None else {}),
        }

    def _compile_report(self) -> dict:
        """Recompiles after the first step, the first-batch check's verdict, and why it fell back, if so."""
        reason = getattr(self.forward, "reason", None)
        check = self._compile_check.report
        return {
            **self._recompiles.report(),
            **({"check": check} if check else {}),
            **({"fell_back": reason} if reason else {}),
        }

    def before_fit_end(self, result: FitResult) -> None:
        if self.settings.compile and self.settings.progress is not False:
            self.runtime.print(self._recompiles.line())

    # -- device facts ---------------------------------------------------------------------------------
    @property
    def sample_scale(self) -> int:
        return self.runtime.world_size  # samples_seen counts this rank's

    def skipped_steps(self) -> int:
        return int(getattr(self.runtime.precision, "skipped_steps", 0))

    def compiled(self) -> bool:
        return bool(self.settings.compile and not getattr(self.forward, "fell_back", False))

    def synchronize(self) -> None:
        synchronize(self.runtime.device)

    def reset_peak_memory(self) -> None:
        reset_peak_memory(self.runtime.device)

    def memory(self) -> tuple[int, dict[str, Any]]:
        device = self.runtime.device
        return peak_memory_bytes(device), memory_stats(device).to_json()

    def native_dtypes(self) -> dict[str, bool | None]:
        return native_dtypes(self.runtime.device)

    threads_hint = THREADS_HINT
    describe_batch = staticmethod(describe_batch)
    is_out_of_memory = staticmethod(is_out_of_memory)


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


def _batch_preparation(channels_last: bool) -> Callable[[Any], Any]:
    """What each training batch goes through before the step: the check of its form, and its 4-D inputs
    made channels_last where the model was."""
    if not channels_last:
        return check_batch
    return lambda batch: channels_last_batch(check_batch(batch))


def _build_scheduler(scheduler: Any, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
    """A scheduler object is used as is; a factory is called as ``factory(optimizer, total_steps)``."""
    if scheduler is None or hasattr(scheduler, "step"):
        return scheduler
    return scheduler(optimizer, total_steps)
