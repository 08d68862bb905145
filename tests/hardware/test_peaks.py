import json
import subprocess
import sys

import pytest
import torch

from gpulab.errors import ConfigError, DeviceError
from gpulab.hardware import peaks
from gpulab.hardware.peaks import DATASHEET_PEAKS, DTYPES, datasheet_peak, match_part, measure_peak, mfu


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 SXM5 80GB", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("nvidia h100 pcie", "H100 PCIe"),
    ],
)
def test_match_part_names_torch_reports(name, part):
    assert match_part(name) == part


@pytest.mark.parametrize(
    "name",
    [
        "",
        "AMD EPYC",
        "NVIDIA L40",  # not an L4 nor an L40S
        "NVIDIA A100X",
        "Tesla V100S-PCIE-32GB",  # V100S has other figures
        "NVIDIA T400",
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA GeForce RTX 4080",
        "Apple M2",
    ],
)
def test_unknown_names_match_nothing(name):
    assert match_part(name) is None
    assert datasheet_peak(name, "fp32") is None


def test_every_rule_names_a_part_in_the_table():
    assert {part for part, _ in peaks._NAME_RULES} == set(DATASHEET_PEAKS)


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "fp32", 67),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 80GB HBM3", "fp8", 1978.9),
        ("NVIDIA H100 PCIe", "bf16", 756),
        ("NVIDIA H100 NVL", "fp16", 835.5),
        ("NVIDIA H200", "bf16", 989.4),
        ("NVIDIA H200 NVL", "fp8", 1670.5),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156),
        ("NVIDIA A100 80GB PCIe", "bf16", 312),
        ("NVIDIA A10", "bf16", 125),
        ("NVIDIA A10G", "bf16", 70),
        ("NVIDIA L4", "fp8", 242.5),
        ("NVIDIA L40S", "bf16", 362),
        ("Tesla V100-SXM2-32GB", "fp16", 125),
        ("Tesla V100-PCIE-16GB", "fp16", 112),
        ("Tesla T4", "fp16", 65),
        ("NVIDIA GeForce RTX 3090", "bf16", 71),
        ("NVIDIA GeForce RTX 4090", "fp16", 165.2),
    ],
)
def test_datasheet_values_are_dense_flops(name, dtype, tflops):
    assert datasheet_peak(name, dtype) == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("Tesla V100-SXM2-32GB", "bf16"),
        ("Tesla V100-SXM2-32GB", "tf32"),
        ("Tesla T4", "bf16"),
        ("NVIDIA A100-SXM4-80GB", "fp8"),
        ("NVIDIA GeForce RTX 3090", "fp8"),
    ],
)
def test_dtype_the_part_lacks_is_none(name, dtype):
    assert datasheet_peak(name, dtype) is None


def test_table_is_consistent():
    for part, table in DATASHEET_PEAKS.items():
        assert set(table) <= set(DTYPES), part
        assert "fp32" in table and "fp16" in table, part
        assert all(isinstance(v, float) and v > 1e12 for v in table.values()), part
        if "bf16" in table:
            assert table["bf16"] == table["fp16"], part
        if "tf32" in table:
            assert table["fp16"] >= table["tf32"] >= table["fp32"] * 0.99, part


def test_unknown_dtype_lists_choices():
    with pytest.raises(ConfigError, match=r"fp32\|tf32\|bf16\|fp16\|fp8"):
        datasheet_peak("NVIDIA H100 PCIe", "int8")


def test_mfu():
    assert mfu(50e12, 100e12) == pytest.approx(0.5)
    with pytest.raises(ConfigError):
        mfu(1.0, 0.0)


# --- measured peak ----------------------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_CACHE_DIR", str(tmp_path))
    return tmp_path / "peaks.json"


def test_measure_cpu_then_cached(cache):
    first = measure_peak("cpu", "fp32", n=256, repeats=3, warmup=1)
    assert not first.cached
    assert 1e7 < first.flops_per_s < 1e14  # between a 10 MFLOP/s toy and a 100 TFLOP/s CPU
    assert first.flops_per_s == pytest.approx(2 * 256**3 / first.seconds_median)
    assert (first.device, first.dtype, first.n, first.repeats) == ("cpu", "fp32", 256, 3)
    assert first.device_name == peaks.cpu_name() and first.device_name
    assert first.torch_version == torch.__version__
    assert first.measured_at[:4].isdigit()
    assert cache.exists()

    second = measure_peak("cpu", "fp32", n=256, repeats=3, warmup=1)
    assert second.cached
    assert second.flops_per_s == first.flops_per_s

    fresh = measure_peak("cpu", "fp32", n=256, repeats=3, warmup=1, use_cache=False)
    assert not fresh.cached
    entries = json.loads(cache.read_text())
    assert len(entries) == 1
    assert next(iter(entries.values()))["measured_at"] == fresh.measured_at


