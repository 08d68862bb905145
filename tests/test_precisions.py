"""One precision table (gpulab.precisions): every engine has each row, and nothing guesses for a name it
does not know."""

from __future__ import annotations

import pytest

from gpulab import precisions
from gpulab.config import TrainerSettings, parse_config
from gpulab.errors import ConfigError


def test_config_offers_exactly_the_tables_names():
    for name in precisions.NAMES:
        assert parse_config(TrainerSettings, {"precision": name}).precision == name
    for name in precisions.STRATEGIES:
        assert parse_config(TrainerSettings, {"strategy": name}).strategy == name
    for key, names in (("precision", precisions.NAMES), ("strategy", precisions.STRATEGIES)):
        with pytest.raises(ConfigError) as err:
            parse_config(TrainerSettings, {key: "fp8"})
        assert str(err.value).endswith(f"is invalid: valid choices: {'|'.join(names)}")


def test_the_torch_engine_has_a_class_for_every_row():
    from gpulab.engines.torch.runtime.precision import PRECISIONS as TORCH_CLASSES

    assert set(TORCH_CLASSES) == set(precisions.PRECISIONS)
    for name, spec in precisions.PRECISIONS.items():
        if spec.mixed:
            assert str(TORCH_CLASSES[name].compute_dtype) == f"torch.{spec.compute_dtype}"


def test_the_tensorflow_engine_reads_its_policy_from_the_table():
    from gpulab.engines.tensorflow.precision import TfPrecision

    for name, spec in precisions.PRECISIONS.items():
        tf = TfPrecision(name)
        assert (tf.policy, tf.scales_loss) == (spec.keras_policy, spec.loss_scaling)


def test_an_unknown_precision_is_an_error_not_an_fp32_peak():
    """MFU against the fp32 peak for a precision it does not know would be a wrong figure."""
    from gpulab.engines.torch.measure.flops import device_peaks

    with pytest.raises(
        ConfigError, match=r"unknown precision 'fp8'; valid: fp32\|tf32\|bf16-mixed\|fp16-mixed"
    ):
        device_peaks("cpu", "fp8", measure=False)


def test_each_engine_has_its_strategies():
    """Each engine says which of the table's strategies it has (the others it lacks: refused by config)."""
    from gpulab import engine_registry as engines

    def of(name: str) -> tuple[str, ...]:
        return engines.get(name).lacks["strategy"].takes

    assert of("torch") == ("auto", "single", "ddp", "fsdp2", "dp")
    assert of("tensorflow") == ("auto", "single", "mirrored", "multiworker")
    for name in engines.names():
        assert set(of(name)) <= set(precisions.STRATEGIES), name


class _FakeTf:
    """The two ``tf.config`` calls ``device_facts`` makes, answering for GPUs of the given capabilities."""

    def __init__(self, capabilities: list[tuple[int, int] | None]) -> None:
        gpus = [f"GPU:{i}" for i in range(len(capabilities))]
        details = dict(zip(gpus, capabilities, strict=True))
        self.config = self
        self.experimental = self
        self.list_physical_devices = lambda kind: gpus if kind == "GPU" else ["CPU:0"]
        self.get_device_details = lambda gpu: {"compute_capability": details[gpu]} if details[gpu] else {}


# Building a CUDA GradScaler on a CPU-only machine warns that it disables itself; irrelevant here.
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((6, 1), "fp32"),
        ((7, 0), "fp16-mixed"),
        ((7, 5), "fp16-mixed"),
        ((8, 0), "bf16-mixed"),
        ((9, 0), "bf16-mixed"),
    ],
)
def test_auto_gives_one_answer_per_device_on_both_engines(monkeypatch, capability, expected):
    """The same GPU (faked: its compute capability as each framework reports it) gets the same precision
    from torch's and TensorFlow's ``auto``: a V100 or T4 fp16-mixed on both, an A100 bf16-mixed."""
    import torch

    from gpulab.engines.tensorflow.devices import device_facts
    from gpulab.engines.tensorflow.precision import resolve_precision as tf_resolve
    from gpulab.engines.torch.runtime.precision import resolve_precision as torch_resolve

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    on_torch, reason = torch_resolve("auto", torch.device("cuda:0"))
    on_tf = tf_resolve("auto", device_facts(_FakeTf([(1, 0), capability]), "/GPU:1"), 2.0**16, 2000)
    assert on_torch.name == on_tf.name == expected
    assert f"compute capability {capability[0]}.{capability[1]}" in reason


def test_auto_on_a_cpu_or_a_gpu_of_unknown_capability_is_fp32_on_both_engines():
    import torch

    from gpulab.engines.tensorflow.devices import device_facts
    from gpulab.engines.tensorflow.precision import resolve_precision as tf_resolve
    from gpulab.engines.torch.runtime.precision import resolve_precision as torch_resolve

    assert torch_resolve("auto", torch.device("cpu"))[0].name == "fp32"
    assert tf_resolve("auto", device_facts(_FakeTf([(8, 0)]), "/CPU:0"), 2.0**16, 2000).name == "fp32"
    unknown = device_facts(_FakeTf([None]), "/GPU:0")
    assert unknown.capability is None
    assert precisions.auto(unknown) == ("fp32", "/GPU:0: fp32, as its compute capability is unknown")
