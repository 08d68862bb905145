"""The fused Adam/AdamW update called directly: the same two kernels ``optimizer.step()`` ends in, without
the Python around them.

For a small model the update itself is cheap and ``Optimizer.step`` is mostly Python: the profiler range,
the hook loops, ``_init_group``'s per-parameter checks, the grouping by device and dtype, the argument
plumbing. Measured on the ``mlp`` recipe (6 parameters, 2-core CPU, one thread): ``step()`` 318 us against
60 us for the direct call on a busy machine. The direct call runs exactly what torch's ``_fused_adam``
runs -- ``_foreach_add_`` on the step counters, then ``_fused_adam_``/``_fused_adamw_`` with the group's
arguments, in the same order over the same tensors -- so the result is bit-identical (tested).

It is used only when that is provably what ``step()`` would do, checked at every step (a few dict and
attribute reads), and ``step()`` runs instead otherwise:
- the optimizer is exactly ``torch.optim.Adam`` or ``AdamW`` with every group ``fused`` (gpulab's default,
  ``fused_optimizer.py``) and neither ``capturable`` nor ``differentiable``;
- no step hook, the optimizer's own or global (a hook may change anything);
- every parameter with a gradient is a plain tensor (not a DTensor) with a dense gradient, already has
  its state (the first step, and a parameter whose first gradient comes late, go through ``step()``,
  which creates it), and each group is of one device and one real dtype;
- no GradScaler (the caller, ``Runtime.step``, uses it only where the precision steps plainly).
"""

from __future__ import annotations

import torch

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices import accelerator

PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a DTensor or another tensor subclass

DIRECT_CLASSES = (torch.optim.Adam, torch.optim.AdamW)


def direct_step(optimizer: torch.optim.Optimizer) -> bool:
    """Apply ``optimizer``'s fused update directly; False (nothing done) where ``step()`` must run."""
    if (
        type(optimizer) not in DIRECT_CLASSES
        or torch_private.has_step_hooks(optimizer)
        or getattr(optimizer, "grad_scale", None) is not None
        or getattr(optimizer, "found_inf", None) is not None
    ):
        return False
    calls = []
    state = optimizer.state
    for group in optimizer.param_groups:
        decoupled = group.get("decoupled_weight_decay")
        if not group.get("fused") or group["capturable"] or group["differentiable"] or decoupled is None:
            return False
        amsgrad = group["amsgrad"]
        params, grads, avgs, avg_sqs, max_sqs, steps = [], [], [], [], [], []
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            s = state.get(p)
            if not s or type(p) not in PLAIN or grad.is_sparse or p.is_complex():
                return False
            if params and (p.device != params[0].device or p.dtype != params[0].dtype):
                return False
            params.append(p)
            grads.append(grad)
            avgs.append(s["exp_avg"])
            avg_sqs.append(s["exp_avg_sq"])
            if amsgrad:
                max_sqs.append(s["max_exp_avg_sq"])
            steps.append(s["step"])
        if params:
            calls.append((group, decoupled, params, grads, avgs, avg_sqs, max_sqs, steps))
    with torch.no_grad():  # as step() runs it (a with block: the decorator's wrapper costs more per call)
        for group, decoupled, params, grads, avgs, avg_sqs, max_sqs, steps in calls:
            beta1, beta2 = group["betas"]
            lr = group["lr"]
            if (
                isinstance(lr, torch.Tensor)
                and lr.device != params[0].device
                and not accelerator(lr.device).is_host
            ):
                lr = lr.to(params[0].device)  # as torch's _fused_adam moves a device lr
            kernel = torch_private.fused_adam_kernel(decoupled)
            torch_private.add_to_each(steps, 1)
            kernel(
                params,
                grads,
                avgs,
                avg_sqs,
                max_sqs,
                steps,
                amsgrad=group["amsgrad"],
                lr=lr,
                beta1=torch_private.optimizer_scalar(beta1),
                beta2=torch_private.optimizer_scalar(beta2),
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group["maximize"],
                grad_scale=None,
                found_inf=None,
            )
    torch_private.record_optimizer_step(optimizer)  # the profiler hook step() calls
    return True


def clear_grads(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)`` for the classes ``direct_step`` runs (which do not override
    it), without the profiler range it opens: every gradient set to None."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None
