"""What every tracker shares (``mlflow_tracker.py``, ``wandb_tracker.py``), below the module that picks them.

``TrackerIds``: ``OUT/trackers.json`` keeps each tracker's run id, so that a resumed run continues the same
tracker run. The file is data: a run id read from it selects a run in that tracker, nothing more.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulab.errors import ConfigError, GpulabWarning
from gpulab.redaction import redact, redacted

TRACKERS_FILE = "trackers.json"
# What a tracker's run id may look like (MLflow: 32 hex digits; W&B: 8 lower-case letters and digits).
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def cannot_start(tracker: str, where: str, exc: BaseException, fix: str) -> ConfigError:
    """A tracker that cannot open its run (a server that does not answer, no W&B login): one line."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return ConfigError(
        redact(
            f"{tracker} at {where} could not start the run ({type(exc).__name__}: {first}); fix: {fix}, "
            f"or remove {tracker} from trackers"
        )
    )


class TrackerIds:
    """``OUT/trackers.json``: ``{tracker: {"run_id": ..., ...}}``, read on resume, rewritten atomically."""

    def __init__(self, out_dir: str | None) -> None:
        self.path = Path(out_dir) / TRACKERS_FILE if out_dir else None

    def read(self, tracker: str) -> dict[str, str] | None:
        """The entry this run recorded for ``tracker``, or None (none, unreadable, or no valid run id)."""
        entry = self._all().get(tracker)
        run_id = entry.get("run_id") if isinstance(entry, dict) else None
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            return None
        return {k: v for k, v in entry.items() if isinstance(v, str)}

    def write(self, tracker: str, **entry: str) -> None:
        if self.path is None:
            return
        data = {**self._all(), tracker: entry}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.path)

    def _all(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def flat_settings(settings: Any, trajectory: dict[str, Any]) -> dict[str, Any]:
    """The resolved settings and the recipe with its options, as ``{"a.b": value}`` (tracker parameters),
    with no credential from a URI (``redaction.py``)."""
    return _flatten(redacted({**settings.model_dump(), **trajectory}))


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics a tracker can plot: numbers, not flags."""
    return {
        k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


RUN_PREFIX = "run/"  # the fit's own figures, as summary.json holds them (see ``run_figures``)


def run_figures(result: Any) -> dict[str, float]:
    """The fit's figures (``FitResult``: samples/s over the whole timed fit, train seconds, final loss, ...)
    under ``run/``: a tracker's ``samples_per_s`` series holds each log interval's rate, and its last value
    (what a tracker's run table shows) is one interval, not the run's figure gpulab prints."""
    return {f"{RUN_PREFIX}{k}": v for k, v in numeric(result.to_json()).items()}


def closing(tracker: str, close: Callable[[], None]) -> None:
    """Close a tracker's run; a failure is one warning, so that the trackers after it still close and the
    run ends with its own line (metrics.jsonl has the records; a resume sends the tracker what it lacks)."""
    try:
        close()
    except Exception as exc:
        first = redact((str(exc).strip().splitlines() or [""])[0][:300])
        warnings.warn(
            f"{tracker}: could not close its run ({type(exc).__name__}: {first}); "
            "it may lack the last records",
            GpulabWarning,
            stacklevel=2,
        )
