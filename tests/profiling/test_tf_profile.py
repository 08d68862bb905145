"""``gpulab profile --engine tensorflow``: TensorFlow's step timed and traced for TensorBoard.

One CLI subprocess (TensorFlow's import costs seconds and is kept out of the pytest process): the
profile.json summary with TensorFlow's own FLOP count, the fields TensorFlow does not give named as
n/a, and the trace where TensorBoard's profile plugin looks for it (``plugins/profile/<run>/*.xplane.pb``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from step_figure import assert_one_step_figure

from gpulab.errors import ConfigError
from gpulab.measure.profile_report import ProfileOptions

needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"
)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("tfprofile") / "p"
    cmd = [sys.executable, "-m", "gpulab", "profile", "mlp", "--engine", "tensorflow", "--device", "cpu"]
    cmd += [
        "--warmup",
        "1",
        "--steps",
        "4",
        "--active",
        "2",
        "--set",
        "options.samples=256",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


@needs_tf
@pytest.mark.slow
def test_profile_json_has_the_summary_fields_and_names_what_tensorflow_lacks(profiled):
    out, proc = profiled
    report = json.loads((out / "profile.json").read_text())
    assert report["engine"] == "tensorflow" and report["device"] == "/CPU:0" and report["recipe"] == "mlp"
    b = report["breakdown_s"]
    assert b["step"] > 0 and b["data"] >= 0 and b["compute"] > 0
    assert b["data"] + b["compute"] == pytest.approx(b["step"])
    assert report["step_s_median"] > 0 and report["samples_per_s"] > 0
    assert_one_step_figure(proc.stdout, report)  # the table and the line under it: one step figure
    # TensorFlow's own count of the step's graph: for the 20-64-32-1 MLP at batch 64, about 3x the
    # forward's 2 x (20*64 + 64*32 + 32) = 6,720 FLOPs per sample.
    assert 10_000 < report["flops_per_sample"] < 30_000, report["flops_method"]
    for field in ("forward", "backward", "optimizer", "communication"):
        assert b[field] is None and field in report["not_available"]
    assert report["mfu"] is None and report["diagnosis"] is None and "mfu" in report["not_available"]
    assert "n/a on TensorFlow: forward, backward, optimizer" in proc.stdout
    assert "tensorflow" not in proc.stderr.lower() or "Traceback" not in proc.stderr


@needs_tf
@pytest.mark.slow
def test_the_trace_is_where_tensorboards_profile_plugin_reads_it(profiled):
    out, proc = profiled
    traces = list((out / "tf_trace" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1, list((out / "tf_trace").rglob("*"))
    data = traces[0].read_bytes()
    # An XSpace with the host plane and the traced steps ("train", one per --active step).
    assert b"/host:CPU" in data and b"train" in data and len(data) > 1000
    assert f"wrote trace: {traces[0]}" in proc.stdout.replace("\n", "")


def test_settings_tensorflow_lacks_are_refused_in_one_line_before_its_import(tmp_path):
    from gpulab.engines.tensorflow.profile import profile_tf

    user = {"recipe": "mlp", "engine": "tensorflow"}
    before = set(sys.modules)  # another test in this worker may have loaded TensorFlow already
    with pytest.raises(ConfigError, match="--memory-snapshot is not available on engine 'tensorflow'"):
        profile_tf(user, tmp_path, ProfileOptions(memory_snapshot=True))
    with pytest.raises(
        ConfigError, match="setting 'strategy' = 'fsdp2' is not available on engine 'tensorflow'"
    ):
        profile_tf({**user, "strategy": "fsdp2"}, tmp_path, ProfileOptions())
    imported = {m for m in set(sys.modules) - before if m.split(".")[0] in ("tensorflow", "keras")}
    assert not imported, sorted(imported)[:5]
