"""The mechanics of a whole-step CUDA graph, behind a small seam so they can be tested without a GPU.

``CudaGraphs`` is what runs on a GPU: warm-up on a side stream, one ``torch.cuda.graph`` capture, and
``replay``, as PyTorch's "whole network capture" recipe does. Tests pass an object with the same four
methods that records the calls and, on the CPU, replays by calling the captured function again against the
same static buffers (tests/engines/torch/train/test_cuda_graph.py).

The optimizer must update tensors that stay where the graph recorded them: ``prepare_optimizer`` makes the
learning rate a device tensor (schedulers fill it in place), turns on ``capturable`` and moves step counters
to the device; ``load_optimizer_in_place`` loads a checkpoint by copying into those tensors, where torch's
``load_state_dict`` would bind new ones the graph never reads.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices import accelerator

# Set on an optimizer once ``prepare_optimizer`` ran: its state tensors are a graph's static buffers.
STATIC_MARK = "_gpulab_static_state"


class GraphBackend(Protocol):
    """What ``WholeStepGraph`` needs from CUDA graphs (``CudaGraphs``), so tests can put a fake there."""

    def unsupported(self, device: torch.device) -> str | None:
        """Why this device cannot capture, or None."""

    def warmup(self, device: torch.device) -> contextlib.AbstractContextManager:
        """Context for the eager warm-up steps (a side stream, joined on exit)."""

    def capture(self, fn: Callable[[], Any], device: torch.device) -> Any:
        """Record ``fn`` once (its kernels do not run); returns the graph."""

    def replay(self, graph: Any) -> None:
        """Run the recorded kernels again."""

    def synchronize(self, device: torch.device) -> None:
        """Wait for the device (only when timing ``auto``'s choice)."""


class CudaGraphs:
    """torch.cuda's graphs: the real backend."""

    def unsupported(self, device: torch.device) -> str | None:
        if not accelerator(device).cuda_graphs:
            return f"the device is {device.type} (CUDA graphs need a CUDA device)"
        return None

    @contextlib.contextmanager
    def warmup(self, device: torch.device) -> Iterator[None]:
        # Warm-up on a side stream, as torch's docs say: lazy initialisation (cuBLAS workspaces, the
        # optimizer's state, autotuning) then happens off the stream the capture will use.
        side, main = torch.cuda.Stream(device), torch.cuda.current_stream(device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            yield
        main.wait_stream(side)

    def capture(self, fn: Callable[[], Any], device: torch.device) -> Any:
        graph = torch.cuda.CUDAGraph()
        # thread_local: the DataLoader's pin-memory thread (cudaHostAlloc) and a checkpoint writer's copies
        # go on during the capture; "global" would make their CUDA calls fail it.
        with torch.cuda.device(device), torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
        return graph

    def replay(self, graph: Any) -> None:
        graph.replay()

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)


# Optimizers whose step can be captured, and what each needs.
ADAM_LIKE = (torch.optim.Adam, torch.optim.AdamW)


def optimizer_blocker(optimizer: torch.optim.Optimizer, fp16: bool) -> str | None:
    """Why ``optimizer``'s step cannot be part of a graph, or None."""
    name = type(optimizer).__name__
    fused = all(g.get("fused") for g in optimizer.param_groups)
    if type(optimizer) not in (*ADAM_LIKE, torch.optim.SGD):
        return f"optimizer {name}: the whole-step graph takes torch's Adam, AdamW or SGD"
    if type(optimizer) is torch.optim.SGD and not fused:
        return "optimizer SGD without fused kernels reads its learning rate on the host each step"
    if fp16 and not torch_private.takes_scaler_handoff(optimizer):
        return (
            f"fp16-mixed with an unfused {name}: the loss scaler reads its inf flag on the host each step "
            "(leave fused/foreach unset, or fuse_optimizer: true)"
        )
    return None


def prepare_optimizer(optimizer: torch.optim.Optimizer, device: torch.device, capturable: bool) -> None:
    """Make ``optimizer``'s step capturable: LR a device tensor, ``capturable`` on, step counters on the
    device. Called once, after any checkpoint was loaded (a load replaces groups and state)."""
    # float64 on the CPU: the fused CPU kernels take the LR as a double, so results stay bit-identical.
    dtype = torch.float32 if accelerator(device).cuda_graphs else torch.float64
    for group in optimizer.param_groups:
        lr = group["lr"]
        if not isinstance(lr, torch.Tensor) or lr.device != device:
            group["lr"] = torch.tensor(float(lr), dtype=dtype, device=device)
        if capturable and type(optimizer) in ADAM_LIKE:
            group["capturable"] = True
    for param, state in optimizer.state.items():
        step = state.get("step")
        if isinstance(step, torch.Tensor) and step.device != param.device:
            state["step"] = step.to(param.device, torch.float32)
    setattr(optimizer, STATIC_MARK, True)


def load_optimizer_in_place(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(saved)``, keeping the tensors a captured graph reads: the loaded values
    are copied into them (torch's load binds new tensors, which the graph would never see)."""
    kept_state = {p: dict(s) for p, s in optimizer.state.items()}
    kept_lr = [g["lr"] for g in optimizer.param_groups]
    kept_flags = [g.get("capturable") for g in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, lr, capturable in zip(optimizer.param_groups, kept_lr, kept_flags, strict=True):
        if isinstance(lr, torch.Tensor):
            lr.fill_(float(group["lr"]))
            group["lr"] = lr
        if capturable is not None:
            group["capturable"] = capturable
    for param, state in optimizer.state.items():
        old = kept_state.get(param, {})
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and isinstance(old.get(key), torch.Tensor):
                old[key].copy_(value)
                state[key] = old[key]


# Operators that read a device tensor on the host (a sync, which a capture refuses): .item(), float(),
# int(), bool() and `if tensor:` (_local_scalar_dense), and those whose output size depends on the data.
_HOST_READS = {
    torch_private.host_read_op(): ".item(), float(), int() or bool() of a tensor",
    torch.ops.aten.nonzero.default: "nonzero() (or a boolean-mask index)",
    torch.ops.aten.masked_select.default: "masked_select() (or a boolean-mask index)",
}
# The installed packages' own folders, by their roots: a user's file under a folder named torch/ is still
# the user's (the project's own tests live in tests/engines/torch/).
_OWN_ROOTS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))) + os.sep,  # gpulab/
)


