"""``onnx``: ``torch.onnx.export(..., dynamo=True)`` at a stated opset, checked by ``onnx.checker``, run
back in ONNX Runtime (CPU execution provider; CUDA's where it is present and asked for)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.formats.base import Runner, need, output_path, with_sequence
from gpulab.errors import ConfigError
from gpulab.warning_filters import quiet

NAME, SUFFIX, RUNTIME = "onnx", ".onnx", "ONNX Runtime"
OPSET = 18  # the dynamo exporter's own default, read by every ONNX Runtime since 1.14


def available() -> None:
    for module in ("onnx", "onnxscript", "onnxruntime"):
        need(module, NAME)


def write(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> dict:
    onnx = need("onnx", NAME)
    # its "torchvision is not installed" line
    registration = torch_private.onnx_registration_log()
    level = registration.level
    registration.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        quiet(category=FutureWarning)  # onnxscript's own deprecations, not the user's
        quiet("# The axis name")  # ids and mask share one length
        quiet("The tensor attributes")  # an RNN's flat weights: torch's
        try:
            sequence = _export(model, example, dynamic, out)
        except OSError:  # a full disk or an unwritable place: the writer's own line (artifact/atomic.py)
            raise
        except Exception as exc:  # the dynamo exporter is torch.export inside: data-dependent control flow
            raise ConfigError(
                f"format onnx: the ONNX exporter (torch.export inside) cannot capture this model "
                f"({_cause(exc)}); data-dependent control flow (pack_padded_sequence with a lengths tensor, "
                "a branch on a tensor's value) is served by --format torchscript, which traces the example "
                "(its parity report says whether it holds)"
            ) from exc
        finally:
            registration.setLevel(level)
    try:
        onnx.checker.check_model(str(out), full_check=True)
    except Exception as exc:  # ValidationError, InferenceError: an op without this dtype at this opset
        out.unlink(missing_ok=True)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConfigError(
            f"format onnx: the exported graph fails onnx.checker at opset {OPSET} ({first}); "
            "bfloat16 convolutions have no ONNX kernel: use --precision fp32 or fp16"
        ) from None
    if sequence == "dynamic" and not _named_dim1(onnx.load(str(out))):
        sequence = "fixed (the model specialises on the example's length)"
    return {"opset": OPSET, "sequence_dim": sequence}


def _cause(exc: BaseException) -> str:
    """The innermost error's type and first line: the exporter wraps torch.export's in pages of advice."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {first}"


def _named_dim1(graph_model) -> bool:
    """Whether any graph input's dimension 1 is symbolic (a name, not a number)."""
    for value in graph_model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if len(dims) >= 2 and dims[1].dim_param:
            return True
    return False


def _export(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> str:
    """The graph written with the model's input and output names (a dict batch's keys); returns how the
    sequence dimension came out (``base.with_sequence``)."""

    def write(shapes) -> None:
        torch.onnx.export(
            model,
            example,
            str(output_path(out)),
            dynamo=True,
            opset_version=OPSET,
            input_names=list(model.input_names),
            output_names=[model.output_name],
            dynamic_shapes=shapes,
            external_data=False,  # one self-contained file: the recipes' models are far under protobuf's 2 GB
            verbose=False,
        )

    return with_sequence(write, model, example, dynamic)[1]


def providers(cuda: bool = False) -> list[str]:
    ort = need("onnxruntime", NAME)
    present = ort.get_available_providers()
    wanted = ["CUDAExecutionProvider"] * cuda + ["CPUExecutionProvider"]
    return [p for p in wanted if p in present]


def session(path: Path, cuda: bool = False):
    ort = need("onnxruntime", NAME)
    options = ort.SessionOptions()
    # Fatal only: its warnings about unused initialisers are noise here, and an error comes back as the
    # exception gpulab reports in one line (a token id out of range was also printed by ORT itself).
    options.log_severity_level = 4
    # As many threads as torch uses (gpulab bench --threads sets both), so runtimes compare like for like.
    options.intra_op_num_threads = torch.get_num_threads()
    return ort.InferenceSession(str(path), options, providers=providers(cuda))


def load(path: Path, cuda: bool = False) -> Runner:
    sess = session(path, cuda)
    names = [i.name for i in sess.get_inputs()]

    def run(*inputs: torch.Tensor) -> torch.Tensor:
        feed = {n: x.detach().cpu().numpy() for n, x in zip(names, inputs, strict=True)}
        return torch.from_numpy(sess.run(None, feed)[0])

    return run
