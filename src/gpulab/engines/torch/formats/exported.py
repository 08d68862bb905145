"""``exported``: a ``torch.export`` ExportedProgram saved as ``.pt2``, run back with ``torch.export.load``."""

from __future__ import annotations

from pathlib import Path

import torch

from gpulab.engines.torch.formats.base import Runner, export_program, output_path

NAME, SUFFIX, RUNTIME = "exported", ".pt2", "torch.export ExportedProgram"
REQUIRED_SUFFIX = ".pt2"  # torch.export.save refuses any other name (a 66-line traceback once)


def available() -> None:
    return None


def write(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> dict:
    program, sequence = export_program(model, example, dynamic, NAME)
    torch.export.save(program, output_path(out))
    return {"sequence_dim": sequence}


def load(path: Path) -> Runner:
    module = torch.export.load(path).module()
    return lambda *inputs: module(*inputs)
