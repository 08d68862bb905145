"""Configs parsed with bounds: what would expand, nest or loop past any real config is one line before
anything is built from it; an empty file and a file of unknown keys are one line too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpulab.config import TrainerSettings, load_yaml, parse_config, parse_overrides
from gpulab.config.yaml_bounds import MAX_DEPTH
from gpulab.errors import ConfigError

# Nine levels of nine aliases each: 9**9 = 387,420,489 strings, landing in a typed setting.
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
) + "batch_size: *i\n"  # fmt: skip


def _refusal(tmp_path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_billion_laughs_is_refused_before_it_expands(tmp_path):
    assert len(LAUGHS.encode()) <= 512
    said = _refusal(tmp_path, LAUGHS)
    assert "expands to more than 10,000 values" in said and "YAML aliases" in said


def test_an_alias_list_that_contains_itself_is_one_line(tmp_path):
    said = _refusal(tmp_path, "trackers: &t [tensorboard, *t]\n")
    assert "alias *t at line 1 is inside the value &t names (a cycle)" in said


def test_an_alias_list_of_lists_under_trackers_is_one_line_per_mistake(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("x: &x [tensorboard, mlflow]\ntrackers: [*x, *x]\n")
    with pytest.raises(ConfigError) as err:
        parse_config(TrainerSettings, load_yaml(path))
    lines = str(err.value).splitlines()
    assert any(line.startswith("unknown setting 'x'") for line in lines)
    assert (
        "setting 'trackers' = ['tensorboard', 'mlflow'] is invalid: valid choices: tensorboard|mlflow|wandb"
        in lines
    )


def test_ordinary_aliases_still_load(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("base: &b {samples: 64}\noptions: *b\ntrackers: &t [tensorboard]\n")
    assert load_yaml(path)["options"] == {"samples": 64}


def test_ten_thousand_levels_of_nesting_are_one_line(tmp_path):
    said = _refusal(tmp_path, "options: " + "[" * 10_000 + "]" * 10_000 + "\n")
    assert f"nests deeper than {MAX_DEPTH} levels" in said
    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(100)) + "  " * 100 + "x: 1\n"
    assert "nests deeper" in _refusal(tmp_path, block)  # block style too (libyaml takes up to 1,000)
    with pytest.raises(ConfigError, match="nests deeper"):
        parse_overrides(["options." + ".".join(["x"] * 10_000) + "=1"])


def test_a_quarter_million_unknown_keys_is_one_line(tmp_path):
    said = _refusal(tmp_path, "".join(f"k{i}: 1\n" for i in range(247_830)))
    assert "247,830 unknown settings ('k0', 'k1', 'k2' and 247,827 more): is this a gpulab config?" in said


def test_many_values_written_out_under_one_key_are_one_line_without_aliases(tmp_path):
    said = _refusal(tmp_path, "options:\n" + "".join(f"  k{i}: 1\n" for i in range(6000)))
    assert said.endswith("holds more than 10,000 values (line 5000); a gpulab config holds tens"), said


def test_hundreds_of_unknown_keys_are_one_line_and_a_few_dozen_are_capped():
    with pytest.raises(ConfigError) as err:
        parse_config(TrainerSettings, {f"k{i}": 1 for i in range(300)})
    assert str(err.value).startswith(
        "300 unknown settings ('k0', 'k1', 'k2' and 297 more): is this a gpulab config?"
    )
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config(TrainerSettings, {f"k{i}": 1 for i in range(30)})
    lines = str(err.value).splitlines()
    assert len(lines) == 21 and lines[-1] == "and 10 more mistakes"


def test_an_empty_config_file_is_refused_in_one_line(tmp_path):
    for text in ("", "# nothing set yet\n"):
        said = _refusal(tmp_path, text)
        assert "is empty (it sets nothing)" in said and "leave out --config" in said


def test_the_cli_says_one_line_for_the_bomb(tmp_path):
    (tmp_path / "run.yaml").write_text(LAUGHS)
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "train", "mlp", "--config", "run.yaml", "--out", "run"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "expands to more than" in proc.stderr
    assert not (tmp_path / "run").exists()
