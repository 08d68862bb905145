"""The bench suites, one module each, and the training workload several of them time.

Each suite module has ``run(ctx: BenchContext) -> SuiteResult`` and a ``PROFILES`` table of its sizes
for the "full", "quick" and "smoke" profiles (``gpulab.measure.bench_profiles``); ``run.SUITES`` maps
names to them, and ``run.run_torch_suites`` runs them for ``gpulab bench``.

A ``Stepper`` is one training step of a built-in recipe's model -- the Trainer's own step
(``train/step.py``) on a ``Runtime``, so precision policies and strategies are the project's own -- over
batches already on the device: the suites time the step, not the data loading (the transfer suite times
that on its own).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from gpulab.core.recipes.base import load_recipe
from gpulab.engines.torch.runtime import Runtime
from gpulab.engines.torch.runtime.compile import CompileFallback
from gpulab.engines.torch.runtime.signature import Signature
from gpulab.engines.torch.runtime.step_call import LossCall
from gpulab.engines.torch.train.step import TorchStep
from gpulab.errors import GpulabWarning
from gpulab.measure.bench_models import MODELS


def single_runtime(device: torch.device, precision: str = "fp32") -> Runtime:
    """A one-process Runtime, whatever the environment says (the parallel suite starts its own ranks).

    A suite times every precision on purpose, so the warning a run gets for asking for an emulated one
    ("use --precision fp32", an option bench does not have) is left out; the suite's notes say it instead.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*often many times slower than fp32", GpulabWarning)
        return Runtime(device, precision, "single")


@dataclass
class Workload:
    """A model (initialised from ``seed``), its loss and optimizer factory, and training tensors."""

    name: str
    model: nn.Module
    loss_fn: Callable
    optimizer: Callable
    inputs: torch.Tensor
    targets: torch.Tensor
    batch_size: int
    flops_per_sample: float | None = None


def load_workload(name: str, *, seed: int = 0, batch_size: int | None = None) -> Workload:
    """A fresh copy of model ``name`` (a key of ``MODELS``): the same seed gives the same weights."""
    recipe_name, options, default_batch = MODELS[name]
    with torch.random.fork_rng(devices=[]):  # seeded weights, without moving the caller's random stream
        torch.manual_seed(seed)
        recipe = load_recipe(recipe_name, dict(options))
    inputs, targets = recipe.train_data
    return Workload(
        name=name,
        model=recipe.model,
        loss_fn=recipe.loss_fn,
        optimizer=recipe.optimizer,
        inputs=inputs,
        targets=targets,
        batch_size=batch_size or default_batch,
        flops_per_sample=recipe.info.get("flops_per_sample"),
    )


class Stepper:
    """One optimizer step per ``step()`` call, over device-resident batches taken in turn.

    ``accumulate=k`` splits each batch into k micro-batches whose gradients add up before the step,
    each loss divided by k so the result is the mean over the whole batch, as the Trainer does.
    ``forward`` replaces the model's call (a compiled model); the optimizer sees the model's parameters.
    """

    def __init__(
        self,
        work: Workload,
        runtime: Runtime,
        *,
        optimizer: Callable | None = None,
        forward: Callable[[nn.Module], Callable] | None = None,
        accumulate: int = 1,
    ) -> None:
        self.rt = runtime
        self.model, self.optimizer = runtime.setup(work.model, optimizer or work.optimizer)
        self.forward = forward(self.model) if forward else self.model
        self.loss_fn = work.loss_fn
        # The Trainer's call of model and loss (step_call.py): a compiled model fuses its loss as it does.
        self.loss = LossCall(work.loss_fn, Signature(self.model, None, None))
        if isinstance(self.forward, CompileFallback):
            self.forward.fuse_loss(self.loss)
        self.torch_step = TorchStep(runtime, self.model, self.forward, self.optimizer, self.loss)
        self.batch_size, self.accumulate = work.batch_size, accumulate
        n = (len(work.inputs) // work.batch_size) * work.batch_size
        if n == 0:
            raise ValueError(
                f"{work.name}: {len(work.inputs)} samples, fewer than one batch of {work.batch_size}"
            )
        self.inputs, self.targets = runtime.to_device((work.inputs[:n], work.targets[:n]))
        self.batches = n // work.batch_size
        self.cursor = 0

    def step(self) -> torch.Tensor:
        """One optimizer step; returns the (device) loss of its last micro-batch."""
        start = (self.cursor % self.batches) * self.batch_size
        self.cursor += 1
        x = self.inputs[start : start + self.batch_size]
        y = self.targets[start : start + self.batch_size]
        step, loss = self.torch_step, None
        for xs, ys in zip(x.chunk(self.accumulate), y.chunk(self.accumulate), strict=True):
            loss = step.micro((xs, ys), self.accumulate)
        step.optimizer_step()
        return loss

    @torch.no_grad()
    def eval_loss(self) -> float:
        """The loss on the first batch, the same one before and after training."""
        self.model.eval()
        try:
            with self.rt.autocast():
                loss = self.loss_fn(
                    self.forward(self.inputs[: self.batch_size]), self.targets[: self.batch_size]
                )
            return float(loss.float().item())
        finally:
            self.model.train()

    def parameters_vector(self) -> torch.Tensor:
        return torch.cat([p.detach().float().reshape(-1).cpu() for p in self.model.parameters()])
