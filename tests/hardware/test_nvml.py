import sys
from types import SimpleNamespace

import pynvml
import pytest

from gpulab.hardware import nvml
from gpulab.hardware.nvml import GpuReading, parse_visible_devices, physical_index_for


@pytest.fixture(autouse=True)
def fresh_init():
    """Every test starts with NVML not yet initialised, and leaves it that way."""
    nvml._init.cache_clear()
    yield
    nvml._init.cache_clear()


def _raise(error):
    def fail(*args, **kwargs):
        raise error

    return fail


UUIDS = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-abcd-3333"]


@pytest.fixture
def fake_nvml(monkeypatch):
    """Three H100s on a 550 driver; power draw is not supported."""
    fakes = {
        "nvmlInit": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetCudaDriverVersion": lambda: 12040,
        "nvmlDeviceGetCount": lambda: len(UUIDS),
        "nvmlDeviceGetHandleByIndex": lambda i: (
            i if 0 <= i < len(UUIDS) else _raise(pynvml.NVMLError_InvalidArgument())()
        ),
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3" if h == 1 else "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: UUIDS[h],
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=87, memory=41),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=1 << 30, total=80 << 30, free=79 << 30),
        "nvmlDeviceGetPowerUsage": _raise(pynvml.NVMLError_NotSupported()),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
        "nvmlDeviceGetTemperature": lambda h, sensor: 45,
        "nvmlDeviceGetClockInfo": lambda h, clock: {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619}[
            clock
        ],
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)


def _assert_all_unavailable(reason_part):
    available, reason = nvml.nvml_status()
    assert not available and reason_part in reason and reason.startswith("NVML unavailable")
    assert nvml.driver_version() is None
    assert nvml.cuda_driver_version() is None
    assert nvml.physical_gpu_count() == 0
    assert nvml.gpu_names() == []
    reading = nvml.read_gpu(0)
    assert not reading.available and reason_part in reading.reason
    assert reading.name is None and reading.memory_total_bytes is None
    assert physical_index_for(0, None) == 0
    assert physical_index_for(0, "GPU-abc") is None


def test_no_driver_reports_unavailable(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlInit", _raise(pynvml.NVMLError_LibraryNotFound()))
    _assert_all_unavailable("driver library not found")


def test_driver_not_loaded(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlInit", _raise(pynvml.NVMLError_DriverNotLoaded()))
    _assert_all_unavailable("driver not loaded")


def test_other_nvml_error(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlInit", _raise(pynvml.NVMLError_Unknown()))
    _assert_all_unavailable("Unknown")


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    _assert_all_unavailable("not installed")


def test_this_machine_never_raises():
    # Whatever this machine has (here: no driver), nothing raises and the answers agree with each other.
    available, reason = nvml.nvml_status()
    assert isinstance(reason, str) and reason
    assert nvml.physical_gpu_count() == len(nvml.gpu_names())
    assert isinstance(nvml.read_gpu(0), GpuReading)
    if not available:
        assert nvml.physical_gpu_count() == 0


def test_init_once(monkeypatch):
    calls = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append(1))
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    for _ in range(3):
        nvml.nvml_status()
        nvml.physical_gpu_count()
    assert calls == [1]


def test_status_and_versions(fake_nvml):
    assert nvml.nvml_status() == (True, "NVML available (driver 550.54.15)")
    assert nvml.driver_version() == "550.54.15"
    assert nvml.cuda_driver_version() == (12, 4)
    assert nvml.physical_gpu_count() == 3
    assert nvml.gpu_names() == ["NVIDIA H100 80GB HBM3"] * 3  # bytes from old pynvml decoded


def test_read_gpu_fills_fields_and_leaves_unsupported_none(fake_nvml):
    reading = nvml.read_gpu(2)
    assert reading == GpuReading(
        available=True,
        reason="unreadable: power_w",
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-abcd-3333",
        utilization_gpu_pct=87,
        utilization_memory_pct=41,
        memory_used_bytes=1 << 30,
        memory_total_bytes=80 << 30,
        power_w=None,
        power_limit_w=700.0,
        temperature_c=45,
        sm_clock_mhz=1980,
        memory_clock_mhz=2619,
    )


def test_read_gpu_all_supported(fake_nvml, monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda h: 312_500)
    reading = nvml.read_gpu(0)
    assert reading.reason == "ok" and reading.power_w == 312.5


def test_read_gpu_bad_index(fake_nvml):
    reading = nvml.read_gpu(7)
    assert not reading.available and "GPU 7" in reading.reason and reading.name is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0,2", ["0", "2"]),
        ("2,0", ["2", "0"]),
        ("", []),
        ("GPU-abc,1", ["GPU-abc", "1"]),
        ("0,x,1", ["0"]),
        (" 1 , 3 ", ["1", "3"]),
        ("-1", []),
        ("0,-1,1", ["0"]),
        ("01,2", ["1", "2"]),
        ("0,1,0", []),  # a repeated device hides them all, as CUDA does
        ("MIG-1234,0", ["MIG-1234", "0"]),
        ("0,,1", ["0"]),
    ],
)
def test_parse_visible_devices(value, expected):
    assert parse_visible_devices(value) == expected


@pytest.mark.parametrize(
    ("torch_index", "value", "expected"),
    [
        (0, "0,2", 0),
        (1, "0,2", 2),
        (0, "2,0", 2),
        (1, "2,0", 0),
        (2, "2,0", None),
        (0, "", None),
        (1, "GPU-abc,1", 1),  # the UUID before it cannot be checked without NVML
        (0, "GPU-abc,1", None),
        (0, "0,x,1", 0),
        (1, "0,x,1", None),
        (3, None, 3),
        (-1, "0", None),
    ],
)
def test_physical_index_without_nvml(monkeypatch, torch_index, value, expected):
    monkeypatch.setattr(pynvml, "nvmlInit", _raise(pynvml.NVMLError_LibraryNotFound()))
    assert physical_index_for(torch_index, value) == expected


@pytest.mark.parametrize(
    ("torch_index", "value", "expected"),
    [
        (0, "GPU-abc,1", 2),  # unique UUID prefix, as CUDA allows
        (1, "GPU-abc,1", 1),
        (0, "GPU-bbbb-2222", 1),
        (0, "GPU-", None),  # ambiguous prefix
        (0, "GPU-zzz,1", None),
        (1, "GPU-zzz,1", None),  # CUDA ends the list at the unknown UUID
        (1, "0,2", 2),
        (1, "0,5,1", None),  # GPU 5 does not exist here: the list ends there
        (3, None, None),
        (2, None, 2),
    ],
)
def test_physical_index_with_nvml(fake_nvml, torch_index, value, expected):
    assert physical_index_for(torch_index, value) == expected


def test_physical_index_for_mig(fake_nvml, monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda uuid: "mig-handle")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", lambda h: "parent")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetIndex", lambda h: 1)
    assert physical_index_for(0, "MIG-1234") == 1
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", _raise(pynvml.NVMLError_NotFound()))
    assert physical_index_for(0, "MIG-1234") is None
