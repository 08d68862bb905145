"""The ``trackers`` setting: TensorBoard stays the default, a typo is one line naming the valid choices, a
tracker whose package is missing is one line with the pip command (before any step), and the run ids file
``OUT/trackers.json`` is data that only selects a run."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gpulab import Trainer
from gpulab.config import RunConfig, TrainerSettings, parse_config
from gpulab.core.callbacks.tracker_record import TrackerIds
from gpulab.errors import ConfigError, MissingPackageError


def test_tensorboard_is_the_default_and_one_name_is_a_list_of_one():
    assert parse_config(TrainerSettings, {}).trackers == ["tensorboard"]
    assert parse_config(TrainerSettings, {"trackers": "mlflow"}).trackers == ["mlflow"]
    assert parse_config(TrainerSettings, {"trackers": ["wandb", "mlflow", "wandb"]}).trackers == [
        "wandb",
        "mlflow",
    ]


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"trackers": ["mlfow"]},
            "setting 'trackers' = 'mlfow' is invalid: valid choices: tensorboard|mlflow|wandb",
        ),
        (
            {"mlflow": {"experimnt": "x"}},
            "unknown setting 'mlflow.experimnt'; valid settings: experiment|tracking_uri|checkpoint_max_mb",
        ),
        (
            {"wandb": {"mode": "of"}},
            "setting 'wandb.mode' = 'of' is invalid: valid choices: online|offline|disabled",
        ),
    ],
)
def test_a_mistyped_tracker_setting_is_one_line_naming_the_valid_choices(data, line):
    with pytest.raises(ConfigError) as err:
        parse_config(RunConfig, {"recipe": "mlp", **data})
    assert str(err.value) == line


def test_a_typo_in_trackers_on_the_command_line_exits_2_with_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gpulab", "train", "mlp", "--out", "o", "--set", "trackers=[tensorboard,mlfow]"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gpulab: error: setting 'trackers' = 'mlfow' is invalid: valid choices: tensorboard|mlflow|wandb"
    ]


@pytest.mark.parametrize("tracker", ["mlflow", "wandb"])
def test_a_tracker_whose_package_is_missing_is_one_line_with_the_pip_command(tmp_path, monkeypatch, tracker):
    monkeypatch.setitem(sys.modules, tracker, None)  # what `import mlflow` meets where it is not installed
    data = (torch.randn(64, 4), torch.randint(0, 2, (64,)))
    trainer = Trainer(device="cpu", progress=False, max_steps=2, out_dir=str(tmp_path), trackers=[tracker])
    with pytest.raises(MissingPackageError) as err:
        trainer.fit(torch.nn.Linear(4, 2), data, loss_fn=torch.nn.functional.cross_entropy,
                    optimizer=lambda p: torch.optim.SGD(p, lr=0.1))  # fmt: skip
    message = str(err.value)
    assert "\n" not in message and f"fix: pip install 'gpulab[{tracker}]'" in message
    assert trainer.state.global_step == 0 and not (tmp_path / "metrics.jsonl").exists()


def test_a_run_id_file_selects_a_run_and_nothing_else(tmp_path):
    ids = TrackerIds(str(tmp_path))
    ids.write("mlflow", run_id="0123abcd", tracking_uri="sqlite:///x.db")
    assert ids.read("mlflow") == {"run_id": "0123abcd", "tracking_uri": "sqlite:///x.db"}
    assert ids.read("wandb") is None
    for bad in ('{"mlflow": {"run_id": "../../etc"}}', '{"mlflow": {"run_id": 7}}', "not json", "[1]"):
        (tmp_path / "trackers.json").write_text(bad)
        assert ids.read("mlflow") is None  # a new tracker run starts rather than a path or code


def test_the_tracker_files_count_as_a_previous_run_and_overwrite_removes_them(tmp_path):
    from gpulab.core.run_dir import prepare
    from gpulab.errors import RunDirError

    out = tmp_path / "run"
    (out / "wandb" / "offline-run-1").mkdir(parents=True)
    (out / "trackers.json").write_text('{"mlflow": {"run_id": "abc"}}')
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="trackers.json, wandb"):
        prepare(out, None, None, overwrite=False)
    prepare(out, None, None, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_tune_trial_logs_to_no_tracker_of_the_users_config():
    from gpulab.core.callbacks.trackers import tracker_callbacks
    from gpulab.tune.trial import Trial, _trial_settings

    config = parse_config(RunConfig, {"recipe": "mlp", "out_dir": "runs/x", "trackers": ["mlflow", "wandb"]})
    settings = _trial_settings(config, 640, Trial(label="default", settings={}), exclude_unset=False)
    assert tracker_callbacks(parse_config(TrainerSettings, settings)) == []


def _tiny_fit(trainer: Trainer) -> None:
    data = (torch.randn(64, 4), torch.randint(0, 2, (64,)))
    trainer.fit(torch.nn.Linear(4, 2), data, loss_fn=torch.nn.functional.cross_entropy,
                optimizer=lambda p: torch.optim.SGD(p, lr=0.1))  # fmt: skip


@pytest.mark.slow
def test_an_mlflow_server_that_does_not_answer_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # MLflow's default retries for minutes
    uri = f"http://127.0.0.1:{port}"
    trainer = Trainer(device="cpu", progress=False, max_steps=2, out_dir=str(tmp_path), trackers=["mlflow"],
                      mlflow={"tracking_uri": uri})  # fmt: skip
    with pytest.raises(ConfigError) as err:
        _tiny_fit(trainer)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"mlflow at {uri} could not start the run (")
    assert message.endswith(
        "fix: check mlflow.tracking_uri / MLFLOW_TRACKING_URI, or remove mlflow from trackers"
    )
    assert trainer.state.global_step == 0
