"""Nothing a single-node job opens listens beyond loopback (``distributed/loopback.py``).

torch's TCPStore server listens on every interface whatever host it is given; the launcher's rendezvous
store and rank 0's process-group store are the ones that did. The distributed test reads the kernel's
table of listening sockets (``/proc/net/tcp`` and ``tcp6``, state 0A) while a 2-rank ``gpulab launch``
job holds its group open, and keeps those whose inode one of the job's processes holds.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_job import JOB, job_env  # noqa: E402

from gpulab.distributed import launch as L  # noqa: E402
from gpulab.distributed.loopback import is_loopback, loopback_store  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp* write addresses as host-order 32-bit words in hex."""
    raw = bytes.fromhex(hex_addr)
    return ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))


def listening(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket held open by one of ``pids``."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                addr, port = fields[1].split(":")
                found.append((str(_address(addr)), int(port, 16)))
    return found


def descendants(root: int) -> set[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid and p not in found]
        found.update(children)
        frontier.extend(children)
    return found


def test_a_plain_tcpstore_listens_on_every_interface_and_the_loopback_store_does_not():
    import torch.distributed as dist

    plain = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=10))
    assert any(
        not ipaddress.ip_address(a).is_loopback for a, p in listening({os.getpid()}) if p == plain.port
    )
    store = loopback_store("127.0.0.1", 0, 1, timedelta(seconds=10))
    store.set("k", "v")
    assert dist.TCPStore("127.0.0.1", store.port, 1, False, timedelta(seconds=10)).get("k") == b"v"
    assert [a for a, p in listening({os.getpid()}) if p == store.port] == ["127.0.0.1"]


@pytest.mark.parametrize(("host", "expected"), [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True),
                                                ("[::1]", True), ("localhost", True), ("10.0.0.1", False),
                                                ("node0", False)])  # fmt: skip
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected


def test_single_node_plan_is_loopback_and_multi_node_keeps_the_users_address(monkeypatch):
    monkeypatch.setattr(L, "local_accelerator", lambda: ("cuda", 2))
    one = L.plan_launch(L.LaunchSpec(command=[JOB]), environ={})
    assert one.loopback and one.host == "127.0.0.1"
    assert one.env["GLOO_SOCKET_IFNAME"] == one.env["NCCL_SOCKET_IFNAME"] == "lo"
    argv = L.torchrun_argv(one, L.LaunchSpec(command=[JOB]))
    assert "--local-addr=127.0.0.1" in argv and "--rdzv-conf=is_host=true" in argv
    user = L.plan_launch(L.LaunchSpec(command=[JOB]), environ={"GLOO_SOCKET_IFNAME": "eth1"})
    assert "GLOO_SOCKET_IFNAME" not in user.env  # the user's choice wins
    spec = L.LaunchSpec(command=[JOB], nnodes="2", rdzv_endpoint="node0:29400")
    two = L.plan_launch(spec, environ={})
    assert not two.loopback and two.host == "node0" and "GLOO_SOCKET_IFNAME" not in two.env
    assert not any(a.startswith("--local-addr") for a in L.torchrun_argv(two, spec))


@pytest.mark.distributed
def test_every_socket_a_single_node_launch_listens_on_is_loopback(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "gpulab",
        "launch",
        "--nproc-per-node",
        "2",
        "--",
        JOB,
        "hold",
        str(tmp_path),
    ]
    launcher = subprocess.Popen(
        cmd, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"rank{r}.ready").exists() for r in range(2)):
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.stdout.read()[-3000:]
            time.sleep(0.1)
        pids = descendants(launcher.pid)
        sockets = listening(pids)
    finally:
        (tmp_path / "release").touch()
        output = launcher.communicate(timeout=60)[0]
    assert launcher.returncode == 0, output[-3000:]
    assert len(pids) >= 3  # the launcher and its two workers
    assert len(sockets) >= 2, sockets  # at least the rendezvous store and rank 0's group store
    assert all(ipaddress.ip_address(a).is_loopback for a, _ in sockets), sockets
    for r in range(2):
        seen = json.loads((tmp_path / f"rank{r}.ready").read_text())
        assert seen == {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo", "sum": 2.0}
