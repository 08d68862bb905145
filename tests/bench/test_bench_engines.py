"""``gpulab bench --engine``: a mistake in the engine list, or TensorFlow missing, is one line before any
suite runs (no TensorFlow needed for these checks)."""

from __future__ import annotations

import importlib.util

import pytest

from gpulab.bench import BenchConfig, run_bench
from gpulab.errors import ConfigError


def test_an_unknown_engine_is_one_line():
    with pytest.raises(ConfigError, match=r"unknown bench engine 'jax'; valid choices: torch\|tensorflow"):
        BenchConfig(engines=["torch", "jax"]).engine_names()


def test_tensorflow_missing_is_one_line_with_the_pip_command_and_nothing_runs(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name, *a)
    )
    lines: list[str] = []
    config = BenchConfig(
        suites=["matmul"],
        profile="smoke",
        device="cpu",
        out_dir=tmp_path / "b",
        engines=["torch", "tensorflow"],
    )
    with pytest.raises(
        ConfigError,
        match=r"needs TensorFlow, which is not installed; install it with: pip install 'gpulab\[tensorflow\]'",
    ):
        run_bench(config, log=lines.append)
    assert lines == [] and not (tmp_path / "b").exists()
