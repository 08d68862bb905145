"""The torch engine's tune hooks (its ``tuner()``): how it resolves the user's run, which knobs it has and
in what order the search walks them (``tune_space.py``; the batch search runs on the best settings found
before it), and how one trial trains the recipe (the ``Trainer``). The search and the trial
(gpulab/tune/) are engine-neutral: they ask the engine.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch

from gpulab.config.layering import merge
from gpulab.engines.torch import tune_space as space
from gpulab.errors import GpulabError
from gpulab.hardware.devices import select_device
from gpulab.measure.knobs import Group, batch_group, precision_group
from gpulab.warning_filters import quiet

Search = Any  # tune.search.Search, not imported even for its type: the verb stands above the engine


class TorchTuner:
    name = "torch"
    knobs = space.KNOBS
    compile_guess_s = 30.0  # inductor's first compile of a training step, on a CPU: tens of seconds
    settings_set_only = False  # every setting goes to the Trainer

    def resolve(self, user: dict[str, Any]) -> tuple[Any, Any, torch.device]:
        """(config, recipe, device) of the user's run; seeds first, so the recipe's model is the run's."""
        from gpulab.engines.torch.train.run import resolve_config

        config, recipe = resolve_config(user)
        return config, recipe, torch.device(select_device(config.device).device)

    def out_of_memory(self, exc: BaseException) -> str | None:
        """A trial's failure as the reason tune.json gives, where it is torch's out-of-memory error."""
        return "does not fit: out of memory" if isinstance(exc, torch.OutOfMemoryError) else None

    def largest_batch(self, user: dict[str, Any], knobs: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """The largest batch that fits with ``knobs``: ``find_batch_size`` (``runtime/batch_search.py``: real
        steps, grown from the config's batch then bisected, under the memory limit; on a CPU without one,
        half the RAM available) capped at the training data's size.

        The Trainer's ``batch_size: auto`` starts from the memory estimate instead, which on a CPU traces
        candidate batches up to millions of rows (half of RAM) and took 30 s for the mlp recipe on a busy
        2-core machine; starting from the config's batch costs a few real steps.

        Returns ({batch_size, cap, memory_binds, search}, "") or (None, why it could not run)."""
        try:
            with warnings.catch_warnings():
                quiet()
                from gpulab.engines.torch.runtime import Runtime
                from gpulab.engines.torch.runtime.batch_search import (
                    TrialStep,
                    default_cpu_limit,
                    find_batch_size,
                )
                from gpulab.engines.torch.runtime.compile import apply_activation_checkpointing
                from gpulab.engines.torch.runtime.memory import memory_limit_bytes
                from gpulab.engines.torch.runtime.memory_estimate import num_rows
                from gpulab.engines.torch.runtime.step_call import loss_step
                from gpulab.engines.torch.train.run import resolve_config

                config, recipe = resolve_config(merge(user, knobs))
                apply_activation_checkpointing(recipe.model, config.activation_checkpointing)
                with Runtime.from_settings(config) as rt:
                    model, optimizer = rt.setup(recipe.model, recipe.optimizer)
                    # The Trainer's call of the model (a dict batch's keys by forward's signature).
                    call = loss_step(recipe.model, recipe.loss_fn, config.model_inputs, config.model_output)
                    step = TrialStep(
                        model, optimizer, recipe.loss_fn, recipe.train_data, device=rt.device,
                        autocast=rt.autocast, backward=rt.backward, step=call,
                    )  # fmt: skip
                    limit = config.memory_limit if isinstance(config.memory_limit, int) else None
                    limit = limit or memory_limit_bytes(rt.device)
                    if limit is None and rt.accelerator.is_host:
                        limit = default_cpu_limit()
                    rows = num_rows(recipe.train_data)
                    start = int(config.batch_size) if config.batch_size != "auto" else 1
                    search = find_batch_size(
                        step, device=rt.device, limit_bytes=limit, start=start, high=rows
                    )
        except (GpulabError, TypeError, ValueError, RuntimeError) as exc:  # dict batches, a stream, ...
            return None, (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        binds = any(not t.fits for t in search.trials)  # else the search stopped at the data's size
        return {
            "batch_size": search.batch_size,
            "memory_binds": binds,
            "cap": rows,
            "search": search.to_json(),
        }, ""

    def groups(
        self, search: Search, config: Any, recipe: Any, device: torch.device, knobs: dict
    ) -> Iterator[Group]:
        """The knobs in walking order. A generator: the batch search runs on the best settings the knobs
        before it found (precision, fused optimizer)."""
        yield precision_group(device, search.default.precision or str(knobs["precision"]))
        yield space.fused_group(bool(knobs.get("fuse_optimizer", True)))
        if config.batch_size == "auto":
            yield Group("batch_size", reason="batch_size: auto already picks the largest that fits")
        else:
            search.largest = search.find_largest(search.best.settings)
            if search.largest is None:
                yield Group("batch_size", reason=search.largest_failed)
            else:
                largest = search.largest
                yield batch_group(int(knobs["batch_size"]), largest["batch_size"], largest["cap"])
        yield space.loader_group(recipe.train_data, device)
        if search.largest is None:
            yield Group("activation_checkpointing", reason="the batch search did not run")
        else:
            binds, largest_b = search.largest["memory_binds"], search.largest["batch_size"]
            yield space.checkpointing_group(recipe.model, binds, largest_b)
        yield space.channels_last_group(recipe.model, device, knobs["channels_last"])
        yield space.compile_group(device)

    def fit(self, config: Any, recipe: Any, settings: dict[str, Any], watch: Any) -> Any:
        from gpulab.engines.torch.train.trainer import Trainer

        trainer = Trainer(trajectory={"recipe": config.recipe}, callbacks=[watch], **settings)
        return recipe.fit(trainer)
