"""Native bf16/fp16 detection: what a device computes fast, from /proc/cpuinfo flags or the compute
capability, so no one is advised (or silently given) a precision the device only emulates."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

from gpulab.engines.torch.runtime import Runtime
from gpulab.hardware import native_dtypes as nd
from gpulab.measure.diagnosis import diagnose

# The 2-core machine of issue 14 (no AVX-512), this VM (AVX-512 BF16), a Sapphire Rapids part (AMX) and
# a Graviton3 (Arm "Features" with bf16).
NO_AVX512 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n"
AVX512_BF16 = "flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_fp16\n"
AMX = "flags\t\t: avx2 avx512f amx_bf16 amx_tile amx_int8 amx_fp16\n"
GRAVITON3 = "Features\t: fp asimd evtstrm aes sha1 sha2 fphp asimdhp bf16 i8mm sve\n"


@pytest.mark.parametrize(
    ("cpuinfo", "bf16", "fp16"),
    [(NO_AVX512, False, False), (AVX512_BF16, True, False), (AMX, True, True), (GRAVITON3, True, True)],
)
def test_cpu_flags_decide_native_bf16_and_fp16(cpuinfo, bf16, fp16):
    flags = nd.cpu_flags(cpuinfo)
    assert (nd.native_on_cpu("bf16", flags), nd.native_on_cpu("fp16", flags)) == (bf16, fp16)


def test_unknown_cpu_flags_are_unknown_not_false():
    assert nd.cpu_flags("processor: 0\n") is None
    assert nd.native_on_cpu("bf16", None) is None


@pytest.mark.parametrize(
    ("capability", "bf16", "fp16"), [((6, 1), False, False), ((7, 5), False, True), ((8, 0), True, True)]
)
def test_cuda_capability_decides(capability, bf16, fp16):
    assert (nd.native_on_cuda("bf16", capability), nd.native_on_cuda("fp16", capability)) == (bf16, fp16)


def _this_cpu_is(monkeypatch, cpuinfo: str) -> None:
    monkeypatch.setattr(nd, "cpu_flags", lambda text=None: set(cpuinfo.partition(":")[2].split()))


def test_asking_for_emulated_bf16_warns_in_one_line(monkeypatch):
    _this_cpu_is(monkeypatch, NO_AVX512)
    with pytest.warns(UserWarning) as caught:
        Runtime(device="cpu", precision="bf16-mixed")
    (message,) = [str(w.message) for w in caught]
    assert "\n" not in message and "no native bf16" in message and "--precision fp32" in message
    _this_cpu_is(monkeypatch, AVX512_BF16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Runtime(device="cpu", precision="bf16-mixed")  # native here: no word


def test_diagnosis_never_advises_a_precision_the_device_emulates():
    compute = {"forward": 0.5, "backward": 0.5, "step": 1.0}
    slow = {"bf16": False, "fp16": False}
    d = diagnose(compute, device_type="cpu", mfu=0.6, precision="fp32", native=slow)
    assert d.bound == "compute-bound" and "bf16" not in d.fix and "fp16" not in d.fix
    busy = diagnose(compute, device_type="cpu", mfu=0.05, precision="fp32", native=slow)
    assert busy.bound == "memory-bound" and "bf16" not in busy.fix
    full = diagnose(compute, device_type="cpu", memory_peak_fraction=0.97, precision="fp32", native=slow)
    assert "bf16" not in full.fix
    # A run that asked for the emulated precision is told to leave it, first.
    emulated = diagnose(compute, device_type="cpu", mfu=0.01, precision="bf16-mixed", native=slow)
    assert "emulated" in emulated.reason and "--precision fp32" in emulated.fix
    fast = diagnose(
        compute, device_type="cpu", mfu=0.6, precision="fp32", native={"bf16": True, "fp16": False}
    )
    assert "bf16-mixed" in fast.fix
    old_gpu = diagnose(
        compute, device_type="cuda", mfu=0.6, precision="fp32", native={"bf16": False, "fp16": True}
    )
    assert "fp16-mixed" in old_gpu.fix and "bf16" not in old_gpu.fix


def test_native_dtypes_of_this_machine_reads_its_flags():
    result = nd.native_dtypes(torch.device("cpu"))
    assert set(result) == {"bf16", "fp16"} and all(v in (True, False, None) for v in result.values())


@pytest.mark.skipif(nd.native_dtypes("cpu")["fp16"] is not False, reason="this CPU computes fp16 natively")
def test_cli_warns_in_one_line_when_asked_for_an_emulated_precision(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "train", "mlp", "--out", str(out), "--max-steps", "3",
         "--precision", "fp16-mixed", "--set", "tensorboard=false", "--set", "mfu=false"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "fp16" in line or "warnings.warn" in line]
    assert len(lines) == 1 and lines[0].startswith("gpulab: warning: fp16-mixed on cpu"), proc.stderr
