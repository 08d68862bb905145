"""The torch step: a micro-batch's forward, loss and backward, and the optimizer step, as the Trainer, profile
and bench run it.

Everything a fit's settings decide is decided here once, when the step is built: how the loss is taken
(``step_call.loss_route``: a compiled region that fuses it, or the model then the loss), how a micro-batch's
loss weighs in its window (the window's mean, or by its items: ``items.py``), what the optimizer step does
before it steps (scale the gradients by the window's items, clip them) and whether gradients are reduced
after backward (profile times that as ``communication``). Each is a function picked then, so a step runs
no ``if`` on a setting.

``mark`` is the hook profile times phases with: ``mark("forward")``, ``mark("backward")`` and
``mark("optimizer")`` as each begins. Off (the default), it is a function that does nothing: a few calls
per step whatever the model's size, no host sync.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gpulab.engines.torch.runtime.oom import sync_gradients
from gpulab.engines.torch.runtime.step_call import LossCall, loss_route
from gpulab.engines.torch.train.items import Counter, scale_gradients


def no_mark(phase: str) -> None:
    """The phase hook when nothing times the step."""


class TorchStep:
    """One fit's step on ``runtime``: ``micro(batch, window)`` (forward, loss and backward of one
    micro-batch of a window of ``window``; its loss, on the device), ``optimizer_step()`` (when the window
    closes) and ``whole_step(batch)`` (one batch, one optimizer step: profile's and bench's).

    ``forward`` is what the model is called through (the model, or its compiled wrapper);
    ``count_items`` weighs micro-batches and ranks by their items (None: each micro-batch the same);
    ``separate_comm`` reduces gradients after backward instead of inside it (``whole_step`` only)."""

    def __init__(
        self,
        runtime: Any,
        model: nn.Module,
        forward: Callable[..., Any],
        optimizer: torch.optim.Optimizer,
        loss: LossCall,
        *,
        scheduler: Any = None,
        clip_grad_norm: float | None = None,
        count_items: Counter | None = None,
        separate_comm: bool = False,
    ) -> None:
        self.rt, self.model, self.forward, self.optimizer = runtime, model, forward, optimizer
        self.loss = loss
        self.scheduler = scheduler
        self.count_items = count_items
        self.mark: Callable[[str], None] = no_mark
        self.loss_of = loss_route(forward, loss)
        self.window_items: torch.Tensor | None = None  # the open window's items (count_items only)
        self.micro_items: torch.Tensor | None = None  # the last micro-batch's: its loss's weight in the log
        self._route = self._micro_by_items if count_items is not None else self._micro_mean
        self.micro = functools.partial(self._route, self.loss_of)
        before = []  # what the optimizer step does first, in this order
        if count_items is not None:
            before.append(self._scale_by_items)
        if clip_grad_norm is not None:
            before.append(lambda: runtime.clip_grad_norm(model, optimizer, clip_grad_norm))
        self._before_step = tuple(before)
        self.whole_step = self._whole_step_separate_comm if separate_comm else self._whole_step

    def through(self, forward: Callable[..., Any]) -> Callable[[Any, int], torch.Tensor]:
        """``micro`` with the model called through ``forward`` instead (compile_check's eager twin)."""
        return functools.partial(self._route, loss_route(forward, self.loss))

    # -- one micro-batch --------------------------------------------------------------------------------
    def _micro_mean(self, loss_of: Callable, batch: Any, window: int) -> torch.Tensor:
        """The window's mean, as one big batch: each micro-batch's loss divided by the window's size."""
        rt = self.rt
        self.mark("forward")
        with rt.autocast():
            loss = loss_of(batch)
        self.mark("backward")
        rt.backward(loss / window if window > 1 else loss)
        return loss

    def _micro_by_items(self, loss_of: Callable, batch: Any, window: int) -> torch.Tensor:
        """A mean over items: the loss times its items now, divided by the window's items at the step."""
        rt = self.rt
        self.mark("forward")
        with rt.autocast():
            loss = loss_of(batch)
        items = self.count_items(batch)
        self.micro_items = items
        self.window_items = items if self.window_items is None else self.window_items + items
        self.mark("backward")
        rt.backward(loss * items)
        return loss

    # -- the optimizer step -----------------------------------------------------------------------------
    def optimizer_step(self) -> None:
        self.mark("optimizer")
        for part in self._before_step:
            part()
        self.rt.step(self.optimizer, self.scheduler)

    def _scale_by_items(self) -> None:
        """The large batch's mean: the gradients divided by the window's items (one all-reduce of one
        number across ranks)."""
        rt, items = self.rt, self.window_items
        if items is None:
            return
        if rt.world_size > 1:
            items = rt.all_reduce(items.float(), "sum")
        scale_gradients(self.model.parameters(), rt.world_size / items.clamp(min=1))
        self.window_items = None

    def drop_window(self) -> None:
        """A window cut short: its gradients and items go (its micro-batches ran under no_sync)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.window_items = None

    # -- one batch, one optimizer step ------------------------------------------------------------------
    def _whole_step(self, batch: Any) -> torch.Tensor:
        loss = self.micro(batch, 1)
        self.optimizer_step()
        return loss

    def _whole_step_separate_comm(self, batch: Any) -> torch.Tensor:
        """Gradients reduced after backward, so the collective is a phase of its own (profile)."""
        with self.rt.no_sync(self.model):
            loss = self.micro(batch, 1)
        self.mark("communication")
        sync_gradients(self.model.parameters(), self.rt.all_reduce)
        self.optimizer_step()
        return loss
