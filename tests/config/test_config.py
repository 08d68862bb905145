"""Settings validation: one line naming the key, what was given and the valid choices."""

from __future__ import annotations

import pytest

from gpulab.config import TrainerSettings, load_yaml, merge, parse_config, parse_overrides
from gpulab.errors import ConfigError


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"batchsize": 3}, "unknown setting 'batchsize'; valid settings: batch_size|"),
        ({"precision": "fp17"}, "'precision' = 'fp17' is invalid: valid choices: auto|fp32|tf32|bf16-mixed|fp16-mixed"),
        ({"batch_size": 0}, "'batch_size' = 0 is invalid: Input should be greater than or equal to 1"),
        ({"device": "gpu"}, "device 'gpu' is not one of auto|cpu|cuda|cuda:N|mps|xpu|xpu:N"),
        ({"device": "cpu:1"}, "only cuda and xpu take an index"),
        ({"epochs": "many"}, "'epochs' = 'many' is invalid: Input should be a valid integer"),
        # a union's branches are named as choices, under the setting's own name
        ({"channels_last": "maybe"}, "setting 'channels_last' = 'maybe' is invalid: valid choices: true|false|auto"),
        ({"data_cache": 2}, "setting 'data_cache' = 2 is invalid: valid choices: true|false|auto"),
        # a pattern or a type alone does not say what to write: the field's own example does
        ({"keep_best": True}, "'keep_best' = True is invalid: Input should be a valid string (also keep the best by a metric, e.g. val_loss:min)"),
        ({"keep_best": "val_loss"}, "'keep_best' = 'val_loss' is invalid: String should match pattern '^[\\w.]+:(min|max)$' (also keep the best by a metric, e.g. val_loss:min)"),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line(data, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(TrainerSettings, data)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_defaults_and_valid_values():
    s = parse_config(TrainerSettings, {"device": "cuda:3", "precision": "bf16-mixed", "accumulate": 4})
    assert (s.device, s.precision, s.accumulate, s.epochs) == ("cuda:3", "bf16-mixed", 4, 1)


def test_yaml_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_yaml(bad)
    seq = tmp_path / "seq.yaml"
    seq.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_yaml(seq)


def test_overrides_parse_values_and_nest():
    got = parse_overrides(["batch_size=64", "compile=true", "model.width=0.5", "name=x"])
    assert got == {"batch_size": 64, "compile": True, "model": {"width": 0.5}, "name": "x"}
    assert merge({"model": {"width": 1, "depth": 2}}, got)["model"] == {"width": 0.5, "depth": 2}
    with pytest.raises(ConfigError, match="is not key=value"):
        parse_overrides(["batch_size"])


def test_one_module_class_name_is_a_list_of_one():
    from gpulab.config import TrainerSettings, parse_config

    settings = parse_config(
        TrainerSettings, {"activation_checkpointing": "Block", "fsdp_shard_modules": "Block"}
    )
    assert settings.activation_checkpointing == ["Block"] and settings.fsdp_shard_modules == ["Block"]
    assert parse_config(
        TrainerSettings, {"activation_checkpointing": ["A", "B"]}
    ).activation_checkpointing == ["A", "B"]
