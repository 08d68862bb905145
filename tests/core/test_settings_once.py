"""A run's settings are validated once, by its engine's resolve: the trainer takes them as they are."""

from __future__ import annotations

import pytest

from gpulab import config as config_module
from gpulab.config import RunConfig, TrainerSettings
from gpulab.errors import ConfigError


def test_trainer_settings_keep_what_was_set_and_drop_the_run_fields():
    run = RunConfig(recipe="mlp", batch_size=8, trackers=["tensorboard"], resume="latest", options={"a": 1})
    settings = run.trainer_settings()
    assert type(settings) is TrainerSettings
    assert settings.model_fields_set == {"batch_size", "trackers"}
    assert (settings.batch_size, settings.trackers, settings.epochs) == (8, ["tensorboard"], 1)
    assert not {"recipe", "options", "resume", "overwrite"} & set(settings.model_dump())
    # handed over as never given: at its default, and unset (profile writes its own directory)
    profiled = RunConfig(recipe="mlp", out_dir="runs/x").trainer_settings(unset=frozenset({"out_dir"}))
    assert "out_dir" not in profiled.model_fields_set
    assert profiled.out_dir == TrainerSettings().out_dir
    # a copy: changing the trainer's list leaves the run's as it was
    settings.trackers.append("mlflow")
    assert run.trackers == ["tensorboard"]


def test_a_torch_run_validates_its_settings_once(monkeypatch):
    from gpulab.engines.torch.train.run import TorchRun

    validated: list[str] = []
    parse = config_module.parse_config

    def counting(model, data, prefix=""):
        validated.append(model.__name__)
        return parse(model, data, prefix)

    monkeypatch.setattr(config_module, "parse_config", counting)
    from gpulab.engines.torch.train import run as torch_run

    monkeypatch.setattr(torch_run, "parse_config", counting)
    steps = TorchRun()
    config, _recipe = steps.resolve({"recipe": "mlp", "max_steps": 2, "batch_size": 16})
    merged = validated.count("RunConfig")
    trainer = steps.trainer(config, [])
    # resolve: the user's own settings first (a mistake told before the recipe is built), then the merged
    # whole; the trainer validates nothing again and has exactly the resolved values
    assert merged == 2 and "TrainerSettings" not in validated
    assert trainer.requested.model_dump() == config.trainer_settings().model_dump()
    assert trainer.requested.model_fields_set == config.model_fields_set & set(TrainerSettings.model_fields)


def test_settings_given_two_ways_are_refused():
    from gpulab import Trainer

    with pytest.raises(ConfigError, match="not both"):
        Trainer(settings=TrainerSettings(), batch_size=3)
