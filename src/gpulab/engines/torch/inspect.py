"""``gpulab inspect`` on a recipe: its settings resolved as ``gpulab train`` resolves them, one example
batch, the layer rows (``inspect_model``), and the totals: parameters, the FLOP counter's FLOPs per
sample, the memory estimate's predicted peak of a training step, and whether that fits the device.

Nothing is trained and the model is never moved: the trace runs on fake copies of the CPU model under
the autocast of the precision resolved for the chosen device (with CPU autocast's op lists, which differ
from CUDA's for a few ops), and the estimate uses the same.
"""

from __future__ import annotations

from typing import Any

import torch

from gpulab.engines.torch.inspect_model import inspect_model
from gpulab.errors import ConfigError
from gpulab.measure.inspection import InspectReport, first_line


def inspect_torch(user: dict[str, Any]) -> InspectReport:
    """The torch engine's inspect (``gpulab.engines.torch``)."""
    from gpulab.engines.torch.data.loaders import loader_memory
    from gpulab.engines.torch.data.streams import is_stream
    from gpulab.engines.torch.runtime.memory_estimate import estimate_memory, example_batch
    from gpulab.engines.torch.runtime.precision import resolve_precision
    from gpulab.engines.torch.runtime.runtime import takes_model
    from gpulab.engines.torch.train.run import resolve_config
    from gpulab.hardware.devices import select_device

    config, recipe = resolve_config(user)
    if not isinstance(config.batch_size, int):
        raise ConfigError("inspect needs a number for the batch size (not auto): e.g. --batch-size 32")
    device = select_device(config.device).device
    precision, _ = resolve_precision(config.precision, device)
    # The model stays on the CPU: autocast with the device's precision and CPU op lists (see module doc).
    traced = type(precision)("cpu")
    batch = example_batch(recipe.train_data, config.batch_size)
    if batch is None and isinstance(recipe.train_data, torch.utils.data.DataLoader):
        batch = _first_batch(recipe.train_data)  # a stream's loader: its first batch (nothing trains)
    if batch is None:
        stream = isinstance(recipe.train_data, torch.utils.data.IterableDataset)
        what = "a stream (an IterableDataset)" if stream else f"a {type(recipe.train_data).__name__}"
        raise ConfigError(
            "inspect takes its example batch from a DataLoader, a map-style Dataset, or a tuple, dict or "
            f"dataclass of tensors or arrays; this recipe's training data is {what}: wrap it in a DataLoader"
        )
    from gpulab.engines.torch.runtime.signature import Signature
    from gpulab.engines.torch.runtime.step_call import loss_step

    model = recipe.model
    inspection = inspect_model(
        model, batch, recipe.loss_fn, autocast=traced.autocast, compute_dtype=precision.compute_dtype,
        signature=Signature(model, config.model_inputs, config.model_output),
    )  # fmt: skip
    params = list(model.parameters())
    report = InspectReport(
        recipe=config.recipe,
        device=device,
        precision=precision.name,
        optimizer=None,
        inspection=inspection,
        params_trainable=sum(p.numel() for p in params if p.requires_grad),
        params_frozen=sum(p.numel() for p in params if not p.requires_grad),
        params_bytes=sum(p.numel() * p.element_size() for p in params),
    )
    if inspection.failure is not None:
        return report
    optimizer = recipe.optimizer
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = optimizer(model if takes_model(optimizer) else model.parameters())  # state is lazy
    report.optimizer = type(optimizer).__name__ if optimizer is not None else None
    try:
        # What the Trainer's loader keeps on the device beside the step (its make_loader call's settings).
        held = loader_memory(
            recipe.train_data,
            device,
            shuffle=not is_stream(recipe.train_data),
            policy=_policy(config, device),
        )
        report.memory = estimate_memory(
            model,
            optimizer,
            traced,
            batch,
            batch_size=config.batch_size,
            step=loss_step(model, recipe.loss_fn, config.model_inputs, config.model_output),
            data_bytes=held.resident_bytes,
            batches_ahead=held.batches_ahead,
        )
    except ConfigError as exc:
        report.memory_note = str(exc)
    except Exception as exc:  # the rows stand without it; say why the total is missing
        report.memory_note = f"the memory estimate failed: {first_line(exc)}"
    report.limit_bytes, report.limit_source = _limit(device, config.memory_limit)
    return report


def _policy(config: Any, device: str) -> Any:
    from gpulab.engines.torch.data.loaders import LoaderPolicy

    return LoaderPolicy.for_device(device).overridden(
        num_workers=config.num_workers, pin_memory=config.pin_memory, prefetch_factor=config.prefetch_factor
    )


def _limit(device: str, memory_limit: int | float | None) -> tuple[int | None, str]:
    """The bytes a training step may use on ``device``: the run's memory_limit, else what
    ``batch_size: auto`` aims under (all of a GPU; half the RAM available now on a CPU)."""
    from gpulab.engines.torch.devices import accelerator
    from gpulab.engines.torch.runtime.batch_search import default_cpu_limit
    from gpulab.engines.torch.runtime.memory import memory_stats

    acc = accelerator(device)
    known = acc.is_host or acc.allocator_peaks  # RAM, or the allocator's device
    total = memory_stats(acc.device).total_bytes if known else None
    if memory_limit is not None and total:
        if isinstance(memory_limit, float):
            return int(memory_limit * total), f"memory_limit {memory_limit:g} of {device}"
        return int(memory_limit), f"memory_limit on {device}"
    if acc.is_host:
        return default_cpu_limit(), "half the RAM available now"
    if total:
        return total, f"{device}'s memory"
    return None, f"no capacity known for {device}"


__all__ = ["inspect_torch"]


def _first_batch(loader: torch.utils.data.DataLoader) -> Any:
    """The first batch a user's DataLoader yields, a list as a tuple (what the Trainer calls with)."""
    batch = next(iter(loader), None)
    return tuple(batch) if isinstance(batch, list) else batch
