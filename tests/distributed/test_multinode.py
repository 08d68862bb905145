"""Two nodes, really: two network namespaces joined by a veth pair, one `gpulab launch` in each.

Node A (192.168.77.1) hosts the c10d rendezvous (--node-rank 0), node B (192.168.77.2) joins it; one
worker per node trains the ``mlp`` DDP job (``launch_job.py train``) with gloo across the link. Rank 1
SIGKILLs itself once, before step 17: both nodes' launchers restart their workers, which resume from
the step-15 checkpoint. The result must equal an uninterrupted two-process single-node run bit for bit. The addresses are a private /30 that
exists only inside the namespaces this test creates (and deletes). Needs root and iproute2; where
namespaces cannot be created the test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_job import JOB, TRAIN, job_env, reference_run  # noqa: E402

ADDR = {"a": "192.168.77.1", "b": "192.168.77.2"}
PORT = 29400


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def two_nodes():
    """{node: (namespace, veth name)}; the namespaces (and with them the veth pair) go away afterwards."""
    if shutil.which("ip") is None:
        pytest.skip("multi-node test needs iproute2 (`ip`), which is not installed")
    tag = os.getpid()
    nodes = {n: (f"gpulab-{tag}-{n}", f"gv{tag}{n}") for n in ADDR}
    created = []
    try:
        for ns, _ in nodes.values():
            r = _ip("netns", "add", ns)
            if r.returncode != 0:
                pytest.skip(f"cannot create network namespaces here (needs root): {r.stderr.strip()}")
            created.append(ns)
        (ns_a, veth_a), (ns_b, veth_b) = nodes["a"], nodes["b"]
        steps = [
            ("link", "add", veth_a, "type", "veth", "peer", "name", veth_b),
            ("link", "set", veth_a, "netns", ns_a),
            ("link", "set", veth_b, "netns", ns_b),
        ]
        for n, (ns, veth) in nodes.items():
            steps += [
                ("-n", ns, "addr", "add", f"{ADDR[n]}/30", "dev", veth),
                ("-n", ns, "link", "set", veth, "up"),
                ("-n", ns, "link", "set", "lo", "up"),
            ]
        for step in steps:
            r = _ip(*step)
            if r.returncode != 0:
                pytest.skip(f"cannot set up the veth pair (`ip {' '.join(step)}`): {r.stderr.strip()}")
        yield nodes
    finally:
        for ns in created:
            _ip("netns", "del", ns)


def _node_cmd(ns: str, node_rank: int, local_addr: str, out: Path) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "gpulab", "launch",
            "--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "1",
            "--rdzv-endpoint", f"{ADDR['a']}:{PORT}", "--rdzv-id", "multinode-test",
            "--local-addr", local_addr, "--rdzv-connect-timeout", "30", "--max-restarts", "2",
            "--", JOB, "train", str(out), *TRAIN, "--kill-at", "17", "--kill-rank", "1"]  # fmt: skip


def _stop(procs: dict[str, subprocess.Popen]) -> dict[str, tuple[str, str]]:
    """SIGTERM first (the launcher then stops its workers, which run in their own sessions), then kill."""
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    outs = {}
    for n, p in procs.items():
        try:
            outs[n] = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            outs[n] = p.communicate()
    return outs


@pytest.mark.distributed
def test_two_namespaces_train_like_one_node_with_two_processes(two_nodes, tmp_path_factory):
    out = tmp_path_factory.mktemp("multinode")
    procs: dict[str, subprocess.Popen] = {}
    try:
        # Node B first: a joining node waits for node 0's store to answer (--rdzv-connect-timeout).
        for n, rank in (("b", 1), ("a", 0)):
            ns, veth = two_nodes[n]
            env = job_env(GLOO_SOCKET_IFNAME=veth)  # gloo's traffic goes over the veth pair
            procs[n] = subprocess.Popen(_node_cmd(ns, rank, ADDR[n], out), env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        results = {n: p.communicate(timeout=120) for n, p in procs.items()}
    except subprocess.TimeoutExpired:
        outs = _stop(procs)
        pytest.fail(
            "multi-node run timed out; " + "; ".join(f"node {n}: {e[-2000:]}" for n, (_, e) in outs.items())
        )
    finally:
        _stop(procs)
    for n, p in procs.items():
        assert p.returncode == 0, f"node {n}: {results[n][1][-3000:]}"
        # Workers' own tracebacks (the killed peer's neighbour) are prefixed [rankN]; the launchers print none.
        assert not [line for line in results[n][1].splitlines() if line.startswith("Traceback")]
    # One restart is the kill; a second is allowed because gloo, rarely, aborts a worker at start-up in
    # these namespaces ("terminate called without an active exception"), which torchrun also restarts.
    meta = json.loads((out / "final.json").read_text())
    assert (out / "killed_rank1_at_step17").exists()
    # (Not TORCHELASTIC_RESTART_COUNT: each node's agent counts its own restarts, and node A's may
    # count the restart as a membership change, not a failure.)
    assert meta["world_size"] == 2 and meta["resumed_from"] >= 15

    reference = reference_run(tmp_path_factory.mktemp("launch"))
    got = torch.load(out / "final.pt", weights_only=True)
    want = torch.load(reference / "final.pt", weights_only=True)
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in got)
