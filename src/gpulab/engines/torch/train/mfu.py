"""``MfuCallback``: model FLOPs utilisation in the logged metrics and the run's summary.

FLOPs per sample are counted on the first real optimizer step (``FlopCounterMode`` around it, on this
rank, divided by the samples that step took): nothing extra is computed and no random number drawn, so
counting costs the fit nothing before its first step (a separate fake-tensor trace cost the ``mlp`` recipe
50-110 ms). MFU therefore starts at the first log after that step (the first step is not timed anyway). A
compiled model, or one under ``micro_batch: auto`` (whose first step may be retried after an
out-of-memory), is traced once with fake tensors at fit start instead (``profiling.flops``). At every log
the throughput the Trainer measured becomes ``mfu`` (against the datasheet peak of this GPU and precision,
when the part is known) and ``mfu_measured`` (against the matmul peak measured on this device,
``hardware.peaks.measure_peak``, cached; a run that beats it has it re-measured, so ``mfu_measured`` never
exceeds 1). Per device: the global samples/s is divided by the world size.
"""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils.flop_counter import FlopCounterMode

from gpulab.core.callbacks.base import Callback
from gpulab.engines.torch.data.transfer import to_device
from gpulab.engines.torch.runtime.memory_estimate import holds_shards
from gpulab.errors import GpulabWarning


class MfuCallback(Callback):
    """Adds ``mfu`` and ``mfu_measured`` to logged metrics; ``summary()`` for ``summary.json``.

    ``flops_per_sample``: training FLOPs of one sample (forward + backward), or None to count them.
    ``example_data``: where to take an example batch for counting (a tuple of tensors or a Dataset);
    None: the trainer's own training data. ``measure_peak``: time this device's matmul peak.
    """

    def __init__(
        self,
        flops_per_sample: float | None = None,
        *,
        example_data: Any = None,
        measure_peak: bool = True,
    ) -> None:
        self.flops_per_sample = flops_per_sample
        self.example_data = example_data
        self.measure_peak = measure_peak
        self.peaks = None
        self.world_size = 1
        self.last: dict[str, float | None] = {}
        self._summary: dict[str, Any] = {}
        self.note = ""
        self._first_step = None  # a FlopCounterMode counting the first real optimizer step
        self._samples_at_start = 0

    def on_fit_start(self, trainer, state):
        from gpulab.engines.torch.measure.flops import device_peaks

        rt = trainer.runtime
        self.world_size = rt.world_size
        self.peaks = device_peaks(rt.device, rt.precision.name, measure=self.measure_peak)
        if self.flops_per_sample is not None:
            return
        s = trainer.settings
        if (s.compile or s.micro_batch == "auto") and not holds_shards(trainer.model):
            try:
                self.flops_per_sample = self._count(trainer)
            except Exception as exc:  # MFU is a report, never a reason to stop training
                self.note = f"could not count FLOPs: {type(exc).__name__}: {exc}"
        else:  # after the peak's own matmuls, or they would count
            self._samples_at_start = state.samples_seen  # a resumed fit starts past zero
            self._first_step = FlopCounterMode(display=False)
            self._first_step.__enter__()

    # The FLOP count ends at the first step, an eager warm-up step under cuda_graph; later steps read nothing.
    graph_safe = True

    def on_step_end(self, trainer, state):
        if self._first_step is not None:
            flops = self._stop_counting()
            samples = state.samples_seen - self._samples_at_start
            self.flops_per_sample = flops / samples if samples and flops else None

    def _stop_counting(self) -> int:
        counter, self._first_step = self._first_step, None
        counter.__exit__(None, None, None)
        return counter.get_total_flops()

    def _count(self, trainer) -> float | None:
        from gpulab.engines.torch.measure.flops import training_step_flops
        from gpulab.engines.torch.runtime.memory_estimate import example_batch

        rows = trainer.settings.batch_size
        batch = example_batch(self.example_data, rows) if self.example_data is not None else None
        if batch is None:
            batch = example_batch(trainer.train_source, rows)
        if batch is None:
            self.note = "no example batch to count FLOPs from: pass flops_per_sample or example_data"
            return None
        batch = to_device(batch, trainer.runtime.device)
        count = training_step_flops(trainer.model, trainer.loss_fn, batch, autocast=trainer.runtime.autocast)
        return count.per_sample

    def mfu_at(self, samples_per_s: float | None) -> dict[str, float | None]:
        """MFU per device at a global throughput of ``samples_per_s``."""
        if self.peaks is None or not self.flops_per_sample or not samples_per_s:
            return {"mfu": None, "mfu_measured": None}
        achieved = self.flops_per_sample * samples_per_s / self.world_size
        self.peaks, note = self.peaks.within_peak(achieved)  # never above 100 % of its divisor
        if note:
            self.note = f"{self.note}; {note}" if self.note else note
            warnings.warn(f"MFU: {note}", GpulabWarning, stacklevel=2)
        return self.peaks.mfu(achieved)

    def on_log(self, trainer, state, metrics):
        values = self.mfu_at(metrics.get("samples_per_s"))
        self.last = values
        metrics.update({k: v for k, v in values.items() if v is not None})

    def on_exception(self, trainer, state, error):
        if self._first_step is not None:  # never leave the counting mode on for the rest of the process
            self._stop_counting()

    def on_fit_end(self, trainer, state, result):
        if self._first_step is not None:  # the fit ended before its first step
            self._stop_counting()
        values = self.mfu_at(result.samples_per_s)
        per_device = result.samples_per_s / self.world_size if result.samples_per_s else None
        self._summary = {
            **values,
            "flops_per_sample": self.flops_per_sample,
            "achieved_flops_per_s": (
                self.flops_per_sample * per_device if self.flops_per_sample and per_device else None
            ),
            "peaks": self.peaks.to_json() if self.peaks is not None else None,
        }
        if self.note:
            self._summary["note"] = self.note
        extras = getattr(result, "extras", None)
        if isinstance(extras, dict):
            extras["mfu"] = self._summary

    def summary(self) -> dict[str, Any]:
        """The run's MFU (from its overall samples/s), FLOPs per sample and the peaks used."""
        return dict(self._summary)
