"""The parent's side of the TensorFlow suites: which run, which are skipped (one line each), the worker
process, and its results merged into the run's document."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulab.engines.tensorflow.bench import TF_PREFIX, TF_SUITES
from gpulab.errors import ConfigError, GpulabError, choices


def require_tensorflow_installed() -> None:
    """Before any suite runs: TensorFlow absent is one line with the pip command, not a failed suite."""
    if importlib.util.find_spec("tensorflow") is None:
        from gpulab.engines.tensorflow.importing import INSTALL

        raise ConfigError(
            f"bench engine 'tensorflow' needs TensorFlow, which is not installed; install it with: {INSTALL} "
            "(or use --engine torch)"
        )


def skip_reason(name: str) -> str:
    return (
        f"suite {name!r} skipped on engine tensorflow: it has no TensorFlow side "
        f"(suites that have one: {choices(TF_SUITES)})"
    )


def run_tensorflow_suites(
    names: list[str], settings: dict[str, Any], doc: dict[str, Any], out: Path, log: Callable[[str], None]
) -> None:
    """Run ``names`` (those with a TensorFlow side) in a worker process; merge its suites into ``doc``."""
    from gpulab.engines.tensorflow.bench.worker import RESULT_FILE

    out.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = out / "tf-spec.json", out / RESULT_FILE
    result_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps({**settings, "suites": names, "out": str(out)}))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    cmd = [sys.executable, "-m", "gpulab.engines.tensorflow.bench.worker", str(spec_path)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
        for line in proc.stdout:  # the worker's progress lines, as the torch suites print theirs
            log(line.rstrip("\n"))
    spec_path.unlink(missing_ok=True)
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    result_path.unlink(missing_ok=True)
    if "error" in result:
        raise GpulabError(result["error"])
    doc["environment"].update(result.get("environment", {}))
    suites = result.get("suites", {})
    for name in names:
        doc["suites"][TF_PREFIX + name] = suites.get(TF_PREFIX + name) or _crashed(name, proc.returncode)


def _crashed(name: str, code: int | None) -> dict[str, Any]:
    """A suite the worker never finished (it died: out of host memory, a native crash)."""
    return {
        "title": f"{name} (TensorFlow)",
        "description": "",
        "engine": "tensorflow",
        "status": "error",
        "seconds": 0.0,
        "rows": [],
        "notes": [f"FAILED: the TensorFlow worker process exited with code {code} before this suite ended"],
        "plots": [],
    }


def run_tensorflow_side(names: list[str], ctx: Any, config: Any, doc: dict, out: Path, log: Callable) -> None:
    """The TensorFlow engine's side (``gpulab.engines.tensorflow``): its suites in a worker process."""
    doc["skipped"] = [
        {"suite": n, "engine": "tensorflow", "reason": skip_reason(n)} for n in names if n not in TF_SUITES
    ]
    for skipped in doc["skipped"]:
        log(skipped["reason"])
    tf_names = [n for n in names if n in TF_SUITES]
    if tf_names:
        spec = {"profile": config.profile, "device": str(ctx.device), "warmup": ctx.warmup}
        spec |= {
            "repeats": ctx.repeats,
            "memory_limit_bytes": ctx.memory_limit_bytes,
            "threads": config.threads,
        }
        run_tensorflow_suites(tf_names, spec, doc, out, log)
