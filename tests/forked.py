"""Real processes without a fresh import each: a server process imports the heavy modules once (torch and
gpulab take seconds on 2 cores) and forks one child per run. A child is a real process: a test SIGKILLs it,
signals it and reads its exit status as it would a ``subprocess.Popen``'s. Forked from a process that only
imported, it starts from no training state, as a fresh process does.

    server = Forker(["gpulab.cli", "torch._dynamo"])  # imports once (tests/conftest.py's gpulab_server)
    child = server.start("gpulab.cli:main", argv, stderr=path, env={...}, path=[recipes])
    child.kill(); child.wait(); child.returncode     # -9, as subprocess reports it

The server checks that importing started no thread: a fork copies only the forking thread, so a lock another
thread held would stay held in the child.

One child at a time; ``python forked.py MODULE...`` is the server (stdin: one JSON request a line)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path


class Child:
    """A forked run: pid, returncode, ``poll`` / ``wait`` / ``send_signal`` / ``kill`` / ``communicate``
    as on ``subprocess.Popen``, with stderr kept in a file and stdout beside it (``stderr_text`` once
    read)."""

    def __init__(self, pid: int, stderr: Path) -> None:
        self.pid, self.stderr_path, self.returncode = pid, stderr, None
        self.stdout_path = stderr.with_name(stderr.name + ".stdout")
        self.ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        self.stderr_text = self.stderr_path.read_text()
        return self.stdout_path.read_text(), self.stderr_text


class Forker:
    def __init__(self, preload: list[str], env: dict | None = None) -> None:
        """The server imports ``preload`` in ``env`` (this process's environment if None), which its children
        inherit."""
        env = dict(os.environ if env is None else env)
        self.proc = subprocess.Popen([sys.executable, __file__, *preload], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        self.child: Child | None = None
        ready = self.proc.stdout.readline()
        assert ready == "ready\n", f"the fork server did not start: {ready!r}"

    def start(self, target: str, argv: list[str], *, stderr: Path, env: dict[str, str | None] | None = None,
              cwd: Path | None = None, session: bool = False, path: list[str] | None = None,
              environ: dict[str, str] | None = None) -> Child:  # fmt: skip
        """Fork a child that runs ``target`` ("module:function", called with ``argv``; an int it returns is
        the exit code), in ``environ`` (the whole environment, as ``subprocess``'s ``env``; the server's if
        None) with ``env`` over it (None unsets), ``path`` first on its sys.path and PYTHONPATH, in ``cwd``,
        stderr in the file ``stderr`` and stdout in ``stderr``.stdout, in a session of its own if
        ``session`` (a terminal's Ctrl-C then reaches its group, not the test's). One child at a time: one an
        earlier (failed) test left running is killed first."""
        if self.child is not None and not self.child.ended.is_set():
            self.child.kill()
            assert self.child.ended.wait(60), f"forked child {self.child.pid} outlived SIGKILL"
        request = {"target": target, "argv": [str(a) for a in argv], "env": env or {}, "path": path or [],
                   "environ": environ, "cwd": str(cwd) if cwd else None, "stderr": str(stderr),
                   "session": session}  # fmt: skip
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        word, pid = self.proc.stdout.readline().split()
        assert word == "started", word
        self.child = child = Child(int(pid), stderr)

        def ended() -> None:  # the server's next line: "ended PID CODE"
            child.returncode = int(self.proc.stdout.readline().split()[2])
            child.ended.set()

        threading.Thread(target=ended, daemon=True).start()
        return child

    def close(self) -> None:
        if self.child is not None and self.child.returncode is None:  # a failed test's
            self.child.kill()
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _serve(preload: list[str]) -> None:
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what an import prints goes to stderr, not into the protocol
    for name in preload:
        importlib.import_module(name)
    threads = os.listdir("/proc/self/task")
    assert len(threads) == 1, f"importing {preload} started threads {threads}: no fork is safe"
    sys.stdout.flush()  # nothing an import printed is left in the buffer each child inherits
    print("ready", file=protocol, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns
        print("started", pid, file=protocol, flush=True)
        _, status = os.waitpid(pid, 0)
        print("ended", pid, os.waitstatus_to_exitcode(status), file=protocol, flush=True)


def _child(request: dict) -> None:
    code = 1
    try:
        if request["session"]:
            os.setsid()
        if request["environ"] is not None:
            os.environ.clear()
            os.environ.update(request["environ"])
        for name, value in request["env"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if request["path"]:  # importable in any process this one starts
            inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
            os.environ["PYTHONPATH"] = os.pathsep.join([*request["path"], *inherited])
        if request["cwd"]:
            os.chdir(request["cwd"])
        # As a fresh ``python -m`` starts: its working directory first (the server's was tests/, its own
        # folder), then PYTHONPATH's folders.
        sys.path[0] = os.getcwd()
        sys.path[1:1] = [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path
        ]
        null = os.open(os.devnull, os.O_RDONLY)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        out, err = (os.open(request["stderr"] + end, flags, 0o644) for end in (".stdout", ""))
        os.dup2(null, 0), os.dup2(out, 1), os.dup2(err, 2)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 -- fd 0, /dev/null now; never closed
        module, function = request["target"].split(":")
        returned = getattr(importlib.import_module(module), function)(request["argv"])
        code = returned if isinstance(returned, int) else 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        # The interpreter's own exit (atexit handlers: DataLoader workers, trackers) as a process ending.
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1:])
