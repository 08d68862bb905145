"""A rank that created a process group leaves through ``exit_without_teardown``: its exit code and its
output survive, and the interpreter's teardown (where gloo's native threads can abort the process) is
skipped -- an ``atexit`` hook, which runs at the start of that teardown, never runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(created: bool, tmp_path) -> subprocess.CompletedProcess:
    script = textwrap.dedent(
        f"""
        import atexit, pathlib, sys
        import gpulab.cli as cli
        import gpulab.engines.torch.distributed.process_group as pg
        pg._created_a_group = {created}
        atexit.register(lambda: pathlib.Path({str(tmp_path / "teardown")!r}).touch())
        cli.main = lambda argv=None: (print("done", flush=False), 3)[1]
        cli.entry()
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_a_rank_that_created_a_group_skips_the_teardown_keeping_its_code_and_output(tmp_path):
    r = _run(True, tmp_path)
    assert r.returncode == 3 and r.stdout == "done\n", r.stderr
    assert not (tmp_path / "teardown").exists()


def test_a_plain_process_exits_normally(tmp_path):
    r = _run(False, tmp_path)
    assert r.returncode == 3 and r.stdout == "done\n", r.stderr
    assert (tmp_path / "teardown").exists()
