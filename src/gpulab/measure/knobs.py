"""What ``gpulab tune`` tries, on every engine: a ``Group`` is one knob, its candidates (settings to lay
over the best config so far) or, when there is nothing to try, the reason; and the knobs whose rule is the
same on every engine: precision (fp32 and what the device computes natively) and batch size (the largest
that fits and a few below). Each engine's own knobs are engines/<name>/tune_space.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpulab.hardware.native_dtypes import native_dtypes, slow_dtype_note
from gpulab.precisions import PRECISIONS

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DeviceName:
    """A device as torch names it (``cpu``, ``cuda:0``), for an engine that has no torch: the knob rules
    read its ``type`` and its name."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


@dataclass
class Candidate:
    label: str  # what the table shows, e.g. "batch_size=256"
    settings: dict[str, Any]


@dataclass
class Group:
    """One knob: what to try, or why nothing is tried. ``skipped`` names values left out and why."""

    knob: str
    candidates: list[Candidate] = field(default_factory=list)
    reason: str = ""  # when there are no candidates
    skipped: dict[str, str] = field(default_factory=dict)


def precision_group(device: torch.device | DeviceName, resolved: str) -> Group:
    """fp32 and the mixed precisions this device computes natively (``native_dtypes``); tf32 on CUDA
    from Ampere. ``resolved`` is what the default config ran in (``auto`` already resolved)."""
    group = Group("precision")
    native = native_dtypes(device)
    for name, spec in PRECISIONS.items():  # the precision table's rows, in its order
        if name == resolved:
            continue
        ok = native[spec.peak_dtype] if spec.mixed else (_has_tf32(device) if spec.tf32 else True)
        if ok:
            group.candidates.append(Candidate(f"precision={name}", {"precision": name}))
        elif spec.tf32:
            group.skipped[name] = "TF32 exists on CUDA GPUs from compute capability 8.0 only"
        else:
            group.skipped[name] = slow_dtype_note(spec.peak_dtype, device)
    if not group.candidates:
        group.reason = f"no precision other than {resolved} is fast on {device}"
    return group


def _has_tf32(device: torch.device | DeviceName) -> bool:
    if device.type != "cuda":
        return False
    import torch

    try:
        return torch.cuda.get_device_capability(torch.device(str(device))) >= (8, 0)
    except Exception:  # no driver: unknown, not tried
        return False


def batch_group(default: int, largest: int, cap: int | None) -> Group:
    """The largest batch that fits and a few below it (halvings, and twice/four times the default)."""
    group = Group("batch_size")
    sizes = {largest, largest // 2, largest // 4, 2 * default, 4 * default}
    picks = sorted(b for b in sizes if default < b <= largest)[-4:]  # ascending: a failure prunes the rest
    group.candidates = [Candidate(f"batch_size={b}", {"batch_size": b}) for b in picks]
    if not picks:
        bound = "the data's size" if cap is not None and largest >= cap else "memory"
        group.reason = f"the default batch {default} is already the largest that fits ({bound} binds)"
    return group