class HostReadProbe(torch_private.dispatch_mode_base()):
    """Active around one eager forward and loss: notes the first operator that reads a tensor on the host
    and where the user's code called it, so the cause is named before any capture is tried (on any
    device: the CPU tests see the same thing a GPU capture would refuse)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device_type = device.type  # a CPU tensor read during a GPU step syncs nothing: not counted
        self.found: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        what = _HOST_READS.get(func) or _mask_index(func, args)
        on_device = bool(args) and getattr(args[0], "device", None) is not None
        if what is not None and self.found is None and on_device and args[0].device.type == self.device_type:
            self.found = f"{what}{_user_frame()}"
        return func(*args, **(kwargs or {}))


def _mask_index(func: Any, args: tuple) -> str | None:
    """``x[mask]``: its result's size is the mask's count, read on the host."""
    if func is not torch.ops.aten.index.Tensor or len(args) < 2:
        return None
    masks = [i for i in args[1] if isinstance(i, torch.Tensor) and i.dtype == torch.bool]
    return "a boolean-mask index" if masks else None


def _user_frame() -> str:
    """`` at FILE:LINE`` of the innermost caller outside torch and gpulab, or nothing."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(_OWN_ROOTS) and not frame.filename.endswith("contextlib.py"):
            return f" at {os.path.basename(frame.filename)}:{frame.lineno}"
    return ""
