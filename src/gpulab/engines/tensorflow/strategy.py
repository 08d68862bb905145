"""Strategies on TensorFlow: ``single`` (OneDeviceStrategy), ``mirrored`` (MirroredStrategy over this
machine's GPUs, or over logical CPUs), ``multiworker`` (MultiWorkerMirroredStrategy; each worker's
``TF_CONFIG`` says who it is, as ``gpulab launch --engine tensorflow`` sets it). ``auto``: multiworker when
``TF_CONFIG`` names more than one worker, else single.

``torch``'s ddp/fsdp2/dp are refused before this runs (``config.check_engine``). ParameterServerStrategy is
not offered: it needs a coordinator loop (``ClusterCoordinator.schedule``) unlike the others' step.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any


@dataclass
class TfStrategy:
    name: str
    strategy: Any
    rank: int  # this worker's index (0 on one machine): worker 0 writes the shared files
    num_workers: int

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def is_rank_zero(self) -> bool:
        return self.rank == 0


def tf_config_task(environ: dict[str, str] | None = None) -> tuple[int, int]:
    """(this worker's index, number of workers) from ``TF_CONFIG``; (0, 1) without it."""
    raw = (os.environ if environ is None else environ).get("TF_CONFIG")
    if not raw:
        return 0, 1
    config = json.loads(raw)
    cluster = config.get("cluster", {})
    workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
    task = config.get("task", {})
    index = int(task.get("index", 0)) + (1 if task.get("type") == "worker" and cluster.get("chief") else 0)
    return index, max(workers, 1)


def make_strategy(tf: Any, name: str, device: str) -> TfStrategy:
    rank, workers = tf_config_task()
    if name == "auto":
        name = "multiworker" if workers > 1 else "single"
    if name == "single":
        return TfStrategy(name, tf.distribute.OneDeviceStrategy(device), rank, workers)
    if name == "mirrored":
        kind = "GPU" if device.startswith("/GPU") else "CPU"
        devices = [d.name for d in tf.config.list_logical_devices(kind)]
        return TfStrategy(name, tf.distribute.MirroredStrategy(devices), rank, workers)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.AUTO
    )
    return TfStrategy(
        name, tf.distribute.MultiWorkerMirroredStrategy(communication_options=options), rank, workers
    )
