"""`gpulab export RUN|CHECKPOINT --format F` and `gpulab infer ARTIFACT --input FILE.npz|--recipe-data`."""

from __future__ import annotations

from pathlib import Path

import typer

from gpulab.cli.console import make_console

RECIPE_HELP = "Repeat the module:function recipe the files name, to let gpulab import it"
TRUST_HELP = "Import whatever module:function recipe the files name (only for files you trust)"


def recipe_option() -> str | None:
    return typer.Option(None, "--recipe", help=RECIPE_HELP)


def trust_option() -> bool:
    return typer.Option(False, "--trust-recipe", help=TRUST_HELP)


def export(
    path: Path = typer.Argument(..., help="A run directory (gpulab train --out) or a checkpoint directory"),
    fmt: str = typer.Option(
        ..., "--format", help="exported|onnx|torchscript|aoti; TF runs: savedmodel|tflite"
    ),
    out: Path = typer.Option(None, "--out", help="Artifact path [default: RUN/export/RECIPE.<suffix>]"),
    batch_dim: str = typer.Option("dynamic", "--batch-dim", help="dynamic, or N for a fixed batch of N"),
    precision: str = typer.Option("fp32", "--precision", help="fp32|bf16|fp16 (weights and compute)"),
    input_file: Path = typer.Option(
        None,
        "--input",
        help="Check parity on this .npz (one array per input, named as forward's arguments for a "
        "dict-batch model; 'target'/'labels' optional) [default: validation set]",
    ),
    output: str = typer.Option(
        None,
        "--output",
        help="The output field served as predictions [default: the tensor, its logits, a tuple's first]",
    ),
    recipe: str = recipe_option(),
    trust_recipe: bool = trust_option(),
) -> None:
    """Export a trained model to a deployable file, parity-checked.

    The checkpoint is verified against its manifest, the model rebuilt from the run's recipe and weights,
    exported, loaded back in the format's own runtime and run on the recipe's validation set (or --input)
    beside the eager model. Writes PATH, PATH.export.json and PATH.parity.json; exit 1 when parity fails.

    A module:function recipe the checkpoint or summary.json names is code: it is refused (exit 2) unless
    you repeat it with --recipe or pass --trust-recipe. Built-in recipes need neither.
    """
    from gpulab.artifact import parity
    from gpulab.export.api import export as run_export

    result = run_export(
        path, fmt, out=out, batch_dim=batch_dim, precision=precision, input_file=input_file,
        output=output, recipe=recipe, trust_recipe=trust_recipe,
    )  # fmt: skip
    console = make_console()
    info, report = result.info, result.parity
    extra = f", opset {info['opset']}" if "opset" in info else ""
    extra += f", {info['method']}" if "method" in info else ""
    sequence = info.get("sequence_dim", "none")
    extra += "" if sequence == "none" else f", sequence length {sequence.split(' (')[0]}"
    names = [i.get("name") for i in info.get("inputs", [])]
    extra += (
        f", inputs {', '.join(map(str, names))}" if len(names) > 1 or info.get("call") == "keywords" else ""
    )
    console.print(
        f"exported {info['recipe']} (step {info['step']}) as {info['format']} ({info['precision']}, batch "
        f"{info['batch_dim']}{extra}) in {info['export_seconds']:.1f} s: {result.artifact}",
        markup=False,
    )
    verdict = "ok" if report["passed"] else "FAILED"
    console.print(
        f"parity {verdict} on {report.get('samples')} samples ({report['data']}): "
        f"{parity.summary_line(report)}",
        markup=False,
    )
    console.print(f"wrote {result.parity_path}", markup=False)
    parity.check(report, result.artifact)


def infer(
    artifact: Path = typer.Argument(..., help="A file written by gpulab export"),
    input_file: Path = typer.Option(
        None,
        "--input",
        help="Inputs as .npz (one array per input, named as the export's inputs), .npy (one input) or a "
        "directory of NAME.npy files",
    ),
    recipe_data: bool = typer.Option(False, "--recipe-data", help="Run the recipe's validation set"),
    batch_size: int = typer.Option(
        64, "--batch-size", min=1, help="Samples per call (dynamic-batch artifacts)"
    ),
    out: Path = typer.Option(None, "--out", help="Predictions .npz [default: ARTIFACT.predictions.npz]"),
    runtime: str = typer.Option("cpu", "--runtime", help="cpu|cuda (cuda: ONNX Runtime's CUDA provider)"),
    recipe: str = recipe_option(),
    trust_recipe: bool = trust_option(),
    fmt: str = typer.Option(
        None,
        "--format",
        help="The artifact's format [default: told by its file name]; aoti (native code) only if named here",
    ),
) -> None:
    """Run an exported model on inputs; write its predictions.

    Writes an .npz with `output` (and `top1` for class scores); prints the time, throughput and, where the
    inputs carry a target, the accuracy. --recipe-data builds the recipe the artifact's .export.json
    names: a module:function one only with --recipe repeating it or --trust-recipe.
    """
    from gpulab.export.infer import infer as run_infer

    r = run_infer(
        artifact,
        input_file=input_file,
        recipe_data=recipe_data,
        batch_size=batch_size,
        out=out,
        runtime=runtime,
        recipe=recipe,
        trust_recipe=trust_recipe,
        fmt=fmt,
    )
    acc = f", accuracy {r.accuracy:.2%}" if r.accuracy is not None else ""
    rate = r.samples / r.seconds if r.seconds else float("inf")
    make_console().print(
        f"{r.samples:,} samples through {r.runtime} in {r.seconds:.3f} s ({rate:,.0f} samples/s){acc}; "
        f"wrote {r.predictions}",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    app.command()(export)
    app.command()(infer)
