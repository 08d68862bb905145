"""Network checks a launcher makes before starting anything, so the usual mistakes are one line.

The node that hosts the rendezvous store must be able to bind its port; a node that joins must be
able to reach it. A joining node may start before the host, so it retries for a bounded time -- name
resolution included: on Kubernetes the hosting pod's DNS name only appears once that pod is up.
"""

from __future__ import annotations

import errno
import socket
import time

from gpulab.errors import LaunchError


def is_local_address(host: str) -> bool:
    """Whether HOST names this machine (or this network namespace): one of its addresses can be bound."""
    if host == "localhost":
        return True
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
    return False


def check_port_free(host: str, port: int) -> None:
    """The hosting node binds the store's port on every interface: fail now, in one line, if taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT leftover is not "in use"
        try:
            s.bind(("", port))
        except OSError as exc:
            why = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise LaunchError(
                f"rendezvous port {port} on {host} is {why} (another job, or a launcher still running?): "
                f"pick a free port, e.g. --rdzv-endpoint {host}:{port + 1}, or stop what holds it "
                f"(`ss -ltnp 'sport = :{port}'`)"
            ) from None


def wait_for_endpoint(host: str, port: int, timeout: float) -> None:
    """Retry a TCP connect until the hosting node's store answers (it may start later) or time runs out."""
    deadline = time.monotonic() + timeout
    reason, resolved = "no answer", False
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(2.0, left))):
                return
        except socket.gaierror:  # not yet, perhaps: a pod's name is published when the pod starts
            pass
        except OSError as exc:
            reason, resolved = exc.strerror or "timed out", True  # socket timeouts carry no strerror
        if time.monotonic() >= deadline and not resolved:
            raise LaunchError(
                f"rendezvous host {host!r} could not be resolved within {timeout:g} s: check "
                "--rdzv-endpoint (the node started with --node-rank 0), or wait longer with "
                "--rdzv-connect-timeout"
            )
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"rendezvous endpoint {host}:{port} unreachable after {timeout:g} s ({reason}): start the "
                "node with --node-rank 0 first (its launcher hosts the rendezvous), check the address, port "
                "and firewall, or wait longer with --rdzv-connect-timeout"
            )
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
