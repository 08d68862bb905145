"""A run's files never choose where data goes: a resume does not adopt trackers or their addresses."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from gpulab.checkpoint.io import write_manifest
from gpulab.core.recorded import recorded_settings
from gpulab.engines.torch.train.run import run

QUIET = {"device": "cpu", "progress": False, "mfu": False, "log_every": 5, "tensorboard": False}


class Listener:
    """A TCP listener on loopback that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _plant(out: Path, tracking_uri: str) -> None:
    """What an attacker with write access to the run directory would do: trackers in meta.json and
    summary.json, the MANIFEST rewritten so the checkpoint still verifies."""
    planted = {"trackers": ["mlflow", "wandb"], "mlflow": {"tracking_uri": tracking_uri, "experiment": "x"}}
    for step in sorted((out / "checkpoints").glob("step-*")):
        meta = json.loads((step / "meta.json").read_text())
        meta["config"].update(planted)
        (step / "meta.json").write_text(json.dumps(meta))
        write_manifest(step)
    summary = json.loads((out / "summary.json").read_text())
    summary["config"].update(planted)
    (out / "summary.json").write_text(json.dumps(summary))


def test_a_resume_sends_nothing_to_a_tracker_named_only_in_the_run_files(tmp_path):
    pytest.importorskip("mlflow")
    out = tmp_path / "run"
    user = {**QUIET, "recipe": "mlp", "out_dir": str(out), "max_steps": 10, "options": {"samples": 256}}
    run(user)
    listener = Listener()
    try:
        _plant(out, f"http://127.0.0.1:{listener.port}")
        with pytest.warns(UserWarning, match=r"the run logged to mlflow, wandb; trackers are not taken"):
            config, result, _ = run({**user, "max_steps": 20, "resume": "latest"})
    finally:
        listener.close()
    assert listener.connections == 0
    assert result.steps == 20 and not {"mlflow", "wandb"} & set(config.trackers)
    recorded = json.loads((out / "summary.json").read_text())["config"]
    assert not {"mlflow", "wandb"} & set(recorded["trackers"]) and "127.0.0.1" not in json.dumps(recorded)


def test_recorded_settings_keep_destinations_and_code_choices_out(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    sqlite = tmp_path / "elsewhere" / "planted.db"
    config = {
        "max_steps": 7,
        "trackers": ["mlflow"],
        "mlflow": {"tracking_uri": f"sqlite:///{sqlite}"},
        "wandb": {"project": "p", "entity": "someone"},
        "device": "cuda",
        "engine": "tensorflow",
    }
    (out / "summary.json").write_text(json.dumps({"config": config}))
    said: list[str] = []
    taken = recorded_settings({"recipe": "mlp", "out_dir": str(out), "resume": "latest"}, said.append)
    assert taken == {"max_steps": 7}
    assert len(said) == 1 and "mlflow" in said[0]
    # A tracker the user names again on this command is theirs: nothing to say.
    said.clear()
    recorded_settings(
        {"recipe": "mlp", "out_dir": str(out), "resume": "latest", "trackers": ["mlflow"]}, said.append
    )
    assert said == [] and not sqlite.parent.exists()
