"""TF_CONFIG for one and two nodes, and `gpulab launch --engine tensorflow`'s plan and option checks.

Pure unit tests: nothing starts and TensorFlow is not imported (they pass without it installed).
"""

from __future__ import annotations

import json
import socket

import pytest

from gpulab.cli import main
from gpulab.distributed.launch import LaunchSpec
from gpulab.engines.tensorflow import launch as T
from gpulab.engines.tensorflow.launch_config import DEFAULT_TF_PORT, cluster_workers, tf_config
from gpulab.errors import LaunchError


@pytest.fixture
def cpu_only(monkeypatch):
    monkeypatch.setattr(T, "local_accelerator", lambda: ("cpu", 0))


def _configs(plan: T.TFPlan) -> list[dict]:
    return [json.loads(env["TF_CONFIG"]) for env in plan.env]


def test_one_node_workers_are_on_loopback_with_distinct_free_ports(cpu_only):
    plan = T.plan_tf_launch(LaunchSpec(["-m", "job"], nproc_per_node=3), environ={})
    configs = _configs(plan)
    workers = configs[0]["cluster"]["worker"]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    assert all(c["cluster"] == {"worker": workers} for c in configs)  # every worker sees the same cluster
    hosts, ports = zip(*(w.rsplit(":", 1) for w in workers), strict=True)
    assert set(hosts) == {"127.0.0.1"} and len(set(ports)) == 3
    for port in ports:  # free now: each can be bound on loopback
        with socket.socket() as s:
            s.bind(("127.0.0.1", int(port)))
    assert plan.argv[1:4] == ["-u", "-m", "job"]


def test_two_nodes_follow_the_hosts_and_base_port_scheme(cpu_only):
    spec = LaunchSpec(["-m", "job"], nproc_per_node=2, nnodes="2", node_rank=1)
    plan = T.plan_tf_launch(spec, hosts="node0, node1", base_port=4000, environ={})
    want = ["node0:4000", "node0:4001", "node1:4000", "node1:4001"]
    # node 1's two workers are global workers 2 and 3 of the same 4-worker cluster node 0 builds
    assert _configs(plan) == [
        {"cluster": {"worker": want}, "task": {"type": "worker", "index": i}} for i in (2, 3)
    ]
    node0 = T.plan_tf_launch(
        LaunchSpec(["-m", "job"], nproc_per_node=2, nnodes="2", node_rank=0), "node0,node1", 4000
    )
    assert [c["task"]["index"] for c in _configs(node0)] == [0, 1]  # worker 0, the chief, is on node 0
    assert cluster_workers(1, ["fe80::1", "h"]) == [f"[fe80::1]:{DEFAULT_TF_PORT}", f"h:{DEFAULT_TF_PORT}"]


def test_tf_config_is_the_json_tensorflow_reads():
    assert json.loads(tf_config(["a:1", "b:2"], 1)) == {
        "cluster": {"worker": ["a:1", "b:2"]},
        "task": {"type": "worker", "index": 1},
    }
    with pytest.raises(ValueError):
        tf_config(["a:1"], 1)


def test_gpus_are_split_one_per_worker_and_threads_shared(monkeypatch):
    monkeypatch.setattr(T, "local_accelerator", lambda: ("cuda", 2))
    plan = T.plan_tf_launch(LaunchSpec(["-m", "job"]), environ={})  # default: one worker per GPU
    assert [e["CUDA_VISIBLE_DEVICES"] for e in plan.env] == ["0", "1"]
    assert all(e["TF_NUM_INTRAOP_THREADS"] == e["OMP_NUM_THREADS"] for e in plan.env)
    users = T.plan_tf_launch(
        LaunchSpec(["-m", "job"]), environ={"CUDA_VISIBLE_DEVICES": "1,0", "OMP_NUM_THREADS": "4"}
    )
    assert not any("CUDA_VISIBLE_DEVICES" in e or "OMP_NUM_THREADS" in e for e in users.env)  # the user's win


@pytest.mark.parametrize(
    ("spec", "hosts", "message"),
    [
        (LaunchSpec(["-m", "j"], nnodes="1:2"), None, "no elastic jobs"),
        (LaunchSpec(["-m", "j"], nnodes="2"), None, "needs --hosts with 2 address(es)"),
        (LaunchSpec(["-m", "j"], nnodes="2"), "a,b,c", "(got 3)"),
        (LaunchSpec(["-m", "j"], nnodes="2", node_rank=2), "a,b", "--node-rank 2 is out of range"),
        (LaunchSpec([]), None, "no command to launch"),
    ],
)
def test_bad_tensorflow_launches_are_one_line(cpu_only, spec, hosts, message):
    with pytest.raises(LaunchError) as exc:
        T.plan_tf_launch(spec, hosts)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--engine", "jax"], "--engine 'jax' is not one of torch|tensorflow"),
        (
            ["--engine", "tensorflow", "--rdzv-endpoint", "h:1"],
            "--rdzv-endpoint does not apply to --engine tensorflow",
        ),
        (
            ["--engine", "tensorflow", "--max-restarts", "1"],
            "--max-restarts does not apply to --engine tensorflow",
        ),
        (["--hosts", "a,b"], "--hosts does not apply to --engine torch (valid with --engine tensorflow)"),
    ],
)
def test_engine_and_its_options_are_checked_in_one_line(capsys, args, line):
    assert main(["launch", *args, "--", "-m", "job"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(f"gpulab: error: {line}")


def test_a_taken_port_on_a_node_of_several_is_one_line(cpu_only):
    with socket.socket() as held:
        held.bind(("", 0))
        port = held.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} on this node is taken"):
            T.launch_tf(LaunchSpec(["-m", "job"], nproc_per_node=1, nnodes="2"), "a,b", port)


def test_a_command_that_cannot_start_is_one_line(capsys):
    assert main(["launch", "--engine", "tensorflow", "--no-python", "--", "/nonexistent/trainer"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "gpulab: error: cannot start '/nonexistent/trainer': No such file or directory"


def test_a_worker_killed_by_a_signal_is_named_with_the_signal(cpu_only):
    spec = LaunchSpec(["-m", "job"], nproc_per_node=2, nnodes="2", node_rank=1)
    plan = T.plan_tf_launch(spec, hosts="a,b", environ={})
    assert T.describe_dead(plan, {1: -9}, [0]) == (
        "the job failed: worker 3 (node 1, local 1) was killed by SIGKILL; worker(s) 2 stopped by the "
        "launcher; each worker's own output is above"
    )


def test_without_torch_the_gpus_are_nvmls_as_cuda_visible_devices_narrows_them(monkeypatch):
    """A TensorFlow install has no torch to count GPUs with: NVML counts them (one worker per GPU)."""
    import sys

    from gpulab.distributed import launch as L
    from gpulab.hardware import nvml

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError, as without it
    monkeypatch.setattr(nvml, "physical_gpu_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert L.local_accelerator() == ("cuda", 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert L.local_accelerator() == ("cuda", 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert L.local_accelerator() == ("cpu", 0)
    monkeypatch.setattr(nvml, "physical_gpu_count", lambda: 0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert L.local_accelerator() == ("cpu", 0)
