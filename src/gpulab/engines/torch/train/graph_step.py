"""``cuda_graph``: the Trainer's whole step (forward, backward, clipping, the optimizer and fp16's loss
scaler) captured as one CUDA graph and replayed, so a launch-bound model pays one launch per step.

The step: ``warmup`` eager steps on a side stream (real training steps, which also create the gradients
and the optimizer's state in place), one capture, then a replay per step with the batch copied into static
buffers. Eligibility is checked up front (``blocker``) and anything that stops it later (a capture that
fails, batch shapes that change) falls back to eager steps: either way one line names the cause.
``auto`` captures, then keeps the graph only where it measured faster than eager (launch-bound).

Numerics are eager's: the same function runs in the warm-up, the capture and any eager step; gradients are
zeroed in place at its start (``set_to_none=False``) so they stay where the graph wrote them; the loss is a
static tensor, cloned once per step for the loss window and read only when the run logs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.runtime.cuda_graph import (
    CudaGraphs,
    GraphBackend,
    HostReadProbe,
    optimizer_blocker,
    prepare_optimizer,
)
from gpulab.engines.torch.runtime.precision import _Autocast


class Trainer(Protocol):
    """What the graph step reads of the Trainer that owns it (a protocol: importing the Trainer here would
    make the two modules import each other)."""

    settings: Any
    runtime: Any
    state: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    forward: Callable[..., Any]
    torch_step: Any  # train/step.py's TorchStep: its ``loss_of(batch)`` is the step's forward and loss


WARMUP_STEPS = 3  # torch's docs warm up 3 iterations before capturing
AUTO_TIMED = 3  # replays timed for ``auto`` (eager: the warm-up steps after the first)
AUTO_MIN_GAIN = 1.10  # ``auto`` keeps the graph where a replay is at least this much faster than eager


def blocker(trainer: Trainer, backend: GraphBackend, callbacks: Sequence[Any] = ()) -> str | None:
    """Why this fit cannot run as one graph per step, or None (checked before the first step);
    ``callbacks``: every callback the fit runs, the defaults and the user's."""
    s, rt = trainer.settings, trainer.runtime
    why = backend.unsupported(rt.device)
    if why:
        return why
    if rt.world_size > 1 or rt.strategy.name not in ("single", "auto"):
        return (
            f"strategy {rt.strategy.name}: the whole-step graph runs on one device "
            "(DDP's and FSDP's collectives are not captured)"
        )
    if s.accumulate > 1:
        return f"accumulate {s.accumulate}: the graph holds one batch per optimizer step"
    if s.micro_batch == "auto":
        return "micro_batch: auto splits a step that runs out of memory (its shapes change)"
    if s.compile and s.compile_mode in ("reduce-overhead", "max-autotune"):
        return f"compile_mode {s.compile_mode} captures CUDA graphs of its own"
    if s.log_every == 1:
        return "log_every 1 reads the loss on the host every step (the non-finite check)"
    fp16 = getattr(rt.precision, "scaler", None) is not None
    why = optimizer_blocker(trainer.optimizer, fp16)
    if why:
        return why
    # Every callback the fit runs, the defaults (progress, trackers) as much as the user's: the CPU fake once
    # ran with fewer callbacks than `gpulab train` builds, and the graph never engaged in a real run.
    for callback in callbacks:
        per_step = type(callback).on_step_end is not _base_on_step_end()
        if per_step and not getattr(callback, "graph_safe", False):
            return (
                f"callback {type(callback).__name__} runs on_step_end every step and may read tensors "
                "(a host sync per step; set graph_safe = True on it if it does not)"
            )
    return None


def _base_on_step_end():
    from gpulab.core.callbacks import Callback

    return Callback.on_step_end


def choose(eager_s: float, replay_s: float) -> tuple[bool, str]:
    """``auto``'s choice from measured times per step: the graph where it gains at least 10 %."""
    gain = eager_s / max(replay_s, 1e-12)
    times = f"a replay took {replay_s * 1e3:.3f} ms against {eager_s * 1e3:.3f} ms eager ({gain:.2f}x"
    if gain >= AUTO_MIN_GAIN:
        return True, f"cuda_graph auto: whole-step graph ({times}; launch-bound)"
    return False, (
        f"cuda_graph auto: eager ({times}; compute-bound: under the {AUTO_MIN_GAIN:.2f}x a graph must gain)"
    )


