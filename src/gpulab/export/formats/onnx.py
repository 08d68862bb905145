"""``onnx``: ``torch.onnx.export(..., dynamo=True)`` at a stated opset, checked by ``onnx.checker``, run
back in ONNX Runtime (CPU execution provider; CUDA's where it is present and asked for)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch

from gpulab.errors import ConfigError
from gpulab.export.formats.base import Runner, batch_dims, need, output_path

NAME, SUFFIX, RUNTIME = "onnx", ".onnx", "ONNX Runtime"
OPSET = 18  # the dynamo exporter's own default, read by every ONNX Runtime since 1.14


def available() -> None:
    for module in ("onnx", "onnxscript", "onnxruntime"):
        need(module, NAME)


def input_names(n: int) -> list[str]:
    return ["input"] if n == 1 else [f"input{i}" for i in range(n)]


def write(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> dict:
    onnx = need("onnx", NAME)
    quiet = logging.getLogger("torch.onnx._internal.exporter._registration")  # "torchvision is not installed"
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # onnxscript's own deprecations, not the user's
        try:
            _export(model, example, dynamic, out)
        finally:
            quiet.setLevel(level)
    try:
        onnx.checker.check_model(str(out), full_check=True)
    except Exception as exc:  # ValidationError, InferenceError: an op without this dtype at this opset
        out.unlink(missing_ok=True)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConfigError(
            f"format onnx: the exported graph fails onnx.checker at opset {OPSET} ({first}); "
            "bfloat16 convolutions have no ONNX kernel: use --precision fp32 or fp16"
        ) from None
    return {"opset": OPSET}


def _export(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> None:
    torch.onnx.export(
        model,
        example,
        str(output_path(out)),
        dynamo=True,
        opset_version=OPSET,
        input_names=input_names(len(example)),
        output_names=["output"],
        dynamic_shapes=batch_dims(example, dynamic),
        external_data=False,  # one self-contained file: the recipes' models are far under protobuf's 2 GB
        verbose=False,
    )


def providers(cuda: bool = False) -> list[str]:
    ort = need("onnxruntime", NAME)
    present = ort.get_available_providers()
    wanted = ["CUDAExecutionProvider"] * cuda + ["CPUExecutionProvider"]
    return [p for p in wanted if p in present]


def session(path: Path, cuda: bool = False):
    ort = need("onnxruntime", NAME)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: its warnings about unused initialisers are noise here
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
