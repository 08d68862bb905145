"""Every fix the diagnosis can give names only settings the engine that ran accepts: each verdict's
``settings`` go through that engine's own settings validation, and every ``--set KEY=`` or flag in the
words is among them (a TensorFlow run was once told ``--set num_workers=N``, which that engine refuses)."""

from __future__ import annotations

import itertools
import re

import pytest

from gpulab import engine_registry as engines
from gpulab.config import TrainerSettings, check_engine, parse_config
from gpulab.measure.diagnosis import BOUNDS, diagnose

FLAGS = {"--precision": "precision", "--compile": "compile", "--accumulate": "accumulate",
         "--batch-size": "batch_size"}  # fmt: skip
BREAKDOWNS = [
    {"data": 0.5, "forward": 0.2, "backward": 0.3, "step": 1.0},  # input
    {"communication": 0.5, "forward": 0.2, "backward": 0.3, "step": 1.0},  # collectives
    {"idle": 0.5, "forward": 0.2, "backward": 0.3, "step": 1.0},  # outside every phase
    {"forward": 0.4, "backward": 0.5, "optimizer": 0.1, "step": 1.0},  # the device's own work
]
NATIVE = [None, {"bf16": False, "fp16": False}, {"bf16": True, "fp16": True}]


def every_diagnosis(engine: str):
    grid = itertools.product(
        BREAKDOWNS, ("cpu", "cuda"), (None, 50.0, 95.0), (None, 0.95), (None, 0.05, 0.5), (None, 0.8),
        ("fp32", "bf16-mixed"), (False, True), NATIVE,
    )  # fmt: skip
    for breakdown, device, util, memory, mfu, fixed, precision, compiled, native in grid:
        yield diagnose(
            breakdown, device_type=device, gpu_utilization_pct=util, memory_peak_fraction=memory, mfu=mfu,
            fixed_cost_fraction=fixed, precision=precision, compiled=compiled, native=native, engine=engine,
        )  # fmt: skip


def named(fix: str) -> set[str]:
    """The settings a fix's words name: ``--set KEY=VALUE`` and the CLI's own flags."""
    keys = set(re.findall(r"--set ([a-z_]+)=", fix))
    return keys | {key for flag, key in FLAGS.items() if re.search(rf"{flag}\b", fix)}


@pytest.mark.parametrize("engine", engines.names())
def test_every_fix_names_only_settings_its_engine_accepts(engine):
    fixes = {(d.bound, d.fix): d.settings for d in every_diagnosis(engine)}
    assert {bound for bound, _ in fixes} == set(BOUNDS)  # the grid reaches every verdict
    for (bound, fix), settings in fixes.items():
        assert named(fix) <= set(settings), (bound, fix, settings)
        check_engine(parse_config(TrainerSettings, {"engine": engine, **settings}))  # raises if refused


def test_a_tensorflow_run_is_told_of_its_own_input_pipeline_not_dataloader_workers():
    d = diagnose({"data": 0.5, "step": 1.0}, device_type="cpu", engine="tensorflow")
    assert d.bound == "input-bound" and "num_workers" not in d.fix and "data_cache" in d.fix
    torch_fix = diagnose({"data": 0.5, "step": 1.0}, device_type="cpu").fix
    assert "--set num_workers=N" in torch_fix  # torch's own words stay


def test_an_engine_without_a_diagnosis_is_advised_in_words_every_engine_takes(monkeypatch):
    """An engine that offers no ``diagnosis`` capability: no framework's words, only shared settings."""

    class Plain:
        name, framework, framework_module, extra, lacks = "plain", "Plain", "plain_fw", "plain", {}

    monkeypatch.setattr(engines, "_REGISTRY", dict(engines._REGISTRY))
    engines.register("plain", Plain)
    fixes = {(d.bound, d.fix): d.settings for d in every_diagnosis("plain")}
    assert {bound for bound, _ in fixes} == set(BOUNDS)
    for (bound, fix), settings in fixes.items():
        assert named(fix) <= set(settings), (bound, fix, settings)
        assert not {"torch", "tf.data", "XLA", "DataLoader"} & set(re.findall(r"[\w.]+", fix)), fix
        for name in engines.names()[:2]:  # the built-ins take every setting it names
            check_engine(parse_config(TrainerSettings, {"engine": name, **settings}))
