"""Process groups: reading how we were launched, creating the default group, and tearing it down.

torchrun (and ``gpulab launch``) tell each worker who it is through environment variables: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous address ``MASTER_ADDR:MASTER_PORT``. ``LaunchEnv``
reads them once; ``init_process_group`` creates the default group with the backend that fits the
device (NCCL for CUDA, Gloo for CPU) and the collective timeout the user set.

Why a short timeout: NCCL's own default is 10 minutes (30 in some builds), so a single stuck rank used
to freeze a whole job for that long before anything was printed. ``DEFAULT_TIMEOUT_S`` is one minute,
ample for any single collective of a healthy job; checkpoint writes do not count against it because the
other ranks wait for rank 0 on the store, not inside a collective (see ``wait_for_rank_zero``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist

from gpulab.distributed.debug_dumps import make_dump_dir, trace_buffer_env
from gpulab.distributed.loopback import is_loopback, loopback_interface_env, loopback_store
from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices import accelerator, kinds
from gpulab.errors import ConfigError, DeviceError, choices

DEFAULT_TIMEOUT_S = 60.0
# The backend's own collective timeout comes this much after ``timeout_s``: the stall watchdog, which
# judges progress against ``timeout_s``, then names the stalled rank before NCCL's watchdog tears the
# process down (or Gloo raises in an unmarked wait) without naming anyone.
BACKEND_GRACE_S = 10.0
# The NCCL flight recorder keeps the last collectives of every rank and dumps them on a timeout, which
# is what names a stuck collective when the Python-level heartbeat cannot (a hang inside a kernel).
NCCL_DEBUG_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",  # on a timeout, tear the process down instead of hanging
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
}
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class LaunchEnv:
    """Who this process is in a torchrun-style launch."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
        """The launch this process is part of, or None when it was started as a single plain process.

        A partial set of variables is a mistake (a hand-rolled launch that forgot one): one clear line.
        """
        env = os.environ if environ is None else environ
        present = [name for name in _LAUNCH_VARS if name in env]
        if "WORLD_SIZE" not in env:
            return None
        missing = [name for name in _LAUNCH_VARS if name not in present and name != "LOCAL_RANK"]
        if missing:
            raise ConfigError(
                f"WORLD_SIZE is set but {', '.join(missing)} is not; launch with `gpulab launch "
                "--nproc-per-node N -- ...` or torchrun, which set all of RANK, WORLD_SIZE, LOCAL_RANK, "
                "MASTER_ADDR and MASTER_PORT"
            )
        try:
            rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
            local_rank = int(env.get("LOCAL_RANK", env["RANK"]))
            port = int(env["MASTER_PORT"])
        except ValueError as exc:
            raise ConfigError(f"launch variables must be integers: {exc}") from None
        if not 0 <= rank < world:
            raise ConfigError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
        return cls(rank, world, local_rank, env["MASTER_ADDR"], port)


