"""``aoti``: an AOTInductor package (``.pt2`` with compiled C++/kernels), loadable without the model's
Python code; needs a C++ compiler at export time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.formats.base import (
    Runner,
    export_program,
    output_path,
    torch_internal_warnings_quiet,
)
from gpulab.errors import MissingPackageError

NAME, SUFFIX, RUNTIME = "aoti", ".aoti.pt2", "AOTInductor (aoti_load_package)"
REQUIRED_SUFFIX = ".pt2"  # aoti_load_package refuses any other name


def compiler() -> str | None:
    """The C++ compiler Inductor would use: $CXX, else the first of g++, clang++, c++ on PATH."""
    named = os.environ.get("CXX")
    if named:
        return shutil.which(named)
    return next((found for c in ("g++", "clang++", "c++") if (found := shutil.which(c))), None)


def available() -> None:
    if compiler() is None:
        raise MissingPackageError(
            "format aoti needs a C++ compiler (g++ or clang++ on PATH, or $CXX), and none was found; "
            "fix: install one (apt-get install g++) or use --format exported"
        )


def write(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> dict:
    program, sequence = export_program(model, example, dynamic, NAME)
    with torch_internal_warnings_quiet():  # torch's LeafSpec deprecation, from its copy of the program
        torch_private.aoti_compile_and_package(program, str(output_path(out)))
    return {"compiler": compiler(), "sequence_dim": sequence}


def load(path: Path) -> Runner:
    compiled = torch_private.aoti_load_package(str(path))
    return lambda *inputs: compiled(*inputs)
