"""The trained model again, from a run directory or a checkpoint: recipe + options from the checkpoint's
own record (``state.pt``'s ``trajectory``, else the run's ``summary.json``), weights from
``model.safetensors``. A recipe those files name is code: it is imported only as the trust rule allows
(``core/recipes/trust.py``).

The checkpoint's MANIFEST is verified before anything is built; a tampered or truncated checkpoint is
refused, never replaced by an older one without saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from gpulab.artifact.run_record import checkpoint_root, recorded_recipe, run_engine, run_summary
from gpulab.checkpoint.io import STATE
from gpulab.core.recipes.trust import RecipeTrust, check_recorded
from gpulab.errors import CheckpointError, ConfigError


@dataclass
class Source:
    """A rebuilt model in eval mode, and where it came from."""

    model: nn.Module
    recipe: str
    options: dict[str, Any]
    checkpoint: Path
    step: int | None
    run_dir: Path | None
    engine: str
    val_data: Any
    model_inputs: list[str] | None = None  # the run's settings of the same names (runtime/signature.py)
    model_output: str | None = None


def verified_checkpoint(path: Path):
    """The checkpoint meant by ``path``, its MANIFEST verified; the newest one for a root."""
    from gpulab.checkpoint.read import verified
    from gpulab.engines.torch.state.api import read_verified_checkpoint

    directory = verified(path)  # the step `latest` names, refused if it fails: never an older one silently
    ckpt = read_verified_checkpoint(directory)
    if ckpt.layout != "full":
        raise CheckpointError(
            f"{directory} holds a sharded (FSDP) model; export reads a full model.safetensors: resume it "
            "with one process (strategy single) and save, or export from a non-sharded run"
        )
    return ckpt


def recipe_of(ckpt, run_dir: Path | None, trust: RecipeTrust) -> tuple[str, dict[str, Any]]:
    """The recipe to rebuild ``ckpt`` with, once the trust rule allows importing it."""
    found = recorded_recipe(ckpt.state.get("trajectory"), ckpt.path / STATE, run_dir)
    if found is None:
        raise ConfigError(
            f"{ckpt.path}: the checkpoint does not record its recipe (it was not written by `gpulab train`); "
            "export the run directory whose summary.json names it"
        )
    name, options, source = found
    return check_recorded(name, source, trust), options


def rebuild(path: str | Path, trust: RecipeTrust = RecipeTrust()) -> Source:
    """Verify, then rebuild: recipe (with its validation data) and the checkpoint's weights. A recipe the
    files name is imported only as ``trust`` allows (``core/recipes/trust.py``)."""
    from gpulab.core.recipes.base import load_recipe
    from gpulab.engines.torch.state.api import apply_model_state

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such run directory or checkpoint")
    root, run_dir = checkpoint_root(path)
    ckpt = verified_checkpoint(root)
    name, options = recipe_of(ckpt, run_dir, trust)
    recipe = load_recipe(name, options)
    apply_model_state(recipe.model, ckpt.model_state)
    recipe.model.eval()  # dropout off: an export computes inference
    return Source(
        model=recipe.model,
        recipe=name,
        options=options,
        checkpoint=ckpt.path,
        step=ckpt.meta.get("step"),
        run_dir=run_dir,
        engine=run_engine(run_dir) if run_dir else "torch",
        val_data=recipe.val_data,
        **signature_settings(run_dir),
    )


def signature_settings(run_dir: Path | None) -> dict[str, Any]:
    """``model_inputs``/``model_output`` as the run set them (summary.json's config): values, not code."""
    config = ((run_summary(run_dir) if run_dir else None) or {}).get("config") or {}
    inputs, output = config.get("model_inputs"), config.get("model_output")
    return {
        "model_inputs": [str(k) for k in inputs] if isinstance(inputs, list) else None,
        "model_output": str(output) if isinstance(output, str) else None,
    }
