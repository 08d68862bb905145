"""The README and the user guide (docs/guide/) paste real output; the pastes of the cheap commands (`--help`,
user mistakes, `doctor`, `inspect`) are what the tool prints today, so the docs cannot drift from the code
unnoticed. The README stays a ten-minute read: at most 400 lines, its two commands the Makefile's, its
Python examples run and print what it pastes.

A command is a `$ gpulab ...` (or `.venv/bin/gpulab ...`) line of a ```text block; its output is the lines
up to the next command. A pasted line ending in `...` is a prefix of the real one. `doctor` is compared by
what does not depend on the machine: its table titles, their headers and the names of the checks.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpulab.cli import main

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs" / "guide").glob("*.md"))]  # every page that pastes output
PROMPTS = ("$ gpulab ", ".venv/bin/gpulab ")


def _argv(line: str) -> list[str] | None:
    for prompt in PROMPTS:
        if line.startswith(prompt):
            return shlex.split(line[len(prompt) :])
    return None


def _pasted(page: Path = README) -> list[tuple[list[str], list[str]]]:
    """(argv, pasted output lines) for every command in a page's text blocks."""
    found = []
    for block in page.read_text().split("```text\n")[1:]:
        lines = block.split("\n```", 1)[0].splitlines()
        starts = [i for i, line in enumerate(lines) if _argv(line) is not None]
        for i, j in zip(starts, [*starts[1:], len(lines)], strict=False):  # each command to the next
            found.append((_argv(lines[i]), lines[i + 1 : j]))
    return found


def _cheap(argv: list[str], pasted: list[str]) -> bool:
    """--help, a user mistake (one error line, before any work) or doctor: seconds, no training."""
    return "--help" in argv or argv[0] == "doctor" or bool(pasted) and pasted[0].startswith("gpulab: error:")


def _name(page: Path, argv: list[str]) -> str:
    return f"{page.relative_to(ROOT)}: {' '.join(argv)}"


CHEAP = [
    (_name(page, argv), argv, pasted)
    for page in DOCS
    for argv, pasted in _pasted(page)
    if _cheap(argv, pasted)
]


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
    readme = [(argv, pasted) for argv, pasted in _pasted() if _cheap(argv, pasted)]
    commands = [" ".join(argv) for argv, _ in readme]
    assert "--help" in commands and "doctor --peak" in commands
    assert any(pasted[0].startswith("gpulab: error: unknown setting") for _, pasted in readme)
    assert any(not name.startswith("README.md") for name, *_ in CHEAP)  # the guide's pastes too


@pytest.mark.parametrize(("argv", "pasted"), [c[1:] for c in CHEAP], ids=[c[0] for c in CHEAP])
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
    assert claim in " ".join((ROOT / "docs" / "guide" / "profile-bench.md").read_text().split())


# Traced with fake tensors, `inspect` prints the same table on any machine: only the RAM it fits under varies.
# (A user's module:function is not in the checkout; TensorFlow's paste is left to its own engine's tests,
# which import TensorFlow in one subprocess.)
INSPECT = [
    (_name(page, argv), argv, pasted)
    for page in DOCS
    for argv, pasted in _pasted(page)
    if argv[0] == "inspect" and ":" not in argv[1] and "tensorflow" not in argv
]


def _machine_free(line: str) -> str:
    return re.sub(r"fits under [\d,.]+ MiB", "fits under N MiB", line)


def test_the_readme_and_the_guide_paste_inspect_tables():
    assert {name.split(":")[0] for name, *_ in INSPECT} >= {"README.md", "docs/guide/inspect.md"}


@pytest.mark.parametrize(("argv", "pasted"), [c[1:] for c in INSPECT], ids=[c[0] for c in INSPECT])
def test_pasted_inspect_tables_match_a_real_run(argv, pasted, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, real = _run(argv)
    assert code == 0
    assert [_machine_free(line) for line in real] == [_machine_free(line) for line in pasted]


def test_the_readme_is_a_ten_minute_read_and_sends_the_reader_on():
    text = README.read_text()
    assert len(text.splitlines()) <= 400, "the README is the tour: move detail into docs/guide/"
    for page in ("docs/guide/index.md", "docs/ARCHITECTURE.md", "docs/PERF.md", "docs/RELIABILITY.md"):
        assert f"]({page}" in text, page


def _make_recipe(target: str) -> list[str]:
    """The commands a Makefile target runs, as a user's shell would read them (`$(VENV)` is `.venv`)."""
    lines = (ROOT / "Makefile").read_text().split(f"\n{target}:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return [line.strip().replace("$(VENV)", ".venv").replace("$(PY)", ".venv/bin/python") for line in lines]


def test_the_readmes_two_commands_are_the_makefiles():
    text = README.read_text()
    commands = text.split("## Two commands", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in commands.splitlines()] == ["make run", "make test"]
    # `make run`'s pasted commands are the ones the Makefile runs, in its order.
    pasted = [line for line in text.splitlines() if line.startswith(".venv/bin/gpulab ")]
    assert pasted == [line for line in _make_recipe("run") if line.startswith(".venv/bin/gpulab ")]
    assert any("pytest" in line for line in _make_recipe("test"))
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()  # what CI runs


def _python_examples() -> list[tuple[str, list[str]]]:
    """(code, pasted output) of every whole program in the README: a python block that starts with
    `import` and is followed by a text block of its output."""
    found = []
    for block in README.read_text().split("```python\n")[1:]:
        code, after = block.split("\n```", 1)
        if code.startswith("import") and after.lstrip("\n").startswith("```text\n"):
            found.append((code, after.lstrip("\n")[len("```text\n") :].split("\n```", 1)[0].splitlines()))
    return found


def _shape(line: str) -> str:
    """A line with its measured numbers masked: losses, samples/s and times vary between runs and machines."""
    return re.sub(r"\d[\d,.]*", "N", line)


@pytest.mark.slow
@pytest.mark.parametrize("example", range(2))
def test_the_readmes_python_examples_run_and_print_what_it_pastes(example, tmp_path):
    code, pasted = _python_examples()[example]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "CUDA_VISIBLE_DEVICES": "",
    }  # the pastes are a CPU's
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    real = {_shape(line) for line in out.stdout.splitlines()}
    for line in pasted:
        if not line.startswith(
            "step "
        ):  # progress lines come every 10 s without a terminal: their count varies
            assert _shape(line) in real, f"README: {line!r}\nreal:   {out.stdout}"


def test_the_readme_has_two_whole_python_examples():
    assert len(_python_examples()) == 2
