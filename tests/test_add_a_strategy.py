"""docs/ARCHITECTURE.md's "How to add a strategy", followed: a row registered for the test
(``strategy_plugin.py``), the torch engine's class and its line in the strategies' registry, the name in
the torch engine's ``lacks`` -- and nothing else edited: config takes the name, ``gpulab train`` trains
through the class, and the TensorFlow engine, which lacks it, refuses it in one line naming its own."""

from __future__ import annotations

import json

import pytest
import strategy_plugin  # (tests/ is on the path)

from gpulab import engine_registry as engines
from gpulab import precisions
from gpulab.cli import main
from gpulab.config import TrainerSettings, parse_config
from gpulab.engine_registry import Lack
from gpulab.engines.torch.runtime import strategies
from gpulab.errors import ConfigError

NAME = strategy_plugin.ROW.name


@pytest.fixture
def registered(monkeypatch):
    """The row, the torch class and the torch engine's word until the test ends."""
    monkeypatch.setattr(strategy_plugin.Solo, "set_up", [])
    precisions.register_strategy(strategy_plugin.ROW)
    monkeypatch.setitem(strategies._REGISTRY, NAME, f"{strategy_plugin.__name__}:Solo")
    torch = engines.get("torch")
    takes = torch.lacks["strategy"].takes
    monkeypatch.setitem(torch.lacks, "strategy", Lack((*takes, NAME)))
    yield
    del precisions.STRATEGIES[NAME]


def test_before_it_is_registered_config_refuses_the_name():
    with pytest.raises(
        ConfigError, match=r"valid choices: auto\|single\|ddp\|fsdp2\|dp\|mirrored\|multiworker$"
    ):
        parse_config(TrainerSettings, {"strategy": NAME})


def test_gpulab_train_runs_through_the_registered_class(registered, tmp_path, capsys):
    assert parse_config(TrainerSettings, {"strategy": NAME}).strategy == NAME
    out = tmp_path / "run"
    argv = ["train", "mlp", "--max-steps", "2", "--out", str(out), "--set", f"strategy={NAME}"]
    code = main([*argv, "--set", "progress=false"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy"] == NAME and summary["steps"] == 2
    assert strategy_plugin.Solo.set_up == ["Sequential"]  # mlp's model, moved to its device by Solo


def test_an_engine_that_lacks_it_refuses_it_in_one_line(registered, tmp_path, capsys):
    """Told before anything is written."""
    out = tmp_path / "run"
    argv = ["train", "mlp", "--engine", "tensorflow", "--out", str(out), "--set", f"strategy={NAME}"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"gpulab: error: setting 'strategy' = '{NAME}' is not available on engine 'tensorflow' (valid there: "
        "auto|single|mirrored|multiworker); remove it, or use --engine torch"
    )
    assert not out.exists()
