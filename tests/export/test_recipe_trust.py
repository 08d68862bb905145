"""Files never decide what code runs (``core/recipes/trust.py``): a checkpoint, a summary.json or an
.export.json that names a ``module:function`` recipe is refused in one line naming the module, on every
verb that reads one, unless the user repeats the name (``--recipe``) or passes ``--trust-recipe``.

The payload is the one the fault-injection trial used: plain strings (so ``weights_only`` admits it) that
make ``logging.config.dictConfig`` call ``os.system``, with the MANIFEST rewritten to match."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpulab.checkpoint.io import write_manifest
from gpulab.cli import main

PAYLOAD = "logging.config:dictConfig"


def payload_options(marker: Path) -> dict:
    return {"version": 1, "handlers": {"h": {"()": "os.system", "command": f"touch {marker}"}}}


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err.strip()


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, ignore=shutil.ignore_patterns("export"))
    return to


def _steps(run: Path) -> list[Path]:
    return sorted((run / "checkpoints").glob("step-*"))


def rewrite_trajectory(step: Path, trajectory: dict | None) -> None:
    """What an attacker does: a new trajectory in state.pt (or none), and the MANIFEST rewritten to match."""
    state = torch.load(step / "state.pt", weights_only=True)
    if trajectory is None:
        state.pop("trajectory", None)
    else:
        state["trajectory"] = trajectory
    torch.save(state, step / "state.pt")
    write_manifest(step)


def _refused(code: int, err: str, source: Path, name: str = PAYLOAD) -> None:
    module = name.partition(":")[0]
    assert code == 2 and err.count("\n") == 0, err
    assert err.startswith(
        f"gpulab: error: refused: {source} names recipe {name!r} (imports module {module!r}"
    )
    assert f"(--recipe {name}) or pass --trust-recipe" in err


def test_the_payload_is_armed(tmp_path):
    """The control: called as a recipe is called, target(options), these options run the command."""
    marker = tmp_path / "ran"
    code = "import json, logging.config, sys; logging.config.dictConfig(json.loads(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, json.dumps(payload_options(marker))], capture_output=True)
    assert marker.exists()  # the command ran (dictConfig then fails on its result: too late)


def test_a_checkpoint_naming_code_runs_nothing_on_any_verb(digits_run, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    run = _copy(digits_run, tmp_path / "run")
    for step in _steps(run):
        rewrite_trajectory(step, {"recipe": PAYLOAD, "options": payload_options(marker)})
    state = _steps(run)[-1] / "state.pt"

    _refused(*_cli(capsys, "export", run, "--format", "exported")[::2], state)
    assert not (run / "export").exists()
    code, out, err = _cli(capsys, "checkpoint", "inspect", run)
    _refused(code, err, state)
    assert ": valid, names code, step" in out
    assert f"names code: {state} names recipe {PAYLOAD!r} (imports module 'logging.config'" in out
    code, out, err = _cli(capsys, "checkpoint", "inspect", run, "--json")
    report = json.loads(out)
    assert code == 2 and report["valid"] and report["names_code"] and report["recipe"] == PAYLOAD
    assert err == f"gpulab: error: {report['recipe_refused']}"
    # The weights alone: no recipe is read, nothing to refuse.
    assert _cli(capsys, "checkpoint", "export", run, "--to", tmp_path / "w.safetensors")[0] == 0
    # Resume builds the recipe the user names; the checkpoint's other recipe makes it another run.
    code, _, err = _cli(capsys, "train", "digits", "--out", run, "--resume", "latest", "--max-steps", "9")
    assert code == 2 and f"recipe {PAYLOAD!r} -> 'digits'" in err and "refused" in err
    assert not marker.exists()


def test_a_summary_naming_code_runs_nothing(digits_run, tmp_path, capsys):
    """A checkpoint without a trajectory falls back on summary.json: the same rule."""
    marker = tmp_path / "PWNED"
    run = _copy(digits_run, tmp_path / "run")
    for step in _steps(run):
        rewrite_trajectory(step, None)
    summary = json.loads((run / "summary.json").read_text())
    summary["recipe"], summary["config"]["options"] = PAYLOAD, payload_options(marker)
    (run / "summary.json").write_text(json.dumps(summary))
    _refused(*_cli(capsys, "export", run, "--format", "exported")[::2], run / "summary.json")
    code, out, err = _cli(capsys, "checkpoint", "inspect", run)
    _refused(code, err, run / "summary.json")
    assert not marker.exists()


@pytest.fixture
def own_recipe(tmp_path, monkeypatch) -> str:
    """A user's module:function recipe (digits under another name) that the user may vouch for."""
    (tmp_path / "my_digits.py").write_text(
        "from gpulab.engines.torch.recipes.digits import build as digits\n\n"
        "def build(options):\n    return digits(options)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_digits:build"


def test_the_users_word_lets_a_recipe_a_file_names_run(digits_run, tmp_path, capsys, own_recipe):
    run = _copy(digits_run, tmp_path / "run")
    for step in _steps(run):
        state = torch.load(step / "state.pt", weights_only=True)
        rewrite_trajectory(step, {**state["trajectory"], "recipe": own_recipe})
    state = _steps(run)[-1] / "state.pt"
    _refused(*_cli(capsys, "export", run, "--format", "exported")[::2], state, own_recipe)
    code, _, err = _cli(capsys, "export", run, "--format", "exported", "--recipe", "other:build")
    assert (
        code == 2 and f"--recipe 'other:build' differs from the recipe {state} names, {own_recipe!r}" in err
    )
    code, out, _ = _cli(capsys, "export", run, "--format", "exported", "--recipe", own_recipe)
    assert code == 0 and f"exported {own_recipe} (step" in out and "parity ok" in out
    artifact = run / "export" / "mine.pt2"
    code, out, _ = _cli(capsys, "export", run, "--format", "exported", "--trust-recipe", "--out", artifact)
    assert code == 0 and "parity ok" in out
    assert _cli(capsys, "checkpoint", "inspect", run, "--recipe", own_recipe)[0] == 0
    assert _cli(capsys, "checkpoint", "inspect", run, "--trust-recipe")[0] == 0
    # infer --recipe-data builds the recipe the artifact's .export.json names: the same rule.
    sidecar = Path(f"{artifact}.export.json")
    _refused(*_cli(capsys, "infer", artifact, "--recipe-data")[::2], sidecar, own_recipe)
    assert _cli(capsys, "infer", artifact, "--recipe-data", "--recipe", own_recipe)[0] == 0
    assert _cli(capsys, "infer", artifact, "--recipe-data", "--trust-recipe")[0] == 0
    # ... and an .export.json rewritten to name the payload runs nothing.
    marker = tmp_path / "PWNED"
    info = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**info, "recipe": PAYLOAD, "options": payload_options(marker)}))
    _refused(*_cli(capsys, "infer", artifact, "--recipe-data")[::2], sidecar)
    assert not marker.exists()
