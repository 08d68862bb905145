"""Keeping a single-node job's listening sockets on the loopback interface.

What a one-node job opens, and how each is held to loopback (torch 2.13's sources):

- c10d ``TCPStore`` servers (torchrun's rendezvous store in the launcher, the process group's store in
  rank 0) listen on every interface whatever host they are given: both backends bind the wildcard
  address (``::``, dual stack, then ``0.0.0.0``) on the port. No option or variable changes that; the one
  way in is ``master_listen_fd``, a socket bound by the caller that the server takes over.
  ``loopback_store`` binds that socket to the loopback address.
- torchrun's rendezvous backend creates its own ``TCPStore(host, port, is_master=True, multi_tenant=True)``.
  A multi-tenant server is shared, per port, by every store of the process, so a loopback server created
  first on that port is the one the rendezvous uses (``launch.py`` keeps it alive for the launch).
- Gloo's and NCCL's own sockets follow ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``; without them they
  use the address the hostname resolves to. ``loopback_interface_env`` names the loopback interface.

A multi-node job keeps the addresses the user gives: none of this applies there.
"""

from __future__ import annotations

import ipaddress
import socket
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads lazily: the launcher imports this module before it quiets torch's logs
    import torch.distributed as dist

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's own server socket does
        sock.bind((LOOPBACK if host == "localhost" else host.strip("[]"), port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def loopback_store(
    host: str, port: int, world_size: int | None, timeout: timedelta, *, wait_for_workers: bool = False
) -> dist.TCPStore:
    """A multi-tenant ``TCPStore`` server listening on ``host`` (a loopback address) only; port 0: any.

    Raises ``OSError`` (errno EADDRINUSE) when the port is taken, before any server starts.
    """
    import torch
    import torch.distributed as dist

    sock = _listener(host, port)
    port = sock.getsockname()[1]
    # The server takes the socket over (and closes it): hand it the descriptor, not the Python object.
    # torch < 2.8's libuv server did not accept a descriptor; its older server did.
    libuv = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 8)
    return dist.TCPStore(
        LOOPBACK if host == "localhost" else host.strip("[]"),
        port,
        world_size,
        True,
        timeout,
        wait_for_workers=wait_for_workers,
        multi_tenant=True,
        master_listen_fd=sock.detach(),
        use_libuv=libuv,
    )


def loopback_interface() -> str | None:
    """The name of the loopback interface (``lo`` on Linux, ``lo0`` on macOS), or None if none is found."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def loopback_interface_env(backend: str) -> dict[str, str]:
    """``GLOO_SOCKET_IFNAME`` (and for NCCL ``NCCL_SOCKET_IFNAME``) set to the loopback interface."""
    name = loopback_interface()
    if name is None:
        return {}
    env = {"GLOO_SOCKET_IFNAME": name}
    if backend == "nccl":
        env["NCCL_SOCKET_IFNAME"] = name  # bootstrap and proxy sockets; the GPUs talk over P2P/SHM
    return env
