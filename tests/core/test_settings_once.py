"""A run's settings are validated once, before any framework is imported (``validate_run``): the engine's
resolve lays the recipe's defaults under them and its trainer takes them as they are."""

from __future__ import annotations

import pytest

import gpulab.config.layering
import gpulab.config.validate
from gpulab.config import RunConfig, TrainerSettings, with_defaults
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


class _Counting:
    """A model's pydantic validator, counting each whole validation (an assignment is not one)."""

    def __init__(self, inner, name: str, seen: list[str]) -> None:
        self.inner, self.name, self.seen = inner, name, seen

    def validate_python(self, *args, **kwargs):
        self.seen.append(self.name)
        return self.inner.validate_python(*args, **kwargs)

    def __getattr__(self, attr: str):
        return getattr(self.inner, attr)


@pytest.mark.parametrize("engine", ["torch", "tensorflow"])
def test_one_train_run_validates_its_settings_once_and_checks_its_engine_once(
    engine, tmp_path, monkeypatch, capfd
):
    if engine == "tensorflow":
        pytest.importorskip("tensorflow")
    from gpulab.cli import main

    validated: list[str] = []
    for model in (RunConfig, TrainerSettings):  # every way in: parse_config, a constructor, a direct call
        spy = _Counting(model.__pydantic_validator__, model.__name__, validated)
        monkeypatch.setattr(model, "__pydantic_validator__", spy)
    engine_checks: list[object] = []
    check = gpulab.config.validate.check_engine

    def counting_check(settings, only=None):
        engine_checks.append(None if only is None else sorted(only))
        return check(settings, only)

    for module in (gpulab.config.validate, gpulab.config.layering):
        monkeypatch.setattr(module, "check_engine", counting_check)
    trainer = {
        "torch": "gpulab.engines.torch.train.trainer",
        "tensorflow": "gpulab.engines.tensorflow.trainer",
    }
    monkeypatch.setattr(f"{trainer[engine]}.check_engine", counting_check)  # the trainer checks nothing again
    out = tmp_path / "run"
    argv = ["train", "mlp", "--engine", engine, "--max-steps", "1", "--out", str(out), "--set", "seed=3"]
    assert main(argv) == 0, capfd.readouterr().err
    assert (out / "summary.json").is_file()
    assert validated == ["RunConfig"]  # the user's layers, once; nothing validated again downstream
    # the whole once, before the framework; then only the recipe's defaults, laid under (mlp's two)
    assert engine_checks == [None, ["batch_size", "epochs"]]


def test_defaults_laid_under_keep_what_the_user_set_and_are_validated_alone():
    user = RunConfig(recipe="mlp", epochs=2, mlflow={"experiment": "mine"}, options={"lr": 0.1})
    merged = with_defaults(user, {"epochs": 5, "batch_size": 64, "mlflow": {"tracking_uri": "file:x"}})
    assert (merged.epochs, merged.batch_size) == (2, 64)  # the user's wins; the recipe's fills the rest
    assert (merged.mlflow.experiment, merged.mlflow.tracking_uri) == ("mine", "file:x")  # merged key by key
    assert merged.model_fields_set == {"recipe", "epochs", "mlflow", "options", "batch_size"}
    assert user.batch_size == 32 and "batch_size" not in user.model_fields_set  # a copy
    with pytest.raises(ConfigError) as told:
        with_defaults(user, {"batch_size": 0, "epoch": 3})
    first, second = str(told.value).splitlines()  # one line per mistake, as parse_config's
    assert first == (
        "setting 'batch_size' = 0 is invalid: Input should be greater than or equal to 1 (an integer), or "
        "'auto'"
    )
    assert second.startswith("unknown setting 'epoch'; valid settings: epochs|")


def test_settings_a_script_built_itself_are_still_checked_against_the_trainers_engine():
    from gpulab import Trainer

    with pytest.raises(ConfigError, match="'data_cache' = True is not available on engine 'torch'"):
        Trainer(settings=TrainerSettings(data_cache=True))  # not a run's: engine_checked vouches for none


def test_settings_given_two_ways_are_refused():
    from gpulab import Trainer

    with pytest.raises(ConfigError, match="not both"):
        Trainer(settings=TrainerSettings(), batch_size=3)
