"""Device discovery with CUDA present and absent (monkeypatched), and select_device."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gpulab.errors import DeviceError
from gpulab.hardware import devices, nvml


def test_cpu_is_always_first():
    found = devices.discover()
    assert found[0].type == "cpu" and found[0].memory_total_bytes > 0
    assert found[0].details["logical_cores"] >= 1


def test_no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.cuda_devices() == []
    choice = devices.select_device("auto")
    assert choice.device == "cpu" and "no GPU" in choice.reason


@pytest.fixture
def two_fake_gpus(monkeypatch):
    props = [SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
                             total_memory=80 << 30), SimpleNamespace(name="NVIDIA A100-SXM4-40GB", major=8,
                             minor=0, multi_processor_count=108, total_memory=40 << 30)]  # fmt: skip
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(nvml, "driver_version", lambda: "570.86")
    monkeypatch.setattr(devices, "nccl_version", lambda: "2.27.3")


def test_cuda_present(two_fake_gpus):
    gpus = devices.cuda_devices()
    assert [g.spec for g in gpus] == ["cuda:0", "cuda:1"]
    h100 = gpus[0]
    assert (h100.compute_capability, h100.sm_count, h100.memory_total_bytes) == ("9.0", 132, 80 << 30)
    assert h100.details["driver"] == "570.86" and h100.details["cuda_runtime"] == "12.8"
    assert h100.to_json()["compute_capability"] == "9.0"
    assert "compute_capability" not in devices.cpu_device().to_json()


def test_auto_prefers_cuda(two_fake_gpus):
    choice = devices.select_device("auto")
    assert choice.device == "cuda:0" and "H100" in choice.reason
    assert devices.select_device("cuda:1").device == "cuda:1"
    assert devices.select_device("cuda").device == "cuda:0"
    with pytest.raises(DeviceError, match=r"'cuda:2' does not exist; available here: cpu\|cuda:0\|cuda:1"):
        devices.select_device("cuda:2")


def test_auto_order_is_cuda_mps_xpu_cpu():
    cpu = devices.DeviceInfo("cpu", None, "cpu", 1)
    mps = devices.DeviceInfo("mps", None, "Apple MPS", 1)
    xpu = devices.DeviceInfo("xpu", 0, "Intel Max", 1)
    assert devices.select_device("auto", [cpu, xpu, mps]).device == "mps"
    assert devices.select_device("auto", [cpu, xpu]).device == "xpu:0"
    assert devices.select_device("auto", [cpu]).device == "cpu"


def test_impossible_device_is_one_clear_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError) as err:
        devices.select_device("cuda")
    msg = str(err.value)
    assert "\n" not in msg and "no cuda device" in msg and "available here: cpu" in msg
