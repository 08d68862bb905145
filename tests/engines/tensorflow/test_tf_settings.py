"""The ``engine`` setting without TensorFlow in this process: default torch, set by YAML/--set/--engine
and the Python API; a setting the chosen engine lacks is refused in one line naming it and the engine;
``--engine tensorflow`` without TensorFlow installed says how to install it (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.config import RunConfig, TrainerSettings, check_engine, layer_settings, parse_config
from gpulab.errors import ConfigError


def test_engine_defaults_to_torch_and_comes_from_yaml_and_set(tmp_path: Path):
    assert parse_config(TrainerSettings, {}).engine == "torch"
    (tmp_path / "c.yaml").write_text("recipe: mlp\nengine: tensorflow\n")
    user = layer_settings(tmp_path / "c.yaml", {}, [])
    assert parse_config(RunConfig, user).engine == "tensorflow"
    assert layer_settings(tmp_path / "c.yaml", {}, ["engine=torch"])["engine"] == "torch"
    with pytest.raises(ConfigError, match=r"valid choices: torch\|tensorflow"):
        parse_config(TrainerSettings, {"engine": "jax"})


@pytest.mark.parametrize(
    ("settings", "name"),
    [
        ({"strategy": "fsdp2"}, "strategy"),
        ({"strategy": "ddp"}, "strategy"),
        ({"activation_checkpointing": "Block"}, "activation_checkpointing"),
        ({"micro_batch": "auto"}, "micro_batch"),
        ({"batch_size": "auto"}, "batch_size"),
        ({"device": "mps"}, "device"),
        ({"num_workers": 2}, "num_workers"),
        ({"mfu": True}, "mfu"),
        ({"fuse_optimizer": False}, "fuse_optimizer"),  # Keras optimizers have no such switch
    ],
)
def test_a_setting_tensorflow_lacks_is_refused_in_one_line(settings, name):
    config = parse_config(TrainerSettings, {"engine": "tensorflow", **settings})
    with pytest.raises(ConfigError) as err:
        check_engine(config)
    message = str(err.value)
    assert "\n" not in message
    assert f"setting {name!r}" in message and "engine 'tensorflow'" in message and "--engine torch" in message


def test_tensorflow_accepts_what_it_has():
    ok = {
        "strategy": "mirrored",
        "device": "cuda:1",
        "precision": "fp16-mixed",
        "compile": True,
        "mfu": False,
        "prefetch_factor": 4,  # the tf.data pipeline's depth
        "data_cache": False,
    }
    check_engine(parse_config(TrainerSettings, {"engine": "tensorflow", **ok}))
    check_engine(parse_config(RunConfig, {"engine": "tensorflow", "recipe": "mlp"}))  # mfu True by default


def test_torch_refuses_tensorflow_strategies_and_the_torch_trainer_refuses_the_tensorflow_engine():
    from gpulab.engines.torch.train.trainer import Trainer

    with pytest.raises(ConfigError, match=r"setting 'data_cache' = True is not available on engine 'torch'"):
        Trainer(data_cache=True)

    with pytest.raises(
        ConfigError, match=r"setting 'strategy' = 'mirrored' is not available on engine 'torch'"
    ):
        Trainer(strategy="mirrored")
    with pytest.raises(ConfigError, match="use gpulab.engines.tensorflow.TfTrainer"):
        Trainer(engine="tensorflow")


def gpulab(*args: str, cwd: Path, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"import sys; {prelude}; from gpulab.cli import main; sys.argv = ['gpulab', *sys.argv[1:]]; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ),
        timeout=120,
    )


def test_cli_refuses_a_setting_the_engine_lacks_before_importing_tensorflow(tmp_path: Path):
    # sys.modules['tensorflow'] = None: the refusal must come first, without TensorFlow.
    proc = gpulab(
        "train", "mlp", "--engine", "tensorflow", "--set", "strategy=fsdp2", "--out", "o",
        cwd=tmp_path, prelude="sys.modules['tensorflow'] = None",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if line]
    assert len(lines) == 1 and "'strategy' = 'fsdp2' is not available on engine 'tensorflow'" in lines[0]


def test_engine_tensorflow_without_tensorflow_says_how_to_install_it(tmp_path: Path):
    proc = gpulab("train", "mlp", "--engine", "tensorflow", "--out", "o", cwd=tmp_path,
                  prelude="sys.modules['tensorflow'] = None")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if line]
    assert len(lines) == 1, lines
    assert (
        "engine 'tensorflow' needs TensorFlow" in lines[0] and "pip install 'gpulab[tensorflow]'" in lines[0]
    )
    assert not (tmp_path / "o").exists()


def test_a_command_that_runs_torch_only_refuses_engine_tensorflow_in_one_line():
    from gpulab.engines.torch.train.run import resolve_config

    with pytest.raises(ConfigError, match="engine 'tensorflow' is not available on this command yet"):
        resolve_config({"recipe": "mlp", "engine": "tensorflow", "options": {"samples": 100}})


def test_a_torch_run_with_tensorboard_does_not_import_tensorflow(tmp_path: Path):
    # TensorBoard's writer would import an installed TensorFlow just to write event files (seconds).
    code = (
        "import sys; from gpulab.engines.torch.train.run import run; "
        f"run({{'recipe': 'mlp', 'max_steps': 2, 'out_dir': {str(tmp_path / 'o')!r}, 'progress': False, "
        "'mfu': False, 'checkpoints': False, 'options': {'samples': 200}}); "
        "print('TF', 'tensorflow' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TF False" in proc.stdout
    assert list((tmp_path / "o" / "tensorboard").glob("events.out.tfevents.*"))
