"""``trackers: [mlflow]`` against real MLflow stores: a SQLite store queried through ``mlflow.search_runs`` /
``MlflowClient``, a real ``gpulab train`` stopped by SIGTERM and resumed into the same MLflow run, and one
run sent to a real ``mlflow server`` on loopback, read back through its REST API."""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from forked import Child
from run_waits import wait_for_a_logged_step

mlflow = pytest.importorskip("mlflow")

from gpulab.engines.torch.train.run import run  # noqa: E402

CLI_TESTS = Path(__file__).resolve().parents[2] / "cli"  # preempt_recipe.py: no LR schedule, a pause per step
QUIET = {"device": "cpu", "progress": False, "mfu": False, "log_every": 5}


def jsonl_losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def search(uri: str, experiment: str, monkeypatch) -> list:
    """``mlflow.search_runs`` in the store at ``uri`` (named through the environment, as a user would)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


def mlflow_losses(client, run_id: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, "loss"))


@pytest.mark.slow
def test_a_run_appears_in_mlflow_with_its_settings_per_step_loss_and_artifacts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a SQLite store keeps artifacts under ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "run"
    user = {
        **QUIET,
        "recipe": "mlp",
        "out_dir": str(out),
        "max_steps": 30,
        "trackers": ["mlflow"],  # and no TensorBoard
        "mlflow": {"tracking_uri": uri, "experiment": "tests"},
        "options": {"samples": 512},
    }
    _, result, _ = run(user)

    runs = search(uri, "tests", monkeypatch)
    assert len(runs) == 1
    found = runs[0]
    assert found.info.status == "FINISHED" and found.info.run_name == "run"
    params = found.data.params
    assert params["max_steps"] == "30" and params["recipe"] == "mlp" and params["options.samples"] == "512"
    assert params["mlflow.experiment"] == "tests" and params["trackers"] == "['mlflow']"
    assert found.data.tags["gpulab.engine"] == "torch" and found.data.tags["gpulab.device"] == result.device

    client = mlflow.MlflowClient(uri)
    run_id = found.info.run_id
    # Every logged step, as metrics.jsonl has it: the same numbers, read from the device once.
    assert mlflow_losses(client, run_id) == sorted(jsonl_losses(out).items())
    assert [s for s, _ in mlflow_losses(client, run_id)] == [5, 10, 15, 20, 25, 30]
    assert found.data.metrics["val_loss"] == pytest.approx(result.val_loss)
    # samples_per_s holds each interval's rate; the figure gpulab prints (summary.json's) is run/samples_per_s
    assert found.data.metrics["run/samples_per_s"] == pytest.approx(result.samples_per_s)

    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"summary.json", "metrics.jsonl", "checkpoints"} <= artifacts
    assert [a.path for a in client.list_artifacts(run_id, "checkpoints")] == ["checkpoints/step-00000030"]
    summary = json.loads(Path(client.download_artifacts(run_id, "summary.json", str(tmp_path))).read_text())
    assert summary == json.loads((out / "summary.json").read_text())
    ckpt = {a.path.rsplit("/", 1)[-1] for a in client.list_artifacts(run_id, "checkpoints/step-00000030")}
    assert "model.safetensors" in ckpt and "MANIFEST.json" in ckpt
    assert not (out / "tensorboard").exists()
    assert json.loads((out / "trackers.json").read_text())["mlflow"] == {
        "run_id": run_id,
        "tracking_uri": uri,
    }


def _env(**extra: str) -> dict[str, str | None]:
    """Over the fork server's environment (tests/conftest.py's gpulab_server): MLflow's settings EXTRA only
    (None unsets)."""
    return dict.fromkeys(k for k in os.environ if k.startswith("MLFLOW_")) | extra


def _gpulab(server, *args: str, cwd: Path, env: dict[str, str | None]) -> Child:
    """``gpulab ARGS`` in a process of its own, forked from ``server``; MLflow imported by the process
    (its import starts a thread, after which no fork is safe)."""
    stderr, path = cwd / "gpulab.stderr", [str(CLI_TESTS)]
    return server.start("gpulab.cli:main", args, stderr=stderr, env=env, cwd=cwd, path=path)


def _wait_for_a_logged_step(proc: Child, out: Path, timeout: float = 180) -> None:
    wait_for_a_logged_step(proc, out, timeout)


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_resumes_in_the_same_mlflow_run(tmp_path, monkeypatch, cli, gpulab_server):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = _env(MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME="preempted")  # from the environment this time
    args = ["train", "preempt_recipe:build", "--out", "run", "--max-steps", "120",
            "--set", "mfu=false", "--set", "trackers=[mlflow]", "--set", "options.pause=0.02"]  # fmt: skip
    proc = _gpulab(gpulab_server, *args, cwd=tmp_path, env=env)
    _wait_for_a_logged_step(proc, tmp_path / "run")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    step = int(stderr.strip().splitlines()[-1].split(" at step ")[1].split(":")[0])
    assert step < 120

    client = mlflow.MlflowClient(uri)
    (first,) = search(uri, "preempted", monkeypatch)
    assert first.info.status == "KILLED"
    assert [s for s, _ in mlflow_losses(client, first.info.run_id)] == list(range(5, step + 1, 5))

    # The resume through the CLI's entry point in this process: a process of its own would only import torch
    # again; what it sends MLflow is the check.
    monkeypatch.syspath_prepend(str(CLI_TESTS))
    unset = dict.fromkeys(k for k in os.environ if k.startswith(("TORCHELASTIC_", "PET_", "MLFLOW_")))
    code, err = cli(*args, "--resume", "latest", cwd=tmp_path,
                    env=unset | {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "preempted"})  # fmt: skip
    assert code == 0, err
    (again,) = search(uri, "preempted", monkeypatch)
    assert again.info.run_id == first.info.run_id and again.info.status == "FINISHED"
    # One history, each step once, the same numbers as metrics.jsonl (which the resume continued too).
    history = mlflow_losses(client, again.info.run_id)
    assert [s for s, _ in history] == list(range(5, 121, 5))
    assert history == sorted(jsonl_losses(tmp_path / "run").items())
    assert "summary.json" in {a.path for a in client.list_artifacts(again.info.run_id)}


def _get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Forwards each request to the server behind it, keeping the Authorization header it came with."""

    upstream = ""
    auth: list[str | None] = []

    def _forward(self) -> None:
        type(self).auth.append(self.headers.get("Authorization"))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization")}
        request = urllib.request.Request(self.upstream + self.path, body, headers, method=self.command)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, data, kind = response.status, response.read(), response.headers.get("Content-Type")
        except urllib.error.HTTPError as error:
            status, data, kind = error.code, error.read(), error.headers.get("Content-Type")
        self.send_response(status)
        self.send_header("Content-Type", kind or "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def recording_proxy(mlflow_server):
    """``mlflow_server`` behind a loopback proxy that records each request's Authorization header."""
    _Recorder.upstream, _Recorder.auth = mlflow_server, []
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield proxy.server_address[1], _Recorder.auth
    proxy.shutdown()
    thread.join()


@pytest.mark.slow
def test_a_run_reaches_a_real_mlflow_server_on_loopback(
    tmp_path, mlflow_server, recording_proxy, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    port, auth = recording_proxy
    # Credentials in the URI: the live connection sends them, no file anyone writes holds them.
    uri = f"http://u:s3cr3t-pw@127.0.0.1:{port}"
    user = {**QUIET, "recipe": "mlp", "out_dir": str(out), "max_steps": 10, "trackers": ["mlflow"],
            "mlflow": {"tracking_uri": uri, "experiment": "served"}, "options": {"samples": 256}}  # fmt: skip
    run(user)
    assert auth and set(auth) == {"Basic " + base64.b64encode(b"u:s3cr3t-pw").decode()}
    written = [p for p in tmp_path.rglob("*") if p.is_file() and b"s3cr3t-pw" in p.read_bytes()]
    assert not written  # run dir (summary.json, trackers.json, meta.json, state.pt), the server's store
    assert json.loads((out / "trackers.json").read_text())["mlflow"]["tracking_uri"] == uri.replace(
        "s3cr3t-pw", "***"
    )

    # Read back through the server's REST API, as any MLflow client would.
    request = urllib.request.Request(
        f"{mlflow_server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=served"
    )
    experiment = json.loads(_get(request.full_url)[1])["experiment"]
    body = json.dumps({"experiment_ids": [experiment["experiment_id"]]}).encode()
    search = urllib.request.Request(
        f"{mlflow_server}/api/2.0/mlflow/runs/search", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(search, timeout=10) as response:
        (found,) = json.loads(response.read())["runs"]
    run_id = found["info"]["run_id"]
    assert found["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in found["data"]["params"]}
    assert params["max_steps"] == "10" and params["mlflow.tracking_uri"] == f"http://u:***@127.0.0.1:{port}"
    history = json.loads(
        _get(f"{mlflow_server}/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key=loss")[1]
    )
    assert [(m["step"], m["value"]) for m in history["metrics"]] == sorted(jsonl_losses(out).items())
    files = json.loads(_get(f"{mlflow_server}/api/2.0/mlflow/artifacts/list?run_id={run_id}")[1])["files"]
    assert {"summary.json", "metrics.jsonl", "checkpoints"} <= {f["path"] for f in files}


@pytest.mark.slow
@pytest.mark.distributed
def test_two_ranks_make_one_mlflow_run_from_rank_zero(tmp_path, monkeypatch, gpulab_server):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = _env(MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME="ddp")
    done = _gpulab(gpulab_server, "launch", "--nproc-per-node", "2", "--", "gpulab", "train", "mlp",
                   "--out", "run", "--max-steps", "10", "--set", "log_every=5", "--set", "mfu=false",
                   "--set", "trackers=[mlflow]", "--set", "options.samples=256", cwd=tmp_path, env=env)  # fmt: skip
    _, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr[-3000:]
    (found,) = search(uri, "ddp", monkeypatch)  # one run, not one per rank
    assert found.info.status == "FINISHED"
    client = mlflow.MlflowClient(uri)
    # Each step once, with the all-reduced loss rank 0 logged to metrics.jsonl.
    assert mlflow_losses(client, found.info.run_id) == sorted(jsonl_losses(tmp_path / "run").items())
