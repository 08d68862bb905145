"""One torch cell through the real CLI, each run a process forked from the tests' fork server: train to its
end (exit within 30 s of it), inspect, then the cell's verb (kill -9 and resume, export and infer with an
independent reload, tune, profile)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import torch
from lane import (
    CHECKPOINT_EVERY,
    HERE,
    PAUSE,
    Verdict,
    ends_after_summary,
    latest_checkpoint,
    logged,
    train_argv,
    wait_for,
    write_module,
)
from safetensors.torch import load_file
from setups import Cell

FORMATS = {"exported": ".pt2", "onnx": ".onnx", "torchscript": ".torchscript.pt"}  # aoti: a C++ build each


def fork(server, argv: list[str], where: Path, name: str):
    return server.start("gpulab.cli:main", argv, stderr=where / f"{name}.stderr", cwd=where, session=True,
                        path=[str(HERE), str(where)])  # fmt: skip


def finished(server, argv: list[str], where: Path, name: str) -> tuple[int, str]:
    proc = fork(server, argv, where, name)
    _, err = proc.communicate(timeout=240)
    return proc.returncode, err


def run_cell(server, cell: Cell, where: Path) -> Verdict:
    verdict = Verdict(cell)
    recipe = write_module(cell, where)
    pause = ("--set", f"options.pause={PAUSE}") if cell["verb"] == "resume" else ()
    proc = fork(server, train_argv(cell, "run", *pause), where, "train")
    code, err = ends_after_summary(proc, where / "run", f"{cell.id} train")
    if verdict.step("train", code, err):
        code, err = finished(server, ["inspect", recipe], where, "inspect")
        verdict.step("inspect", code, err)
        VERBS[cell["verb"]](server, cell, where, recipe, verdict)
    verdict.write()
    return verdict


def resume(server, cell: Cell, where: Path, recipe: str, verdict: Verdict) -> None:
    """kill -9 after the first checkpoint, ``--resume latest``: the weights and every logged figure after
    the checkpoint are the uninterrupted run's."""
    argv = train_argv(cell, "killed", "--set", f"options.pause={PAUSE}")
    proc = fork(server, argv, where, "killed")
    first = where / "killed" / "checkpoints" / f"step-{CHECKPOINT_EVERY:08d}"
    assert wait_for(first, proc), f"ended before its first checkpoint: {proc.communicate()[1][-2000:]}"
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers or ranks, as a scheduler does
    proc.wait(60)
    assert not (where / "killed" / "summary.json").exists(), "the run ended before the kill"
    code, err = finished(server, [*argv, "--resume", "latest"], where, "resumed")
    if verdict.step("resume", code, err):
        ref, got = load_file(latest_checkpoint(where / "run") / "model.safetensors"), None
        got = load_file(latest_checkpoint(where / "killed") / "model.safetensors")
        assert ref.keys() == got.keys() and all(ref[k].equal(got[k]) for k in ref), "weights differ"
        assert logged(where / "killed", CHECKPOINT_EVERY) == logged(where / "run", CHECKPOINT_EVERY)


def eager(cell: Cell, where: Path) -> torch.nn.Module:
    from torch_parts import make_model

    model = make_model(cell["model"])
    model.load_state_dict(load_file(latest_checkpoint(where / "run") / "model.safetensors"))
    return model.eval()


def reload(fmt: str, path: Path):
    """The artifact loaded by its own runtime, not by gpulab: a function of the inputs in order."""
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return lambda *xs: torch.from_numpy(
            session.run(None, dict(zip(names, (x.numpy() for x in xs), strict=True)))[0]
        )
    module = torch.export.load(str(path)).module() if fmt == "exported" else torch.jit.load(str(path))
    return lambda *xs: module(*xs)


def export(server, cell: Cell, where: Path, recipe: str, verdict: Verdict) -> None:
    """Each format: exported, reloaded by its runtime and matching eager at batch sizes 1 and 3; then
    ``gpulab infer`` on an .npz of the export's input names."""
    from torch_parts import example, prediction

    model, served = eager(cell, where), None
    for fmt, suffix in FORMATS.items():
        art = where / "export" / f"model{suffix}"
        argv = ["export", "run", "--format", fmt, "--out", str(art), "--recipe", recipe]
        code, err = finished(server, argv, where, f"export-{fmt}")
        if not verdict.step(f"export {fmt}", code, err):
            continue
        run = reload(fmt, art)
        for n in (1, 3):
            xs = [torch.from_numpy(v) for v in example(cell["model"], n).values()]
            with torch.no_grad():
                want, got = prediction(model(*xs)), prediction(run(*xs))
            assert torch.allclose(got, want, atol=1e-5), f"{fmt} at batch {n}: {(got - want).abs().max()}"
        served = served or art
    if served is None:
        return
    import json

    names = [i["name"] for i in json.loads(Path(f"{served}.export.json").read_text())["inputs"]]
    arrays = example(cell["model"], 5)
    np.savez(where / "inputs.npz", **dict(zip(names, arrays.values(), strict=True)))
    argv = ["infer", str(served), "--input", "inputs.npz", "--out", "pred.npz"]
    code, err = finished(server, argv, where, "infer")
    if verdict.step("infer", code, err):
        with torch.no_grad():
            want = prediction(model(*(torch.from_numpy(v) for v in arrays.values())))
        assert np.allclose(np.load(where / "pred.npz")["output"], want.numpy(), atol=1e-5)


def tune(server, cell: Cell, where: Path, recipe: str, verdict: Verdict) -> None:
    argv = ["tune", recipe, "--budget", "3", "--steps", "2", "--out", "tune"]
    code, err = finished(server, argv, where, "tune")
    if verdict.step("tune", code, err):
        assert (where / "tune" / "tuned.yaml").is_file()


def profile(server, cell: Cell, where: Path, recipe: str, verdict: Verdict) -> None:
    argv = ["profile", recipe, "--warmup", "1", "--steps", "2", "--active", "1", "--no-peak", "--out", "prof"]
    code, err = finished(server, [*argv, "--precision", cell["precision"]], where, "profile")
    if verdict.step("profile", code, err):
        assert (where / "prof" / "profile.json").is_file()


VERBS = {"resume": resume, "export": export, "tune": tune, "profile": profile}