def test_cache_keyed_by_dtype_and_n(cache):
    measure_peak("cpu", "fp32", n=64, repeats=1, warmup=0)
    assert not measure_peak("cpu", "fp32", n=96, repeats=1, warmup=0).cached
    assert not measure_peak("cpu", "bf16", n=64, repeats=1, warmup=0).cached
    assert len(json.loads(cache.read_text())) == 3


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"x": 1}', ""])
def test_corrupt_cache_is_ignored_and_overwritten(cache, content):
    cache.write_text(content)
    result = measure_peak("cpu", "fp32", n=64, repeats=1, warmup=0)
    assert not result.cached
    assert isinstance(json.loads(cache.read_text()), dict)


def test_malformed_entry_is_remeasured(cache):
    first = measure_peak("cpu", "fp32", n=64, repeats=1, warmup=0)
    entries = json.loads(cache.read_text())
    key = next(iter(entries))
    entries[key] = {"flops_per_s": "fast"}
    cache.write_text(json.dumps(entries))
    again = measure_peak("cpu", "fp32", n=64, repeats=1, warmup=0)
    assert not again.cached and again.flops_per_s > 0
    assert first.device_name == again.device_name


def test_unwritable_cache_is_not_fatal(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GPULAB_CACHE_DIR", str(blocker / "sub"))  # a directory under a file: mkdir fails
    assert measure_peak("cpu", "fp32", n=64, repeats=1, warmup=0).flops_per_s > 0


def test_cache_dir_fallbacks(tmp_path, monkeypatch):
    monkeypatch.delenv("GPULAB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert peaks.cache_path() == tmp_path / "xdg" / "gpulab" / "peaks.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert peaks.cache_dir() == tmp_path / "home" / ".cache" / "gpulab"


def test_tf32_on_cpu_is_fp32_and_restores_flags(cache):
    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
    result = measure_peak("cpu", "tf32", n=64, repeats=1, warmup=0)
    assert result.dtype == "tf32" and result.flops_per_s > 0
    assert (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32) == before


def test_tf32_context_restores_on_error():
    before = torch.get_float32_matmul_precision()
    with pytest.raises(RuntimeError), peaks._tf32_enabled():
        assert torch.get_float32_matmul_precision() == "high"
        raise RuntimeError
    assert torch.get_float32_matmul_precision() == before


def test_fp8_is_not_measurable(cache):
    with pytest.raises(ConfigError, match="fp8"):
        measure_peak("cpu", "fp8", n=64)


def test_unknown_dtype_and_device(cache):
    with pytest.raises(ConfigError, match="fp32"):
        measure_peak("cpu", "fp64", n=64)
    with pytest.raises(ConfigError, match="cpu"):
        measure_peak("tpu", "fp32", n=64)
    with pytest.raises(ConfigError):
        measure_peak("cpu", "fp32", n=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_gpu_is_a_device_error(cache):
    with pytest.raises(DeviceError):
        measure_peak("cuda", "bf16")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_measure_cuda_below_datasheet(cache):
    result = measure_peak("cuda", "bf16", n=4096, repeats=5)
    peak = datasheet_peak(result.device_name, "bf16")
    assert result.flops_per_s > 0
    if peak is not None:
        assert result.flops_per_s < 1.1 * peak


def test_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from gpulab.hardware import peaks, nvml\n"
        "assert peaks.datasheet_peak('NVIDIA L4', 'fp8') == 242.5e12\n"
        "nvml.nvml_status(); nvml.read_gpu(0); nvml.parse_visible_devices('0,1')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_measuring_leaves_the_global_rng_alone(cache):
    # MFU measures the peak at fit start, after a resume restored the RNG: a draw here would shift dropout.
    before = torch.get_rng_state()
    measure_peak("cpu", "fp32", n=32, repeats=1, warmup=0, use_cache=False)
    assert torch.equal(torch.get_rng_state(), before)


def test_train_doctor_and_profile_share_one_cached_peak_written_only_when_new(cache):
    from gpulab.engines.torch.measure.flops import device_peaks

    first = device_peaks("cpu", "fp32")  # what train and profile use
    written = cache.stat()
    again = device_peaks("cpu", "fp32")
    assert again.measured == first.measured
    assert (cache.stat().st_ino, cache.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    doctor = measure_peak("cpu", "fp32")  # what `gpulab doctor --peak` shows: the same figure
    assert doctor.cached and doctor.flops_per_s == first.measured


def test_a_run_beating_the_cached_peak_re_measures_it_and_mfu_stays_within_100_percent(cache):
    from gpulab.engines.torch.measure.flops import device_peaks

    measure_peak("cpu", "fp32")
    entries = json.loads(cache.read_text())
    (key,) = entries
    entries[key]["flops_per_s"] = 1.0  # a peak measured while the machine was very busy
    cache.write_text(json.dumps(entries))
    peaks = device_peaks("cpu", "fp32")
    assert peaks.measured == 1.0
    fresh, note = peaks.within_peak(1e6)
    assert fresh.measured > 1e6 and "re-measured" in note
    assert fresh.mfu(1e6)["mfu_measured"] < 1
    assert json.loads(cache.read_text())[key]["flops_per_s"] == fresh.measured  # the cache keeps it
    raised, note = device_peaks("cpu", "fp32").within_peak(1e18)  # faster than any product: raised to it
    assert raised.measured == 1e18 and raised.mfu(1e18)["mfu_measured"] == 1.0 and "peak now" in note
