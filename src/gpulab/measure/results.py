"""What a bench run produces, as data: rows of figures per suite, notes, plots, and the environment.

``results.json`` (``SCHEMA_VERSION`` 1)::

    {
      "schema_version": 1,
      "created": "2025-01-01T00:00:00+00:00",
      "config": {"suites": [...], "profile": "quick", "device": "cpu", "warmup": 2, "repeats": 5, ...},
      "environment": {"gpulab": ..., "torch": ..., "devices": [...], "nvml": [...], ...},
      "suites": {
        "<name>": {
          "title": str, "description": str, "status": "ok" | "error", "seconds": float,
          "rows": [{"key": {name: str|int|float}, "figures": {name: FIGURE}, "info": {name: any}}],
          "notes": [str],
          "plots": [{"file": "<name>.png", "title": str, "panels": [...]}],
          "cpu_used_by_others": float | null,  # share of the machine's CPU other processes took meanwhile
          "gpu_readings": [...]                # NVML at the end of the suite, on a GPU run
        }
      }
    }

    FIGURE = {"value": float, "unit": str, "repeats": int, "low": float, "high": float,
              "spread": "iqr" | "range" | "none", "better": "higher" | "lower" | null}

A row's ``key`` says what was measured (device, dtype, size...) and is what ``compare`` matches rows on;
``figures`` are measured numbers, each with its repeats and spread; ``info`` holds facts that are not
measurements (a flag that a precision diverged, the largest batch that fits).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpulab.errors import ConfigError

SCHEMA_VERSION = 1
RESULTS_FILE = "results.json"
_FIGURE_FIELDS = {"value", "unit", "repeats", "low", "high", "spread", "better"}

# Spread kinds: the interquartile range from 4 repeats up, min..max for 2-3, nothing for a single one.
SPREADS = ("iqr", "range", "none")
BETTER = ("higher", "lower", None)


@dataclass(frozen=True)
class Figure:
    """One measured number: the median of ``repeats`` samples, with the spread ``low..high`` around it.

    ``better`` says which direction is an improvement ("higher" for throughput, "lower" for time and
    memory, None for figures that are facts, not performance, like a loss value); compare only judges
    figures with a direction.
    """

    value: float
    unit: str
    repeats: int
    low: float
    high: float
    spread: str = "none"
    better: str | None = None

    @classmethod
    def from_samples(cls, samples: Sequence[float], unit: str, better: str | None = None) -> Figure:
        if not samples:
            raise ValueError("a figure needs at least one sample")
        xs = sorted(float(s) for s in samples)
        low, high, kind = spread_of(xs)
        return cls(statistics.median(xs), unit, len(xs), low, high, kind, better)

    @classmethod
    def single(cls, value: float, unit: str, better: str | None = None) -> Figure:
        """A figure read once (a loss after N steps, a compile time): one repeat, no spread."""
        return cls(float(value), unit, 1, float(value), float(value), "none", better)

    @classmethod
    def ratio(cls, num: Figure, den: Figure, unit: str = "x", better: str | None = "higher") -> Figure:
        """``num / den`` with the widest spread the two spreads allow (low/high, high/low)."""
        value = num.value / den.value if den.value else math.inf
        low = num.low / den.high if den.high else math.inf
        high = num.high / den.low if den.low else math.inf
        kind = num.spread if num.spread == den.spread else "range"
        return cls(value, unit, min(num.repeats, den.repeats), low, high, kind, better)

    def to_json(self) -> dict[str, Any]:
        return {k: _finite_or_none(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figure:
        nums = {k: math.nan if data[k] is None else float(data[k]) for k in ("value", "low", "high")}
        return cls(
            unit=data["unit"],
            repeats=int(data["repeats"]),
            spread=data["spread"],
            better=data["better"],
            **nums,
        )


def spread_of(xs: list[float]) -> tuple[float, float, str]:
    """(low, high, kind) of sorted samples ``xs``."""
    if len(xs) >= 4:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return q1, q3, "iqr"
    if len(xs) >= 2:
        return xs[0], xs[-1], "range"
    return xs[0], xs[0], "none"


def _finite_or_none(v: Any) -> Any:
    # JSON has no inf/NaN: a figure that could not be computed is stored as null.
    return None if isinstance(v, float) and not math.isfinite(v) else v


@dataclass
class Row:
    key: dict[str, Any]
    figures: dict[str, Figure] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": dict(self.key),
            "figures": {name: f.to_json() for name, f in self.figures.items() if f is not None},
            "info": {name: _finite_or_none(v) for name, v in self.info.items()},
        }


@dataclass
class SuiteResult:
    """What a suite function returns; the runner adds status, timing and GPU readings."""

    title: str
    description: str = ""
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[Any] = field(default_factory=list)  # gpulab.measure.plots.Plot

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "description": self.description,
            "rows": [r.to_json() for r in self.rows],
            "notes": list(self.notes),
            "plots": [p if isinstance(p, dict) else asdict(p) for p in self.plots],
        }


def gpu_readings() -> list[dict[str, Any]]:
    """NVML's reading of every GPU (clocks, power, temperature, memory); empty without NVML."""
    from gpulab.hardware import nvml

    if not nvml.nvml_status()[0]:
        return []
    return [{"index": i, **asdict(nvml.read_gpu(i))} for i in range(nvml.physical_gpu_count())]


