"""Fixtures of the tracker tests: a real ``mlflow server`` on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on 127.0.0.1 and a free port (SQLite store, artifacts proxied by the server),
    up once its /health answers (bounded), stopped with its whole process group at the end."""
    port = _free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
           "--artifacts-destination", str(tmp_path / "server-artifacts")]  # fmt: skip
    log = (tmp_path / "server.log").open("w")
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")  # no job-runner process: unused here
    server = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # it took 92 s to answer at load 12 on 2 cores
        while True:
            if server.poll() is not None:
                pytest.fail(
                    f"mlflow server exited {server.returncode}: {(tmp_path / 'server.log').read_text()[-2000:]}"
                )
            try:
                if _get(f"{url}/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"mlflow server not healthy in 180 s: {(tmp_path / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
