"""What a single-node TensorFlow launch can and cannot hold to loopback: the addresses gpulab gives are
127.0.0.1, and TensorFlow's gRPC server listens on every interface anyway (its ``GrpcServer::Init`` binds
``"0.0.0.0:" + port``; ``ServerDef`` has no bind address). The second test is a canary: when a TensorFlow
release binds the address it is given, it fails, and the launcher can then hold the ports to loopback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from gpulab.distributed.launch import LaunchSpec
from gpulab.engines.tensorflow import launch as T

needs_tf = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")

# One worker's server on the launch's own TF_CONFIG; prints the local addresses listening on its port.
SERVE = """
import json, os, sys
import tensorflow as tf
config = json.loads(os.environ["TF_CONFIG"])
cluster = tf.train.ClusterSpec(config["cluster"])
tf.distribute.Server(cluster, job_name="worker", task_index=config["task"]["index"], protocol="grpc")
port = int(config["cluster"]["worker"][config["task"]["index"]].rsplit(":", 1)[1])
listening = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
            listening.append(local.rsplit(":", 1)[0])
print(json.dumps(listening))
"""


def test_a_single_node_launch_gives_every_worker_a_loopback_address(monkeypatch):
    monkeypatch.setattr(T, "local_accelerator", lambda: ("cpu", 0))
    plan = T.plan_tf_launch(LaunchSpec(["-m", "job"], nproc_per_node=2), environ={})
    for env in plan.env:
        workers = json.loads(env["TF_CONFIG"])["cluster"]["worker"]
        assert {w.rsplit(":", 1)[0] for w in workers} == {"127.0.0.1"}


@needs_tf
@pytest.mark.slow  # TensorFlow's import: seconds, a minute on a loaded machine
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net")
def test_tensorflow_listens_on_every_interface_whatever_address_it_is_given(monkeypatch):
    monkeypatch.setattr(T, "local_accelerator", lambda: ("cpu", 0))
    plan = T.plan_tf_launch(LaunchSpec(["-m", "job"], nproc_per_node=1), environ={})
    env = {**os.environ, **plan.env[0], "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", SERVE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    listening = json.loads(done.stdout.strip().splitlines()[-1])
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1 as /proc writes them
    # the wildcard (0.0.0.0 or ::), not loopback: TensorFlow's hard-coded bind, not gpulab's address
    assert listening and not set(listening) & loopback and set(listening) <= {"00000000", "0" * 32}
