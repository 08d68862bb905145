"""One precision table (gpulab.precisions): every engine has each row, and nothing guesses for a name it
does not know."""

from __future__ import annotations

import pytest

from gpulab import precisions
from gpulab.config import PRECISIONS, STRATEGIES, TrainerSettings, parse_config
from gpulab.errors import ConfigError


def test_config_offers_exactly_the_tables_names():
    assert PRECISIONS == precisions.NAMES
    assert tuple(precisions.STRATEGIES) == STRATEGIES
    for name in precisions.NAMES:
        assert parse_config(TrainerSettings, {"precision": name}).precision == name


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
    assert precisions.strategies_of("torch") == ("auto", "single", "ddp", "fsdp2", "dp")
    assert precisions.strategies_of("tensorflow") == ("auto", "single", "mirrored", "multiworker")
