"""``summary.json``: what a finished run writes, the same fields whichever engine ran it."""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gpulab
from gpulab.config.schema import RunConfig
from gpulab.core.state import FitResult
from gpulab.hardware.devices import cpu_model
from gpulab.redaction import redacted

SUMMARY_FILE = "summary.json"


def environment(versions: dict[str, str], device_name: str | None) -> dict[str, Any]:
    """Where a figure came from: the engine's ``versions`` and its device's name (None: this CPU's)."""
    return {
        "gpulab": gpulab.__version__,
        **versions,
        "python": platform.python_version(),
        "device_name": device_name or cpu_model(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def run_files(out: Path) -> list[Path]:
    """What a finished run hands its trackers as files: summary.json, metrics.jsonl, plots it wrote."""
    return [out / SUMMARY_FILE, out / "metrics.jsonl", *sorted(out.glob("*.png"))]


def write_summary(
    out: Path, config: RunConfig, result: FitResult, info: dict[str, Any], env: dict[str, Any]
) -> Path:
    summary = {
        "recipe": config.recipe,
        "engine": config.engine,
        **result.to_json(),  # batch_size as resolved (batch_size: auto gives a number)
        "accumulate": config.accumulate,
        **info,
        "environment": env,
        "config": config.model_dump(),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / SUMMARY_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(redacted(summary), indent=2) + "\n")  # no credential from a URI
    tmp.replace(path)  # a reader never sees half a summary
    return path
