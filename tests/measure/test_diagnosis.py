"""The bound and its fix, from measured numbers (a pure function)."""

from __future__ import annotations

from gpulab.measure.diagnosis import diagnose, diagnose_run


def _b(**parts):
    step = sum(parts.values())
    return {**parts, "step": step}


def test_input_bound_above_ten_percent_data_wait():
    d = diagnose(_b(data=0.2, forward=0.4, backward=0.4), device_type="cuda", gpu_utilization_pct=40)
    assert d.bound == "input-bound" and "num_workers" in d.fix and "pin_memory" in d.fix
    assert d.fractions["data"] == 0.2


def test_low_utilisation_without_data_wait_is_host_bound():
    d = diagnose(_b(data=0.01, forward=0.5, backward=0.49), device_type="cuda", gpu_utilization_pct=35)
    assert d.bound == "host-bound" and "torch.compile" in d.fix and "batch" in d.fix


def test_fixed_cost_dominating_is_host_bound_on_cpu():
    d = diagnose(_b(forward=0.5, backward=0.5), device_type="cpu", fixed_cost_fraction=0.8, mfu=0.01)
    assert d.bound == "host-bound"


def test_busy_gpu_low_mfu_is_memory_bound_and_full_memory_too():
    b = _b(data=0.0, forward=0.5, backward=0.5)
    d = diagnose(b, device_type="cuda", gpu_utilization_pct=95, mfu=0.05, precision="fp32")
    assert d.bound == "memory-bound" and "bf16" in d.fix
    full = diagnose(b, device_type="cuda", gpu_utilization_pct=95, memory_peak_fraction=0.97, mfu=0.6)
    assert full.bound == "memory-bound" and "activation checkpointing" in full.fix


def test_busy_gpu_high_mfu_is_compute_bound():
    d = diagnose(
        _b(forward=0.5, backward=0.5), device_type="cuda", gpu_utilization_pct=98, mfu=0.55, precision="fp32"
    )
    assert d.bound == "compute-bound" and "bf16" in d.fix
    d16 = diagnose(
        _b(forward=0.5, backward=0.5),
        device_type="cuda",
        gpu_utilization_pct=98,
        mfu=0.55,
        precision="bf16-mixed",
    )
    assert d16.bound == "compute-bound" and "GPUs" in d16.fix


def test_communication_bound():
    d = diagnose(_b(forward=0.3, backward=0.3, communication=0.4), device_type="cuda", gpu_utilization_pct=90)
    assert d.bound == "communication-bound"


def test_run_level_diagnosis_from_the_trainers_totals():
    d = diagnose_run(train_seconds=10.0, data_wait_seconds=3.0, device_type="cpu")
    assert d.bound == "input-bound"


def test_a_compute_bound_cpu_with_native_bf16_is_told_to_try_it_and_how_to_know():
    """Native bf16 on a CPU is not always faster (digits measured 0.84-1.04x): the fix says try, and that
    gpulab tune measures it."""
    d = diagnose(
        _b(forward=0.5, backward=0.5),
        device_type="cpu",
        mfu=0.3,
        precision="fp32",
        native={"bf16": True, "fp16": False},
    )
    assert d.bound == "compute-bound"
    assert "try bf16-mixed" in d.fix and "gpulab tune measures whether it pays" in d.fix


def test_a_run_at_35_percent_mfu_is_never_host_bound_whatever_the_mean_utilisation():
    # the H100 GPT-2-small compiled run of 2026-11-26: MFU 37.8 %, NVML's whole-fit mean 4 % (compilation
    # and validation counted as idle GPU)
    d = diagnose(
        _b(data=0.0, forward=0.5, backward=0.5), device_type="cuda", gpu_utilization_pct=4, mfu=0.378
    )
    assert d.bound == "compute-bound"
    assert diagnose(_b(forward=1.0), device_type="cuda", gpu_utilization_pct=4, mfu=0.1).bound == "host-bound"


def test_the_fits_diagnosis_reads_the_steady_utilisation_not_the_whole_fits_mean():
    from types import SimpleNamespace

    from gpulab.core.callbacks.nvml_sampler import _steady
    from gpulab.measure.diagnosis import diagnose_fit

    # windows: compile + warm-up (3 %), steady steps (96-98 %), one spanning validation (40 %)
    steady = _steady([3.0, 97.0, 96.0, 40.0, 98.0, 97.0])
    assert steady == 97.0 and _steady([3.0, 97.0]) is None
    extras = {
        "data_wait_s": 0.0,
        "memory": {},
        "nvml": {"mean": {"utilization_gpu_pct": 30.0}, "steady_utilization_gpu_pct": steady},
    }
    result = SimpleNamespace(extras=extras, train_seconds=10.0, precision="bf16-mixed", compiled=True)
    assert diagnose_fit(result, "cuda").bound == "compute-bound"
    del extras["nvml"]["steady_utilization_gpu_pct"]  # a short run: the mean is all there is
    assert diagnose_fit(result, "cuda").bound == "host-bound"