class WholeStepGraph:
    """One training step per call of ``step(batch)``: warm-up, capture, then replays (see the module)."""

    def __init__(self, trainer: Trainer, backend: GraphBackend, *, auto: bool, warmup: int = WARMUP_STEPS):
        self.t, self.backend, self.auto, self.warmup_steps = trainer, backend, auto, warmup
        self.device = trainer.runtime.device
        self.graph: Any = None
        self.mode = "warmup"  # warmup -> graph, or eager (fell back, or auto chose it)
        self.reason: str | None = None  # the one line: why eager, or auto's choice
        self.counts = {"warmup": 0, "captures": 0, "replays": 0, "eager": 0}
        self._prepared = False
        self._eager_times: list[float] = []
        self._replay_times: list[float] = []
        self._static: list[Any] | None = None  # the batch's leaves the graph reads
        self._spec: Any = None
        self._loss: torch.Tensor | None = None
        self._lrs: list[torch.Tensor] = []
        self._odd_epoch: int | None = None  # a stream's epoch that had its one batch of other shapes

    # -- one step ---------------------------------------------------------------------------------------
    def step(self, batch: Any, last_in_epoch: bool | None) -> torch.Tensor:
        """Train on ``batch``; returns its loss (a tensor no later step overwrites). ``last_in_epoch``:
        whether it is its epoch's last batch, None where that is unknown (a stream)."""
        if not self._prepared:
            # After any resume (a load replaces the optimizer's groups): from here its tensors are static.
            prepare_optimizer(self.t.optimizer, self.device, capturable=accelerator(self.device).cuda_graphs)
            self._prepared = True
        if self.mode == "eager":
            loss = self._run(batch)
        elif self.mode == "warmup":
            loss = self._warmup(batch, last_in_epoch)
        elif self._fits(batch):
            loss = self._replay(batch)
        elif self._may_differ(last_in_epoch):  # an epoch's partial last batch: one eager step, graph stays
            self.counts["eager"] += 1
            loss = self._run(batch)
        else:
            self._fall_back(
                f"batch shapes changed mid-epoch ({self._shapes(batch)} after {self._static_shapes()})"
            )
            loss = self._run(batch)
        rt = self.t.runtime
        if self.t.scheduler is not None:
            self.t.scheduler.step()  # fills the LR tensor the graph reads: no host sync
        rt.strategy.heartbeat.step += 1
        return loss

    def _run(
        self, batch: Any, out: torch.Tensor | None = None, probe: HostReadProbe | None = None
    ) -> torch.Tensor:
        """The step itself: what the warm-up runs, the graph records and an eager step runs."""
        t, rt = self.t, self.t.runtime
        t.optimizer.zero_grad(set_to_none=False)  # in place: the gradients stay where the graph wrote them
        with self._autocast(), probe or contextlib.nullcontext():
            loss = t.torch_step.loss_of(batch)
        rt.precision.backward(loss)
        if t.settings.clip_grad_norm is not None:
            rt.clip_grad_norm(t.model, t.optimizer, t.settings.clip_grad_norm)
        rt.precision.step(t.optimizer)  # fp16: the scaler's inf check and scale update, no host read
        loss = loss.detach()
        if out is None:
            return loss
        out.copy_(loss)
        return out

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The precision's autocast without its cast cache, as torch's CUDA-graph docs require (cached
        casts made outside the capture would be read by the graph after autocast freed them)."""
        precision = self.t.runtime.precision
        if not isinstance(precision, _Autocast):  # fp32, tf32, or a policy of the user's: as it says
            return precision.autocast()
        return torch.autocast(self.device.type, dtype=precision.compute_dtype, cache_enabled=False)

    def _warmup(self, batch: Any, last_in_epoch: bool) -> torch.Tensor:
        timed = self.auto and self.counts["warmup"] > 0  # the first pays lazy initialisation
        start = self._now() if timed else 0.0
        # The first step's forward and loss run under a probe for host reads (not a compiled model's:
        # dynamo and a dispatch mode do not mix; its capture is the check).
        probe = HostReadProbe(self.device) if self.counts["warmup"] == 0 and not _compiled(self.t) else None
        with self.backend.warmup(self.device):
            loss = self._run(batch, probe=probe)
        if timed:
            self._eager_times.append(self._now() - start)
        self.counts["warmup"] += 1
        if probe is not None and probe.found:
            self._fall_back(f"the step reads a tensor on the host ({probe.found}), which a graph cannot hold")
        elif self.counts["warmup"] >= self.warmup_steps and not last_in_epoch:  # never on a partial batch
            self._capture(batch, loss)
        return loss

    def _capture(self, batch: Any, loss: torch.Tensor) -> None:
        """Record the step once, against static copies of this batch; the next batch replays it."""
        # Again: a scheduler may have assigned floats during the warm-up; the graph must read tensors.
        prepare_optimizer(self.t.optimizer, self.device, capturable=accelerator(self.device).cuda_graphs)
        leaves, self._spec = torch_private.tree_flatten(batch)
        self._static = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        self._loss = torch.empty_like(loss)
        static_batch = torch_private.tree_unflatten(self._static, self._spec)
        try:
            self.graph = self.backend.capture(lambda: self._run(static_batch, out=self._loss), self.device)
        except Exception as exc:  # a host sync (.item()), data-dependent control flow, an unsupported op
            self._after_failed_capture()
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            self._fall_back(
                f"capture failed ({type(exc).__name__}: {first}); a host read such as .item() or "
                "data-dependent Python in the model cannot be in a graph"
            )
            return
        self.counts["captures"] += 1
        self.mode = "graph"
        self._lrs = [g["lr"] for g in self.t.optimizer.param_groups]  # the LR tensors the graph reads
        self._baked = _baked_settings(self.t.optimizer)

    def _after_failed_capture(self) -> None:
        for name in ("grad_scale", "found_inf"):  # left on the optimizer by a GradScaler step cut short
            if hasattr(self.t.optimizer, name):
                delattr(self.t.optimizer, name)
        scaler = getattr(self.t.runtime.precision, "scaler", None)
        if scaler is not None:  # the scaler's per-step bookkeeping stopped half way: start it afresh
            torch_private.restart_scaler_step(scaler)
        self.graph = None

    def _replay(self, batch: Any) -> torch.Tensor:
        self._keep_lr_static()
        changed = _changed(self._baked, _baked_settings(self.t.optimizer))
        if changed:  # e.g. OneCycleLR cycling Adam's betas: the graph would keep the captured ones
            self._fall_back(
                f"the optimizer's {changed} changed after the capture (a graph keeps the value it captured)"
            )
            return self._run(batch)
        leaves = torch_private.tree_leaves(batch)
        for static, leaf in zip(self._static, leaves, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(leaf, non_blocking=True)
        timed = self.auto and len(self._replay_times) < AUTO_TIMED
        start = self._now() if timed else 0.0
        self.backend.replay(self.graph)
        self.counts["replays"] += 1
        loss = self._loss.clone()  # the next replay overwrites the static loss
        if timed:
            self._replay_times.append(self._now() - start)
            if len(self._replay_times) == AUTO_TIMED:
                self._decide()
        return loss

    def _keep_lr_static(self) -> None:
        """A scheduler or callback that assigned a new LR (a float) instead of filling the tensor: copy it
        into the tensor the graph reads, and put that tensor back in the group."""
        for group, lr in zip(self.t.optimizer.param_groups, self._lrs, strict=True):
            if group["lr"] is not lr:
                new = group["lr"]
                lr.copy_(new) if isinstance(new, torch.Tensor) else lr.fill_(float(new))
                group["lr"] = lr

    def _decide(self) -> None:
        if not self._eager_times:  # warmup 1: nothing timed eagerly (tests); keep the graph
            self.reason = "cuda_graph auto: whole-step graph (no eager step was timed)"
            return
        use, self.reason = choose(min(self._eager_times), min(self._replay_times))
        if not use:
            self.mode, self.graph = "eager", None
        self._say(self.reason)

    def _now(self) -> float:
        self.backend.synchronize(self.device)
        return time.perf_counter()

    # -- shapes and fallbacks -----------------------------------------------------------------------------
    def _fits(self, batch: Any) -> bool:
        leaves, spec = torch_private.tree_flatten(batch)
        if spec != self._spec:
            return False
        for static, leaf in zip(self._static, leaves, strict=True):
            if isinstance(static, torch.Tensor):
                if not isinstance(leaf, torch.Tensor) or (leaf.shape, leaf.dtype) != (
                    static.shape,
                    static.dtype,
                ):
                    return False
            elif leaf != static:
                return False
        return True

    def _may_differ(self, last_in_epoch: bool | None) -> bool:
        """A batch of other shapes is an epoch's partial last one: the last by count, or in a stream (no
        count) the first odd one of its epoch; a second one in an epoch means the shapes vary."""
        if last_in_epoch is not None:
            return last_in_epoch
        epoch = self.t.state.epoch
        if self._odd_epoch == epoch:
            return False
        self._odd_epoch = epoch
        return True

    def _shapes(self, batch: Any) -> str:
        return ", ".join(
            str(tuple(x.shape)) for x in torch_private.tree_leaves(batch) if isinstance(x, torch.Tensor)
        )

    def _static_shapes(self) -> str:
        return ", ".join(str(tuple(x.shape)) for x in self._static if isinstance(x, torch.Tensor))

    def _fall_back(self, cause: str) -> None:
        self.mode, self.graph, self._static = "eager", None, None
        self.reason = f"cuda_graph: eager steps from step {self.t.state.global_step + 1}: {cause}"
        self._say(self.reason)

    def _say(self, line: str) -> None:
        if self.t.settings.progress is not False:  # progress=False: quiet, as the Trainer's other lines
            self.t.runtime.print(line)

    def report(self) -> dict[str, Any]:
        """For summary.json: what ran, how often, and the one line saying why."""
        return {"mode": self.mode, **self.counts, **({"reason": self.reason} if self.reason else {})}


def _compiled(trainer: Any) -> bool:
    return bool(getattr(getattr(trainer, "settings", None), "compile", False))


def _baked_settings(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Each group's settings other than the LR (a tensor the graph reads): a graph bakes them in."""
    skip = ("params", "param_names", "lr")
    return [
        {k: v for k, v in g.items() if k not in skip and not isinstance(v, torch.Tensor)}
        for g in optimizer.param_groups
    ]


