"""The torch engine's export (its ``export``): the model rebuilt from the checkpoint (``rebuild.py``),
wrapped as one deployable module, written by the format's module (``formats/``), its sidecar written, then
loaded back in its own runtime and checked against the eager model (``gpulab.artifact.parity``)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from gpulab.artifact import data as export_data
from gpulab.artifact import parity
from gpulab.artifact.atomic import write_atomically, write_text
from gpulab.artifact.ownership import check_export_out
from gpulab.artifact.run_record import file_stem
from gpulab.artifact.sidecar import EXAMPLE_BATCH, PARITY_BATCH, SIDECAR, ExportResult
from gpulab.core.recipes.trust import RecipeTrust
from gpulab.engines.torch.decoder_inputs import check_decoder_inputs
from gpulab.engines.torch.formats.base import Deployable, Served
from gpulab.engines.torch.rebuild import rebuild
from gpulab.engines.torch.runtime.signature import Signature
from gpulab.engines.torch.runtime.step_call import shifts_labels


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
    source = rebuild(path, trust)
    signature = Signature(source.model, source.model_inputs, output or source.model_output)
    data = (
        export_data.named_from_npz(input_file, signature)
        if input_file
        else export_data.named_from_recipe(source.val_data, source.recipe, signature)
    )
    folder = (source.run_dir or Path.cwd()) / "export"
    artifact = Path(out) if out else folder / f"{file_stem(source.recipe)}{module.SUFFIX}"
    check_export_out(artifact, module.NAME)  # the default place too: a file there may be the user's
    example = export_data.example(data.inputs, fixed or EXAMPLE_BATCH)
    check_decoder_inputs(source.model, signature, data, example)  # T5 without decoder_input_ids: one line
    model = deployable(source.model, precision, data, signature, example)
    started = time.perf_counter()
    with torch.no_grad():
        weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        facts = write_atomically(
            artifact, lambda tmp: module.write(model, example, fixed is None, tmp), needed=weights
        )
    info = describe(module, source, precision, fixed, data, time.perf_counter() - started) | facts
    info["output"] = model.output_name
    if shifts_labels(source.model):  # a causal LM's logits at t predict the label at t+1 (infer reads it)
        info["labels_shifted"] = True
    if facts.get("sequence_dim") == "dynamic":
        # the inputs the format ran at another length (TorchScript's probe), else the token inputs, as
        # base.batch_dims makes them symbolic
        tried = info.pop("sequence_inputs", None)
        for i, (entry, x) in enumerate(zip(info["inputs"], data.inputs, strict=True)):
            if i in tried if tried is not None else x.dim() >= 2 and not x.is_floating_point():
                entry["shape"][1] = "sequence"
    write_text(artifact.with_name(artifact.name + SIDECAR), json.dumps(info, indent=2) + "\n")
    report = check_parity(
        module,
        artifact,
        model,
        data.inputs,
        data.target,
        precision,
        fixed,
        shift=info.get("labels_shifted", False),
    )
    report = {"format": module.NAME, "runtime": module.RUNTIME, "precision": precision, **report}
    report["data"] = str(input_file) if input_file else f"recipe {source.recipe} validation set"
    parity_path = parity.write(report, artifact)
    return ExportResult(artifact, report, parity_path, info)


def deployable(model, precision: str, data: export_data.Named, signature: Signature, example) -> Deployable:
    """The scriptable one-tensor ``Deployable`` where the model is one input to one tensor, else
    ``Served`` (named inputs, the predictions picked from the output)."""
    plain = len(data.inputs) == 1 and not data.keyword and signature.output is None
    if plain:
        with torch.no_grad():
            plain = isinstance(model.eval()(*example[:1]), torch.Tensor)
    if plain:
        return Deployable(model, precision).eval()
    return Served(model, precision, data.names, data.keyword, signature).eval()


def describe(module, source, precision: str, fixed: int | None, data, seconds: float) -> dict[str, Any]:
    """``PATH.export.json``: what was exported, from where, how; ``gpulab infer`` reads it back."""
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


def check_parity(
    module, artifact, model, inputs, target, precision: str, fixed: int | None, *, shift: bool = False
) -> dict:
    """The artifact loaded back in its own runtime against the eager model, batch for batch; ``shift``:
    accuracy of the logits at t against the label at t+1 (a causal LM, ``step_call.shifts_labels``)."""
    size = fixed or PARITY_BATCH
    eager = export_data.run_batched(model, inputs, size, fixed is not None)
    runner = module.load(artifact)
    got = export_data.run_batched(runner, inputs, size, fixed is not None)
    return parity.compare(eager, got, target, precision, shift=shift)
