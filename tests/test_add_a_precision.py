"""docs/ARCHITECTURE.md's "How to add a precision", followed: a row registered for the test
(``precision_plugin.py``: float16 compute without a loss scaler, under a new name) and the torch engine's
class for it, and nothing else edited: config takes the name, the CLI's help names it, ``gpulab train``
runs it, FLOPs and MFU are taken against its peak dtype, tune tries it where that dtype is fast, the
diagnosis and the TensorFlow engine read it from the row."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import precision_plugin  # (tests/ is on the path)
import pytest
import torch

from gpulab import precisions
from gpulab.config import TrainerSettings, parse_config
from gpulab.engines.torch.runtime import precision as torch_precision
from gpulab.errors import ConfigError

NAME = precision_plugin.ROW.name


class FP16Unscaled(torch_precision.BF16Mixed):
    """The torch engine's class for the row: autocast to its compute dtype, no scaler (bf16-mixed's)."""

    name = NAME
    compute_dtype = getattr(torch, precision_plugin.ROW.compute_dtype)


@pytest.fixture
def registered(monkeypatch):
    """The row and its torch class until the test ends."""
    monkeypatch.setattr(precisions, "NAMES", precisions.NAMES)  # put back as they were when it ends
    monkeypatch.setattr(precisions, "HELP", precisions.HELP)
    precision_plugin.register()
    monkeypatch.setitem(torch_precision.PRECISIONS, NAME, FP16Unscaled)
    yield
    del precisions.PRECISIONS[NAME]


def test_config_takes_the_registered_row_and_names_it_among_the_choices(registered):
    assert parse_config(TrainerSettings, {"precision": NAME}).precision == NAME
    with pytest.raises(
        ConfigError, match=rf"valid choices: auto\|fp32\|tf32\|bf16-mixed\|fp16-mixed\|{NAME}$"
    ):
        parse_config(TrainerSettings, {"precision": "fp8"})


def test_before_it_is_registered_config_refuses_the_name():
    with pytest.raises(ConfigError, match=r"valid choices: auto\|fp32\|tf32\|bf16-mixed\|fp16-mixed$"):
        parse_config(TrainerSettings, {"precision": NAME})


_HELP = """
import sys
sys.path.insert(0, sys.argv[1])
import precision_plugin
precision_plugin.register()  # a plugin registers, then runs the CLI
from gpulab.cli import main
raise SystemExit(main(["train", "--help"]))
"""


def test_the_clis_help_names_it():
    tests = str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, "-c", _HELP, tests], capture_output=True, text=True, check=True)
    assert f"auto|fp32|tf32|bf16-mixed|fp16-mixed|{NAME}" in proc.stdout


def test_gpulab_train_runs_it(registered, tmp_path, capsys):
    """On a CPU that emulates fp16 the run says so in one warning, read from the row's peak dtype."""
    from gpulab.cli import main
    from gpulab.hardware.native_dtypes import native_dtypes

    out = tmp_path / "run"
    argv = [
        "train",
        "mlp",
        "--precision",
        NAME,
        "--max-steps",
        "2",
        "--out",
        str(out),
        "--set",
        "progress=false",
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    assert code == 0, capsys.readouterr().err
    slow = [w for w in caught if str(w.message).startswith(f"{NAME} on cpu: this CPU has no native fp16")]
    assert len(slow) == (native_dtypes("cpu")["fp16"] is False)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["precision"] == NAME and summary["steps"] == 2 and summary["final_loss"] > 0


def test_flops_mfu_tune_and_the_diagnosis_read_its_row(registered):
    from gpulab.engines.torch.measure.flops import device_peaks
    from gpulab.hardware.native_dtypes import native_dtypes
    from gpulab.measure.diagnosis import diagnose
    from gpulab.measure.knobs import precision_group

    # MFU: taken against the peak of its peak dtype, as fp16-mixed's (the same dtype)
    peaks = device_peaks("cpu", NAME, measure=False)
    assert peaks.dtype == "fp16" == device_peaks("cpu", "fp16-mixed", measure=False).dtype

    # tune: tried where fp16 is fast, else left out with the reason fp16-mixed is
    group = precision_group(torch.device("cpu"), "fp32")
    tried = {c.settings["precision"] for c in group.candidates}
    if native_dtypes("cpu")["fp16"]:
        assert {NAME, "fp16-mixed"} <= tried
    else:
        assert group.skipped[NAME] == group.skipped["fp16-mixed"]

    # the diagnosis: fp16 emulated on this device is the bound, and the fix names fp32
    verdict = diagnose(
        {"forward": 0.5, "backward": 0.5, "step": 1.0},
        device_type="cpu",
        precision=NAME,
        native={"bf16": False, "fp16": False},
    )
    assert verdict.bound == "compute-bound" and verdict.reason.startswith(
        f"{NAME} on a device without native fp16"
    )


def test_the_tensorflow_engine_reads_its_policy_from_the_row(registered):
    from gpulab.engines.tensorflow.precision import TfPrecision

    tf = TfPrecision(NAME)
    assert (tf.policy, tf.scales_loss) == ("mixed_float16", False)
