"""What every export format provides, and the pieces they share.

A format writes an artifact from a ``Deployable`` module and example inputs, and loads one back as a
``Runner``: a function from CPU tensors to one CPU tensor, run by the format's own runtime (never by the
Python model it came from), so parity compares what a serving system would compute.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpulab.artifact.formats import PRECISIONS
from gpulab.errors import ConfigError, MissingPackageError
from gpulab.warning_filters import quiet

Runner = Callable[..., torch.Tensor]
PIP_EXPORT = "pip install 'gpulab[export]'"
DTYPES = dict(zip(PRECISIONS, (torch.float32, torch.bfloat16, torch.float16), strict=True))


class Deployable(nn.Module):
    """The model as deployed: float inputs cast to the export precision inside, the output returned as
    float32, so every runtime (NumPy-fed ONNX Runtime included, which has no bfloat16) is called alike.
    This one serves a model of one tensor in and one tensor out (scriptable); ``Served`` any other."""

    input_names: tuple[str, ...] = ("input",)
    output_name = "output"

    def __init__(self, model: nn.Module, precision: str = "fp32") -> None:
        super().__init__()
        self.dtype = DTYPES[precision]
        self.model = model.to(self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # one named input: TorchScript has no *args
        if x.is_floating_point():
            x = x.to(self.dtype)
        return self.model(x).float()


class Served(Deployable):
    """A model of several or named inputs, or whose output is not one tensor: called with its inputs in
    ``input_names`` order, by keyword (a dict-batch model) or by position, and answering its
    predictions (``signature.predictions``: the logits of a Hugging Face output, a tuple's first item...)."""

    def __init__(
        self, model: nn.Module, precision: str, names: list[str], keyword: bool, signature: Any
    ) -> None:
        super().__init__(model, precision)
        self.input_names, self.keyword, self.signature = tuple(names), keyword, signature
        self.output_name = signature.output or "logits"

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        inputs = tuple(x.to(self.dtype) if x.is_floating_point() else x for x in inputs)
        if self.keyword:
            output = self.model(**dict(zip(self.input_names, inputs, strict=True)))
        else:
            output = self.model(*inputs)
        return self.signature.predictions(output).float()


def batch_dims(
    example: tuple[torch.Tensor, ...], dynamic: bool, model: nn.Module | None = None, seq: bool = False
) -> Any:
    """torch.export's dynamic_shapes: dimension 0 of every input is the same symbolic batch; with ``seq``,
    dimension 1 of every integer or boolean input of 2+ dimensions (token ids, attention masks) is a
    symbolic sequence length whose range torch.export reads from the model (``Dim.AUTO``: a BERT's
    position table bounds it at its size); a model that fixes the length makes it fixed again."""
    if not dynamic:
        return None
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    specs = []
    for x in example:
        spec = {0: batch}
        if seq and x.dim() >= 2 and not x.is_floating_point():
            spec[1] = torch.export.Dim.AUTO
        specs.append(spec)
    return (tuple(specs),) if isinstance(model, Served) else tuple(specs)  # Served takes *inputs


def has_sequence(example: tuple[torch.Tensor, ...]) -> bool:
    """Whether any input would get a symbolic sequence dimension (``batch_dims``' rule)."""
    return any(x.dim() >= 2 and not x.is_floating_point() for x in example)


def need(module: str, fmt: str, pip: str = PIP_EXPORT) -> Any:
    """Import an optional package, or say in one line which is missing and the pip line that fixes it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingPackageError(
            f"format {fmt} needs the Python package {module!r}, which is not installed ({exc}); fix: {pip}"
        ) from None


def with_sequence(write: Callable[[Any], Any], model: nn.Module, example, dynamic: bool) -> tuple[Any, str]:
    """``write(dynamic_shapes)`` with a symbolic sequence length where the inputs have one, and again
    with a fixed one where the model does not allow it (a length it specialises on): (result, how the
    sequence dimension came out: ``dynamic``, ``fixed (why)`` or ``none``)."""
    if not (dynamic and has_sequence(example)):
        return write(batch_dims(example, dynamic, model)), "none"
    try:
        return write(batch_dims(example, dynamic, model, seq=True)), "dynamic"
    except Exception as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return write(batch_dims(example, dynamic, model)), f"fixed ({type(exc).__name__}: {why})"


def export_program(model: nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, fmt: str):
    """``torch.export`` of the model, with how its sequence dimension came out; a model it cannot
    capture is named in one line, with the formats that may still serve it."""

    def capture(shapes):
        return torch.export.export(model, example, dynamic_shapes=shapes, strict=False)

    try:
        program, sequence = with_sequence(capture, model, example, dynamic)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConfigError(
            f"format {fmt}: torch.export cannot capture this model ({type(exc).__name__}: {first}); "
            "try --format onnx or torchscript (they capture differently), or --batch-dim N for a fixed batch"
        ) from exc
    if sequence == "dynamic" and not symbolic_sequence(program):  # Dim.AUTO kept it fixed
        sequence = "fixed (the model specialises on the example's length)"
    return program, sequence


def symbolic_sequence(program) -> bool:
    """Whether any user input of ``program`` kept a symbolic dimension 1."""
    users = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" and node.name in users else None
        if isinstance(val, torch.Tensor) and val.dim() >= 2 and isinstance(val.shape[1], torch.SymInt):
            return True
    return False


def output_path(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


# torch's own deprecation, raised inside torch when it copies an ExportedProgram (AOTInductor's packaging
# deep-copies it; its pytree LeafSpec warns on construction): nothing a user's code or gpulab's calls
# can change, so it is silenced there, and only it.
TORCH_LEAFSPEC = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


@contextlib.contextmanager
def torch_internal_warnings_quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        quiet(TORCH_LEAFSPEC, FutureWarning)
        yield
