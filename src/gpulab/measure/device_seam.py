"""What the measuring harness asks of a device, without knowing its framework: wait for its queued work,
and (where an allocator counts them) the peak bytes of its live tensors.

An engine gives the harness its own seam (torch: ``engines/torch/devices``' ``Accelerator``, which
has these members); ``HOST`` is the CPU's, needing no framework, so a CPU clock loads no torch.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class DeviceSeam(Protocol):
    """The part of a device the harness uses."""

    is_host: bool  # the CPU itself: its memory is the process's resident set
    allocator_peaks: bool  # reset_peak_memory/peak_memory_bytes count live tensors (an allocator's)
    peak_description: str  # what such a peak counts, in words

    @property
    def type(self) -> str: ...  # "cpu", "cuda", ...

    def synchronize(self) -> None: ...

    def reset_peak_memory(self) -> None: ...

    def peak_memory_bytes(self) -> int: ...


class Host:
    """The CPU: nothing queued to wait for; no allocator statistics (the harness reads the resident set)."""

    type = "cpu"
    is_host = True
    allocator_peaks = False
    peak_description = ""

    def synchronize(self) -> None:
        """Work on the CPU is done when the call returns."""

    def reset_peak_memory(self) -> None:
        from gpulab.hardware.host_memory import reset_peak_rss

        reset_peak_rss()

    def peak_memory_bytes(self) -> int:
        from gpulab.hardware.host_memory import peak_rss_bytes

        return peak_rss_bytes()


HOST = Host()


def seam_of(device: Any) -> DeviceSeam:
    """``device`` itself when it is a seam; the host's for the CPU (``"cpu"`` or a framework's CPU device).
    Any other device needs its engine's seam: guessing would time a GPU without waiting for it."""
    if isinstance(device, DeviceSeam):
        return device
    if str(device) == "cpu":
        return HOST
    raise TypeError(
        f"the harness needs the engine's device seam for {device} (torch: "
        "gpulab.engines.torch.devices.accelerator(device))"
    )
