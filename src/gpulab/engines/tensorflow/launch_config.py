"""``TF_CONFIG`` for a TensorFlow multi-worker job: the cluster's worker list and each worker's index.

TensorFlow has no rendezvous: every worker must be told every worker's ``host:port`` up front, and
``MultiWorkerMirroredStrategy`` reads them from ``TF_CONFIG``. The cluster has only a ``worker`` job, so
worker 0 is the chief (TensorFlow's rule when there is no ``chief`` job): it writes the shared files.

Ports:

- one node: every worker on 127.0.0.1, each on a port the kernel reports free on loopback. TensorFlow
  listens on every interface all the same: ``GrpcServer::Init`` (core/distributed_runtime/rpc/
  grpc_server_lib.cc) binds ``StrCat("0.0.0.0:", requested_port)``, taking only the port from the
  cluster address, and ``ServerDef`` has no bind address to give
  (tests/engines/tensorflow/launch/test_tflaunch_bind.py).
- several nodes (no rendezvous to learn the others' addresses): ``--hosts H0,H1,...`` in node-rank
  order and a base port P (``--base-port``); local worker ``l`` of node ``n`` listens on ``H_n:P+l``
  and has the global index ``n * nproc_per_node + l``. Every node computes the same list, so the same
  flags work on each node (only ``--node-rank`` differs); each needs ports P..P+nproc_per_node-1 free.
"""

from __future__ import annotations

import json
import socket
from contextlib import ExitStack

from gpulab.distributed.loopback import LOOPBACK

DEFAULT_TF_PORT = 23456  # the base port of a multi-node job when --base-port is not given


def free_loopback_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (all held open together, so none is handed out twice).

    They are released before the workers start: a port taken in between makes TensorFlow fail to bind,
    which ends the job naming the worker like any other failure.
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((LOOPBACK, 0))
            ports.append(s.getsockname()[1])
    return ports


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def cluster_workers(
    nproc_per_node: int, hosts: list[str] | None = None, base_port: int = DEFAULT_TF_PORT
) -> list[str]:
    """Every worker's ``host:port`` in global-index order.

    ``hosts`` None: one node on loopback with free ports; else node ``n`` is ``hosts[n]`` and its local
    worker ``l`` listens on ``base_port + l``.
    """
    if hosts is None:
        return [_hostport(LOOPBACK, p) for p in free_loopback_ports(nproc_per_node)]
    return [_hostport(h, base_port + local) for h in hosts for local in range(nproc_per_node)]


def tf_config(workers: list[str], index: int) -> str:
    """The ``TF_CONFIG`` value (JSON) for worker ``index`` of the cluster ``workers``."""
    if not 0 <= index < len(workers):
        raise ValueError(f"worker index {index} is out of range for {len(workers)} worker(s)")
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})