def _changed(before: list[dict[str, Any]], now: list[dict[str, Any]]) -> str | None:
    for old, new in zip(before, now, strict=True):
        for key in old.keys() | new.keys():
            if old.get(key) != new.get(key):
                return key
    return None


def make_graph_step(
    trainer: Trainer, callbacks: Sequence[Any], backend: GraphBackend | None = None
) -> tuple[WholeStepGraph | None, str]:
    """The graph step ``trainer.settings.cuda_graph`` asks for and this fit allows, and one line saying
    what was chosen (None with the cause when it cannot capture). ``auto`` (the default) on a device that
    has no graphs is plain eager training: None and no line, nothing was asked for that it lacks."""
    setting = trainer.settings.cuda_graph
    backend = backend or CudaGraphs()
    if setting == "auto" and backend.unsupported(trainer.runtime.device):
        return None, ""
    why = blocker(trainer, backend, callbacks)
    name = "auto" if setting == "auto" else "true"
    if why is not None:
        return None, f"cuda_graph {name}: eager steps: {why}"
    graph = WholeStepGraph(trainer, backend, auto=setting == "auto")
    line = f"cuda_graph {name}: capturing the whole step after {graph.warmup_steps} warm-up steps" + (
        " (kept where replays measure faster than eager)" if setting == "auto" else ""
    )
    return graph, line
