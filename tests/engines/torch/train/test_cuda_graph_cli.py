"""``cuda_graph`` through the path `gpulab train` builds: the CLI, its default callbacks (progress lines,
StopOnSignal, the MFU count), TensorBoard and checkpoints on. The CPU fake of tests/engines/torch/train/test_cuda_graph.py
once ran with fewer callbacks than the CLI adds, and the graph never engaged in a real run (H100,
2026-11-26): here the fake backend stands in for torch.cuda's graphs and nothing else is changed.
"""

from __future__ import annotations

import json

import pytest
from test_cuda_graph import FakeGraphs

from gpulab.cli import main
from gpulab.engines.torch.train import graph_step


@pytest.fixture
def fake_graphs(monkeypatch):
    monkeypatch.setattr(graph_step, "CudaGraphs", FakeGraphs)


def _train(tmp_path, *extra: str) -> dict:
    out = tmp_path / "run"
    args = ["train", "mlp", "--device", "cpu", "--out", str(out), "--max-steps", "20"]
    code = main([*args, "--set", "options.samples=512", "--set", "log_every=5", *extra])
    assert code == 0
    return json.loads((out / "summary.json").read_text())


def test_the_cli_run_captures_the_whole_step(tmp_path, fake_graphs, capsys, one_thread):
    summary = _train(tmp_path, "--set", "cuda_graph=true")
    graph = summary["cuda_graph"]
    assert graph["mode"] == "graph" and graph["captures"] == 1 and graph["replays"] >= 10, graph
    assert "cuda_graph true: capturing the whole step" in capsys.readouterr().out
    assert (tmp_path / "run" / "checkpoints").is_dir() and (tmp_path / "run" / "tensorboard").is_dir()


def test_by_default_auto_times_both_and_says_which_it_kept(tmp_path, fake_graphs, capsys, one_thread):
    summary = _train(tmp_path)
    graph = summary["cuda_graph"]
    assert graph["captures"] == 1 and graph["mode"] in ("graph", "eager"), graph
    assert graph["reason"].startswith("cuda_graph auto: "), graph
    assert graph["reason"] in capsys.readouterr().out  # the one line


def test_auto_on_a_device_without_graphs_trains_eagerly_in_silence(tmp_path, capsys, one_thread):
    summary = _train(tmp_path)
    assert "cuda_graph" not in summary
    assert "cuda_graph" not in capsys.readouterr().out