def launched_world_size(environ: Mapping[str, str] | None = None) -> int:
    """WORLD_SIZE of the launch this process belongs to (1 for a plain process)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    env = os.environ if environ is None else environ
    try:  # lenient here: a stray WORLD_SIZE=1 must not break a plain run; joining a group checks it all
        return max(1, int(env.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def backend_for(device: torch.device) -> str:
    """The device's own process-group backend (the seam's ``process_group_backend``)."""
    backend = accelerator(device).process_group_backend
    if backend is None:
        able = [kind for kind, cls in kinds().items() if cls.process_group_backend]
        raise DeviceError(
            f"multi-process training on {device.type!r} is not supported; valid device types: {choices(able)}"
        )
    return backend


def rank_device(device: torch.device, local_rank: int) -> torch.device:
    """The device this rank computes on: its own GPU (``cuda:LOCAL_RANK``), or the CPU."""
    return accelerator(device).rank_device(local_rank)


@dataclass(frozen=True)
class GroupInfo:
    rank: int
    world_size: int
    local_rank: int
    created: bool  # we created the default group, so we destroy it on teardown


def init_process_group(device: torch.device, timeout_s: float) -> GroupInfo:
    """Join (or create) the default process group for ``device``; ranks come from torchrun's variables.

    A group someone already created (the user's script, a test) is used as it is and left alone on
    teardown. Otherwise the backend follows the device, and a collective times out in the backend
    ``BACKEND_GRACE_S`` after ``timeout_s``, by when the stall watchdog has named who stalled.
    """
    if not dist.is_available():
        raise DeviceError("this torch build has no torch.distributed; multi-process training needs it")
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ.get("LOCAL_RANK", rank))
        return GroupInfo(rank, world, local, created=False)
    launch = LaunchEnv.from_env()
    if launch is None:
        raise ConfigError(
            "a multi-process strategy needs several processes: launch with `gpulab launch "
            "--nproc-per-node N -- ...` (or torchrun), or use strategy single"
        )
    backend = backend_for(device)
    if is_loopback(launch.master_addr):  # one node: gloo's and NCCL's own sockets on loopback too
        for key, value in loopback_interface_env(backend).items():
            os.environ.setdefault(key, value)
    if backend == "nccl":
        for key, value in {**NCCL_DEBUG_ENV, **trace_buffer_env(os.environ)}.items():
            os.environ.setdefault(key, value)
        make_dump_dir(os.environ)
        torch.cuda.set_device(launch.local_rank)
    options = {"device_id": rank_device(device, launch.local_rank)} if backend == "nccl" else {}
    dist.init_process_group(
        backend,
        store=_next_generation_store(launch, timeout_s),
        rank=launch.rank,
        world_size=launch.world_size,
        timeout=timedelta(seconds=timeout_s + BACKEND_GRACE_S),
        **options,
    )
    global _created_a_group
    _created_a_group = True
    return GroupInfo(launch.rank, launch.world_size, launch.local_rank, created=True)


_created_a_group = False


def created_a_group() -> bool:
    """Whether this process created a process group (then ``exit_without_teardown`` is the way out)."""
    return _created_a_group


def exit_without_teardown(code: int) -> NoReturn:
    """End a rank whose work is done without the interpreter's teardown.

    Files are closed and the group is destroyed by then, but the backend's native threads may still be
    releasing the last collectives' buffers; a thread that reaches Python while the interpreter is being
    torn down aborts the whole process (SIGABRT, "terminate called without an active exception": 1 run in
    20 of two gloo ranks on a loaded 2-core machine), and torchrun then reports, and restarts, a job that
    had succeeded. Python's own exit steps that matter here -- flushing the standard streams and the
    logging handlers -- are done first.
    """
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


_base_store: dist.Store | None = None
_generation = 0


def _next_generation_store(launch: LaunchEnv, timeout_s: float) -> dist.Store:
    """The rendezvous store for a new group: one TCPStore for the process's lifetime, under a fresh
    prefix per group.

    Why not let ``env://`` create it: a process that destroys its group and creates another (two
    ``Trainer.fit`` calls in one script) would meet the *first* group's keys under the same names, still
    held by rank 0's server, and a fast rank would connect to addresses that no longer listen -- a hang
    that depends on timing. Every rank creates the same number of groups, so the prefixes agree; the
    watchdog's keys live under the prefix too, so an abort of one group never leaks into the next.
    """
    global _base_store, _generation
    if _base_store is None:
        limit = timedelta(seconds=max(timeout_s, 300.0))  # waiting for slow-starting peers is not a stall
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's agent hosts the store
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            client = dist.TCPStore(launch.master_addr, launch.master_port, None, False, limit)
            _base_store = dist.PrefixStore(f"/worker/attempt_{attempt}", client)
        elif launch.rank == 0 and is_loopback(launch.master_addr):  # torch alone would listen on all
            _base_store = loopback_store(launch.master_addr, launch.master_port, launch.world_size, limit)
        else:
            _base_store = dist.TCPStore(
                launch.master_addr,
                launch.master_port,
                launch.world_size,
                launch.rank == 0,
                limit,
                wait_for_workers=False,
                multi_tenant=True,
            )
    _generation += 1
    return dist.PrefixStore(f"gpulab/group{_generation}/", _base_store)


def destroy_process_group(info: GroupInfo) -> None:
    """Destroy the default group if we created it (a user's own group is theirs to destroy)."""
    if info.created and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def default_store() -> dist.Store:
    """The c10d key-value store behind the default group (TCPStore under torchrun), shared by all ranks."""
    return torch_private.default_store()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (bind to port 0 and let the kernel choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
