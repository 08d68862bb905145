"""The CLI fuzz lane (issue 40): every verb's every parameter, read from the typer app itself (a new option is
covered the day it is added), given what a user gets wrong: a wrong type, a missing path, a file where a
folder goes and a folder where a file goes, an unwritable place, an empty, a huge (sparse) or an odd file, a
folder of the user's, an input .npz of strings. Each case must end in one line, exit 2, no traceback, and
every byte of the user's tree as it was (hashed before and after).

The cases run in this process through the ``cli`` fixture: a refusal costs microseconds, a framework is
imported once. A parameter whose every value is valid (a job name, a template's image) is listed in
``FREE`` with why; a verb gets a valid command line in ``VALID``, which each case changes in one place.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from tree_hash import tree_hash

from gpulab.cli import _register, app
from gpulab.engines.torch.state.api import capture_rng, save_checkpoint

QUIET = ["--set", "tensorboard=false", "--set", "mfu=false", "--set", "progress=false"]

# Each verb's command line that would run; {run}, {artifact}, {npz}, {out} are the user's tree's places.
VALID = {
    "doctor": [],
    "train": ["mlp", "--max-steps", "1", "--out", "{out}/run", *QUIET],
    "checkpoint inspect": ["{run}"],
    "checkpoint export": ["{run}", "--to", "{out}/w.safetensors"],
    "launch": ["--print", "slurm", "--", "gpulab", "train", "mlp"],
    "bench": ["matmul", "--smoke", "--device", "cpu", "--out", "{out}/bench"],
    "profile": [
        "mlp",
        "--device",
        "cpu",
        "--no-peak",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--out",
        "{out}/prof",
    ],
    "inspect": ["mlp", "--device", "cpu"],
    "export": ["{run}", "--format", "onnx", "--out", "{out}/m.onnx"],
    "infer": ["{artifact}", "--input", "{npz}", "--out", "{out}/p.npz"],
    "tune": ["mlp", "--budget", "1", "--out", "{out}/tune"],
}

# Parameters that name a place gpulab writes (the rest that take a path are read).
WRITES = {"out", "to", "log_dir"}
# Parameters that take a path, beyond those typed as one.
PATHS = {"config", "input_file", "resume", "path", "artifact", "log_dir"}
# Options any text is valid for, and why; and launch's command, which launch checks as a verb of its own.
FREE = {
    "--job-name": "a name in a printed template",
    "--image": "a container image name in a printed template",
    "--volume-claim": "a claim name in a printed template",
    "--mount-path": "a path inside a printed template's container",
    "--memory-per-node": "a quantity in a printed template, passed to the scheduler as written",
    "--rdzv-id": "any job id",
    "--recipe": "repeats what the files name; compared with it, never imported unless equal",
    "--output": "an output field's name, checked against the model's outputs after the export",
    "--set": "KEY=VALUE settings: tests/cli/test_cli_config_errors.py",
    "COMMAND": "the launched command: checked as a verb of its own (tests/cli/test_cli_start_checks.py)",
    # launch's base line prints a template (--print): these are text in it there, checked where a job starts
    "--rdzv-endpoint": "text in the printed template (host:port checked by launch's rendezvous)",
    "--local-addr": "text in the printed template",
    "--log-dir": "text in the printed template (each node makes its own)",
}
# (verb, what is wrong) that is no mistake, and why.
ACCEPTED = {
    ("train", "users-folder"): "a run's folder may hold other files; a run there before is refused "
    "unless --resume or --overwrite (core/run_dir.py), and nothing of the user's is replaced",
}


def label(param) -> str:
    """``--name`` for an option, ``NAME`` for an argument."""
    return param.opts[0] if param.param_type_name == "option" else param.name.upper()


@functools.cache  # typer builds its click app anew on each call: a second a case on a busy machine
def verbs() -> dict[str, list]:
    """Every verb (``checkpoint export`` for a sub-verb) and its click parameters, from the live app."""
    _register()
    found: dict[str, list] = {}

    def walk(command, path: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = [p for p in command.params if p.name != "help"]

    walk(typer.main.get_command(app), [])
    return found


def cases() -> list[tuple[str, str, str]]:
    """(verb, parameter, what is wrong) for every parameter of every verb."""
    out = []
    for verb, params in verbs().items():
        for param in params:
            for kind in kinds(param):
                if (verb, kind) not in ACCEPTED:
                    out.append((verb, param.name, kind))
    return out


def kinds(param) -> list[str]:
    """What a user gets wrong about ``param``, by its annotation in the typer app and its name."""
    annotation = param.type_descriptor.annotation
    if getattr(param, "is_flag", False) or annotation is bool or label(param) in FREE:
        return []
    if param.name in WRITES:
        return ["file-above", "read-only", "users-folder"]
    if param.name in PATHS or annotation is Path:
        arrays = ["strings-file"] if param.name == "input_file" else []  # an .npz of text: no model takes it
        return ["missing", "empty-file", "huge-file", "odd-file", "empty-folder", *arrays]
    if annotation in (int, float):
        return ["wrong-type"]
    return ["odd-text"]


ALL = cases()


def _save(root: Path, step: int) -> None:
    torch.manual_seed(step)
    state = {"rng": capture_rng(), "progress": {"epoch": 0, "global_step": step}}
    save_checkpoint(root, step=step, model_state=torch.nn.Linear(4, 2).state_dict(), state=state, meta={})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The user's tree: a run with checkpoints, an artifact, inputs, their own folder, and each kind of
    wrong file; ``ro``: a read-only disk (None where nothing can be mounted)."""
    top = tmp_path_factory.mktemp("fuzz")
    _save(top / "run" / "checkpoints", 1)
    (top / "m.onnx").write_bytes(b"an artifact's bytes")
    np.savez(top / "in.npz", input=np.zeros((2, 4), np.float32))
    (top / "mine").mkdir()
    (top / "mine" / "notes.txt").write_text("a user's file")
    (top / "afile").write_text("a file where a folder would go")
    (top / "empty-file").write_bytes(b"")
    (top / "odd-file").write_bytes(bytes(range(256)) * 4)
    (top / "empty-folder").mkdir()
    with open(top / "strings-file", "wb") as handle:  # np.savez to a name would add .npz
        np.savez(handle, input=np.array(["a", "bc"]), target=np.array([b"x", b"y"]))
    with open(top / "huge-file", "wb") as handle:  # 16 GiB that take no disk: a sparse file
        handle.truncate(16 << 30)
    ro = tmp_path_factory.mktemp("fuzz-ro")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)], capture_output=True
    )
    yield top, (ro if mounted.returncode == 0 else None)
    if mounted.returncode == 0:
        subprocess.run(["umount", "-l", str(ro)], check=False)