def new_document(config: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": config,
        "environment": env,
        "suites": {},
    }


def write_results(doc: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULTS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    tmp.replace(path)  # a reader never sees half a file
    return path


def load_results(path: str | Path) -> dict[str, Any]:
    """Read and validate a results.json (a ConfigError names the first problem)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read bench results {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None
    problems = validate(doc)
    if problems:
        raise ConfigError(f"{path} is not a gpulab bench results file: {problems[0]}")
    return doc


def validate(doc: Any) -> list[str]:
    """Every way ``doc`` breaks the schema above; empty when it conforms."""
    if not isinstance(doc, dict):
        return ["top level is not an object"]
    if doc.get("schema_version") != SCHEMA_VERSION:
        return [f"schema_version is {doc.get('schema_version')!r}, this gpulab reads {SCHEMA_VERSION}"]
    problems = [f"missing {k!r}" for k in ("created", "config", "environment", "suites") if k not in doc]
    for name, suite in (doc.get("suites") or {}).items():
        problems += _validate_suite(name, suite)
    return problems


def _validate_suite(name: str, suite: Any) -> list[str]:
    if not isinstance(suite, dict):
        return [f"suite {name!r} is not an object"]
    required = ("title", "status", "rows", "notes", "plots")
    problems = [f"suite {name!r}: missing {k!r}" for k in required if k not in suite]
    for i, row in enumerate(suite.get("rows") or []):
        where = f"suite {name!r} row {i}"
        if not isinstance(row, dict) or not {"key", "figures", "info"} <= set(row):
            problems.append(f"{where}: needs key, figures and info")
            continue
        for fig_name, fig in row["figures"].items():
            problems += [f"{where} figure {fig_name!r}: {p}" for p in _validate_figure(fig)]
    for plot in suite.get("plots") or []:
        if not isinstance(plot, dict) or not plot.get("file"):
            problems.append(f"suite {name!r}: a plot without a file")
    return problems


def _validate_figure(fig: Any) -> list[str]:
    if not isinstance(fig, dict) or set(fig) != _FIGURE_FIELDS:
        return [f"needs exactly the fields {sorted(_FIGURE_FIELDS)}"]
    problems = []
    if not isinstance(fig["repeats"], int) or fig["repeats"] < 1:
        problems.append(f"repeats must be a positive integer, got {fig['repeats']!r}")
    if fig["spread"] not in SPREADS:
        problems.append(f"spread must be one of {SPREADS}, got {fig['spread']!r}")
    if fig["better"] not in BETTER:
        problems.append(f"better must be one of {BETTER}, got {fig['better']!r}")
    nums = [fig[k] for k in ("low", "value", "high")]
    if all(isinstance(x, (int, float)) for x in nums) and not nums[0] <= nums[1] <= nums[2]:
        problems.append(f"needs low <= value <= high, got {nums}")
    return problems
