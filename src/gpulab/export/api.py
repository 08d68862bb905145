"""``export``: a trained run -> an artifact in one format, loaded back in its own runtime and checked
against the eager model (``parity.py``) on the recipe's validation set or a given ``.npz``.

Order matters: the format, the engine and the optional packages are checked, then the checkpoint is
verified, and only then is a model built or a file written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulab import engines
from gpulab.config import ENGINES
from gpulab.errors import CheckpointError, ConfigError, choices
from gpulab.export import formats, parity
from gpulab.export.rebuild import file_stem, run_engine
from gpulab.train.recipes.trust import RecipeTrust

if TYPE_CHECKING:
    from gpulab.engines import Engine
    from gpulab.export import data as export_data
    from gpulab.export.formats.base import Deployable
    from gpulab.runtime.signature import Signature

# torch is imported by the torch engine's functions below only: a TensorFlow run's export needs none.

EXAMPLE_BATCH = 2  # torch.export specialises a size-1 dimension; 2 keeps the batch symbolic
PARITY_BATCH = 64
SIDECAR = ".export.json"


@dataclass
class ExportResult:
    artifact: Path
    parity: dict[str, Any]
    parity_path: Path
    info: dict[str, Any]


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


def check_engine(path: Path, fmt: str) -> Engine:
    """The engine that trained ``path`` (a checkpoint file: torch's), if it exports to ``fmt``; else one line
    naming the formats it does export to."""
    engine = engines.get(run_engine(path) if path.is_dir() else None)
    if fmt not in engine.export_formats:
        owner = next(e for e in map(engines.get, ENGINES) if fmt in e.export_formats)
        raise ConfigError(
            f"format {fmt} {owner.export_refusal} and {path} was trained with the {engine.name} engine; "
            f"valid for it: {choices(engine.export_formats)}"
        )
    return engine


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
    (``train/recipes/trust.py``); without it such a run is refused before anything is imported."""
    path = Path(path)
    trust = RecipeTrust(recipe, trust_recipe)
    engine, module, fixed = check_request(path, fmt, out, batch_dim, precision)
    request = {"out": out, "precision": precision, "input_file": input_file, "trust": trust, "output": output}
    return engine.export(path, module, fixed, **request)


def export_torch(
    path: Path,
    module: Any,
    fixed: int | None,
    *,
    out: Any,
    precision: str,
    input_file: Any,
    trust: RecipeTrust,
    output: str | None = None,
) -> ExportResult:
    """The torch engine's export (``gpulab.engines.torch``): rebuild the model, write, check parity."""
    import torch

    from gpulab.export import data as export_data
    from gpulab.export.rebuild import rebuild
    from gpulab.runtime.signature import Signature

    source = rebuild(path, trust)
    signature = Signature(source.model, source.model_inputs, output or source.model_output)
    data = (
        export_data.named_from_npz(input_file, signature)
        if input_file
        else export_data.named_from_recipe(source.val_data, source.recipe, signature)
    )
    folder = (source.run_dir or Path.cwd()) / "export"
    artifact = Path(out) if out else folder / f"{file_stem(source.recipe)}{module.SUFFIX}"
    example = export_data.example(data.inputs, fixed or EXAMPLE_BATCH)
    model = deployable(source.model, precision, data, signature, example)
    started = time.perf_counter()
    with torch.no_grad():
        facts = module.write(model, example, fixed is None, artifact)
    info = describe(module, source, precision, fixed, data, time.perf_counter() - started) | facts
    info["output"] = model.output_name
    if facts.get("sequence_dim") == "dynamic":  # as base.batch_dims marks them
        for entry, x in zip(info["inputs"], data.inputs, strict=True):
            if x.dim() >= 2 and not x.is_floating_point():
                entry["shape"][1] = "sequence"
    artifact.with_name(artifact.name + SIDECAR).write_text(json.dumps(info, indent=2) + "\n")
    report = check_parity(module, artifact, model, data.inputs, data.target, precision, fixed)
    report = {"format": module.NAME, "runtime": module.RUNTIME, "precision": precision, **report}
    report["data"] = str(input_file) if input_file else f"recipe {source.recipe} validation set"
    parity_path = parity.write(report, artifact)
    return ExportResult(artifact, report, parity_path, info)


def deployable(model, precision: str, data: export_data.Named, signature: Signature, example) -> Deployable:
    """The scriptable one-tensor ``Deployable`` where the model is one input to one tensor, else
    ``Served`` (named inputs, the predictions picked from the output)."""
    import torch

    from gpulab.export.formats.base import Deployable, Served

    plain = len(data.inputs) == 1 and not data.keyword and signature.output is None
    if plain:
        with torch.no_grad():
            plain = isinstance(model.eval()(*example[:1]), torch.Tensor)
    if plain:
        return Deployable(model, precision).eval()
    return Served(model, precision, data.names, data.keyword, signature).eval()


def check_request(path: Path, fmt: str, out, batch_dim, precision: str):
    """Everything that can be refused without reading the checkpoint: (engine, format module, fixed batch)."""
    if fmt not in formats.FORMATS:
        formats.get(fmt)  # raises: unknown format, with the valid ones
    if precision not in formats.PRECISIONS:
        raise ConfigError(f"--precision {precision!r} is invalid; valid: {choices(formats.PRECISIONS)}")
    fixed = parse_batch_dim(batch_dim)
    if not path.exists():
        raise CheckpointError(f"{path}: no such run directory or checkpoint")
    engine = check_engine(path, fmt)
    if engine.export_precisions is not None and precision not in engine.export_precisions:
        raise ConfigError(
            f"--precision {precision}: format {fmt} exports {engine.export_model}; "
            f"valid: {choices(engine.export_precisions)}"
        )
    module = formats.get(fmt)
    module.available()
    required = getattr(module, "REQUIRED_SUFFIX", None)
    if out is not None and required and not Path(out).name.endswith(required):
        raise ConfigError(f"--out {out}: format {fmt} needs a file name ending in {required}")
    return engine, module, fixed


def describe(module, source, precision: str, fixed: int | None, data, seconds: float) -> dict[str, Any]:
    """``PATH.export.json``: what was exported, from where, how; ``gpulab infer`` reads it back."""
    import torch

    return {
        "format": module.NAME,
        "runtime": module.RUNTIME,
        "recipe": source.recipe,
        "options": source.options,
        "checkpoint": str(source.checkpoint),
        "step": source.step,
        "precision": precision,
        "batch_dim": "dynamic" if fixed is None else fixed,
        "inputs": [
            {"name": name, "dtype": str(x.dtype).removeprefix("torch."), "shape": ["batch", *x.shape[1:]]}
            for name, x in zip(data.names, data.inputs, strict=True)
        ],
        "call": "keywords" if data.keyword else "positional",
        "torch": torch.__version__,
        "export_seconds": round(seconds, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def check_parity(module, artifact, model, inputs, target, precision: str, fixed: int | None) -> dict:
    """The artifact loaded back in its own runtime against the eager model, batch for batch."""
    from gpulab.export import data as export_data

    size = fixed or PARITY_BATCH
    eager = export_data.run_batched(model, inputs, size, fixed is not None)
    runner = module.load(artifact)
    got = export_data.run_batched(runner, inputs, size, fixed is not None)
    return parity.compare(eager, got, target, precision)


def sidecar_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + SIDECAR)


def read_sidecar(artifact: Path) -> dict[str, Any]:
    path = sidecar_path(artifact)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
