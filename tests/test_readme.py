"""The README's pasted outputs of the cheap commands (`--help`, user mistakes, `doctor`) are what the tool
prints today, so the README cannot drift from the code unnoticed.

A command is a `$ gpulab ...` (or `.venv/bin/gpulab ...`) line of a ```text block; its output is the lines
up to the next command. A pasted line ending in `...` is a prefix of the real one. `doctor` is compared by
what does not depend on the machine: its table titles, their headers and the names of the checks.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
import torch

from gpulab.cli import main

README = Path(__file__).parents[1] / "README.md"
PROMPTS = ("$ gpulab ", ".venv/bin/gpulab ")


def _argv(line: str) -> list[str] | None:
    for prompt in PROMPTS:
        if line.startswith(prompt):
            return shlex.split(line[len(prompt) :])
    return None


def _pasted() -> list[tuple[list[str], list[str]]]:
    """(argv, pasted output lines) for every command in the README's text blocks."""
    found = []
    for block in README.read_text().split("```text\n")[1:]:
        lines = block.split("\n```", 1)[0].splitlines()
        starts = [i for i, line in enumerate(lines) if _argv(line) is not None]
        for i, j in zip(starts, [*starts[1:], len(lines)], strict=False):  # each command to the next
            found.append((_argv(lines[i]), lines[i + 1 : j]))
    return found


def _cheap(argv: list[str], pasted: list[str]) -> bool:
    """--help, a user mistake (one error line, before any work) or doctor: seconds, no training."""
    return "--help" in argv or argv[0] == "doctor" or bool(pasted) and pasted[0].startswith("gpulab: error:")


CHEAP = [(argv, pasted) for argv, pasted in _pasted() if _cheap(argv, pasted)]


def _run(argv: list[str]) -> tuple[int, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(argv)
    return code, out.getvalue().splitlines()


def _same_line(pasted: str, real: str) -> bool:
    return real.startswith(pasted[:-3]) if pasted.endswith("...") else real == pasted


def _outline(lines: list[str]) -> list[tuple[str, ...]]:
    """What a doctor paste shares with any machine: titles, header cells and the check names."""
    outline: list[tuple[str, ...]] = []
    title = ""
    for line in lines:
        cells = tuple(c.strip() for c in line.strip("┃│").replace("┃", "│").split("│"))
        if line.startswith("┃"):
            outline.append(("header", *cells))
        elif line.startswith("│") and title == "Checks" and cells[0]:  # continuation lines have no name
            outline.append(("check", cells[0]))
        elif line.strip() and line[0] not in "┏┡└│":
            title = line.strip()
            outline.append(("title", title))
    return outline


def test_the_readme_pastes_cheap_commands():
    commands = [" ".join(argv) for argv, _ in CHEAP]
    assert "--help" in commands and "doctor --peak" in commands
    assert any(pasted[0].startswith("gpulab: error: unknown setting") for _, pasted in CHEAP)


@pytest.mark.parametrize(("argv", "pasted"), CHEAP, ids=[" ".join(argv) for argv, _ in CHEAP])
def test_pasted_output_matches_a_real_run(argv, pasted, monkeypatch, tmp_path):
    if any("no cuda device" in line for line in pasted) and torch.cuda.is_available():
        pytest.skip("the pasted error is for a machine without CUDA")
    # A fresh directory: what a pasted command might write does not land in the checkout.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")  # the README's pastes are 80 columns wide, as rich prints in a pipe
    if argv[0] == "doctor":
        code, real = _run([a for a in argv if a != "--peak"])
        tables = pasted[: max(i for i, line in enumerate(pasted) if line.startswith("└")) + 1]  # not --peak's
        assert ("check", "torch") in _outline(tables)
        assert _outline(real) == _outline(tables)
        return
    code, real = _run(argv)
    assert code == (2 if pasted[0].startswith("gpulab: error:") else 0)
    assert len(real) >= len(pasted), "\n".join(real)
    for expected, got in zip(pasted, real, strict=False):
        assert _same_line(expected, got), f"README: {expected!r}\nreal:   {got!r}"


def test_bench_quick_promises_the_same_time_as_its_help():
    _, help_lines = _run(["bench", "--help"])
    quick = " ".join(" ".join(help_lines).split("--quick", 1)[1].split("--device", 1)[0].split())
    claim = "about a minute on a quiet 2-core CPU"
    assert claim in quick
    assert claim in " ".join(README.read_text().split())


# Traced with fake tensors, `inspect` prints the same table on any machine: only the RAM it fits under varies.
# (A user's module:function is not in the checkout; TensorFlow's paste is left to its own engine's tests,
# which import TensorFlow in one subprocess.)
INSPECT = [
    (argv, pasted)
    for argv, pasted in _pasted()
    if argv[0] == "inspect" and ":" not in argv[1] and "tensorflow" not in argv
]


def _machine_free(line: str) -> str:
    return re.sub(r"fits under [\d,.]+ MiB", "fits under N MiB", line)


@pytest.mark.parametrize(("argv", "pasted"), INSPECT, ids=[" ".join(argv) for argv, _ in INSPECT])
def test_pasted_inspect_tables_match_a_real_run(argv, pasted, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, real = _run(argv)
    assert code == 0
    assert [_machine_free(line) for line in real] == [_machine_free(line) for line in pasted]