def _argv(verb: str, name: str, kind: str, top: Path, ro: Path | None) -> list[str]:
    places = {"run": top / "run", "artifact": top / "m.onnx", "npz": top / "in.npz", "out": top / "new"}
    argv = [a.format(**places) for a in VALID[verb]]
    param = next(p for p in verbs()[verb] if p.name == name)
    value = {
        "wrong-type": "abc",
        "odd-text": "nope\u00e9!",
        "missing": str(top / "nowhere" / "x"),
        "file-above": str(top / "afile" / "x"),
        "users-folder": str(top / "mine"),
        "read-only": str((ro or top) / "x"),
    }.get(kind, str(top / kind))
    if param.param_type_name == "argument":
        # the verb's own arguments come first in VALID; a list argument (bench's suites) is replaced whole
        index = [p.name for p in verbs()[verb] if p.param_type_name == "argument"].index(name)
        return [*argv[:index], value, *argv[index + 1 :]] if argv else [value]
    option = label(param)
    if option in argv:  # given in VALID: its value replaced
        at = argv.index(option)
        return [*argv[:at], option, value, *argv[at + 2 :]]
    return [option, value, *argv] if "--" in argv else [*argv, option, value]


@pytest.mark.parametrize(("verb", "name", "kind"), ALL, ids=[f"{v}:{n}:{k}" for v, n, k in ALL])
def test_a_wrong_value_is_one_line_exit_2_and_touches_nothing(world, verb, name, kind, cli, capsys):
    top, ro = world
    if kind == "read-only" and ro is None:
        pytest.skip("no read-only disk: mounting a tmpfs needs root or CAP_SYS_ADMIN")
    argv = _argv(verb, name, kind, top, ro)
    before = tree_hash(top)
    code, err = cli(*verb.split(), *argv, cwd=top)
    out = capsys.readouterr().out
    assert "Traceback" not in err, err
    assert code == 2 and err.count("\n") == 1 and err.startswith("gpulab: error: "), (code, err, out[-500:])
    assert tree_hash(top) == before, f"gpulab {verb} {' '.join(map(str, argv))} changed the user's tree"


def test_every_verb_has_a_valid_command_line():
    assert sorted(VALID) == sorted(verbs()), (
        "a verb was added or removed: give it a valid command line in VALID"
    )


if __name__ == "__main__":
    print(f"{len(ALL)} cases over {len(verbs())} verbs")  # the count docs/RELIABILITY.md gives
