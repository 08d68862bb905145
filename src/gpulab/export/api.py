"""``export``: a trained run -> an artifact in one format. The request is checked here; the run's engine
exports (engines/<name>/export.py): writes the artifact, loads it back in its own runtime and checks it
against the eager model (``gpulab.artifact.parity``) on the recipe's validation set or a given ``.npz``.

Order matters: the format, the engine and the optional packages are checked, then the checkpoint is
verified, and only then is a model built or a file written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpulab import engine_registry as engines
from gpulab.artifact import formats
from gpulab.artifact.array_headers import check_input_file
from gpulab.artifact.ownership import check_export_out
from gpulab.artifact.run_record import refuse_unfinished, run_engine
from gpulab.artifact.sidecar import ExportResult
from gpulab.core.recipes.trust import RecipeTrust
from gpulab.errors import CheckpointError, ConfigError, choices

if TYPE_CHECKING:
    from gpulab.engine_capabilities import Export


def parse_batch_dim(value: str | int) -> int | None:
    """``dynamic`` -> None; a positive integer -> a fixed batch."""
    if str(value) == "dynamic":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"--batch-dim {value!r} is invalid; valid: dynamic or a positive integer")
    return n


def check_engine(path: Path, fmt: str) -> Export:
    """The export of the engine that trained ``path`` (a checkpoint file: torch's), if it exports to
    ``fmt``; else one line naming the formats it does export to (or the engines that export at all)."""
    refuse_unfinished(path)
    engine = engines.get(run_engine(path) if path.is_dir() else None)
    formats.owner(fmt)  # an unknown format is told first
    exporter = engines.capability(engine, "export")
    if fmt not in exporter.formats:
        raise ConfigError(
            f"format {fmt} {formats.owner(fmt).export.refusal} and {path} was trained with the {engine.name} "
            f"engine; valid for it: {choices(exporter.formats)}"
        )
    return exporter


def export(
    path: str | Path,
    fmt: str,
    *,
    out: str | Path | None = None,
    batch_dim: str | int = "dynamic",
    precision: str = "fp32",
    input_file: str | Path | None = None,
    output: str | None = None,
    recipe: str | None = None,
    trust_recipe: bool = False,
) -> ExportResult:
    """``recipe`` / ``trust_recipe``: the user's word for a ``module:function`` recipe the run names
    (``core/recipes/trust.py``); without it such a run is refused before anything is imported."""
    path = Path(path)
    trust = RecipeTrust(recipe, trust_recipe)
    exporter, module, fixed = check_request(path, fmt, out, batch_dim, precision)
    if input_file is not None and Path(input_file).exists():  # before the checkpoint is read
        check_input_file(input_file)
    request = {"out": out, "precision": precision, "input_file": input_file, "trust": trust, "output": output}
    return exporter.run(path, module, fixed, **request)


def check_request(path: Path, fmt: str, out, batch_dim, precision: str):
    """Everything that can be refused without reading the checkpoint: (the run's engine's export, format
    module, fixed batch)."""
    if precision not in formats.PRECISIONS:
        raise ConfigError(f"--precision {precision!r} is invalid; valid: {choices(formats.PRECISIONS)}")
    fixed = parse_batch_dim(batch_dim)
    if not path.exists():
        formats.owner(fmt)  # an unknown format is told first
        raise CheckpointError(f"{path}: no such run directory or checkpoint")
    exporter = check_engine(path, fmt)  # the run's engine asked first: another is loaded only to refuse
    if exporter.precisions is not None and precision not in exporter.precisions:
        raise ConfigError(
            f"--precision {precision}: format {fmt} exports {exporter.model}; "
            f"valid: {choices(exporter.precisions)}"
        )
    if out is not None:
        check_export_out(Path(out), fmt)  # before the checkpoint is read or a framework imported
    module = formats.get(fmt)
    module.available()
    required = getattr(module, "REQUIRED_SUFFIX", None)
    if out is not None and required and not Path(out).name.endswith(required):
        raise ConfigError(
            f"--out {out}: format {fmt} needs a file name ending in {required} (e.g. {out}{required})"
        )
    return exporter, module, fixed
