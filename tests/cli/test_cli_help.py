"""`--help` as a person reads it: every command's summary whole, no `<bool>` beside a flag, and each
paragraph of a docstring reflowed to the terminal rather than broken where the source line ended."""

from __future__ import annotations

import contextlib
import inspect
import io
import textwrap

import pytest
from typer.main import get_command

from gpulab.cli import app, main

VERBS = [
    "doctor",
    "train",
    "launch",
    "bench",
    "profile",
    "inspect",
    "tune",
    "checkpoint",
    "checkpoint inspect",
    "checkpoint export",
    "export",
    "infer",
]


def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--help"]) == 0
    return out.getvalue()


def test_root_help_lists_every_verb_with_its_whole_summary():
    text = _help()
    assert text.startswith("Usage: gpulab [OPTIONS] COMMAND [ARGS]...")
    commands = text.split("Commands:\n")[1].splitlines()
    assert [line.split()[0] for line in commands] == [
        "doctor",
        "train",
        "launch",
        "bench",
        "profile",
        "inspect",
        "export",
        "infer",
        "tune",
        "checkpoint",
    ]
    assert not any(line.endswith("...") for line in commands), commands


@pytest.mark.parametrize("verb", VERBS)
def test_no_bool_metavar_and_docstring_paragraphs_reflowed(verb):
    text = _help(*verb.split())
    assert "<bool>" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    command = get_command(app)
    for word in verb.split():
        command = command.commands[word]
    for paragraph in inspect.cleandoc(command.help).split("\n\n"):
        # Filled as one paragraph (greedy, to click's 78 columns), not at the docstring's line breaks.
        assert (
            textwrap.fill(" ".join(paragraph.split()), 78, initial_indent="  ", subsequent_indent="  ")
            in text
        )


@pytest.mark.parametrize("verb", ["train", "profile", "inspect"])
def test_set_shows_what_it_takes(verb):
    assert "--set KEY=VALUE" in _help(verb)


def test_bench_help_names_the_suites_as_its_arguments_take_them():
    # the summary said "accumulation, data parallel, inference runtimes" for accumulate, parallel, inference
    from gpulab.measure.suite_run import SUITE_NAMES

    text = " ".join(_help("bench").split())
    summary = text.split("Suites: ")[1].split(". Writes")[0]
    argument = text.split("(default: all): ")[1].split(". Or")[0]
    named = lambda listed: [part.split(" (")[0].strip() for part in listed.split("), ")]  # noqa: E731
    assert [n for part in named(summary) for n in part.split(", ")] == list(SUITE_NAMES), summary
    assert argument.split(", ") == list(SUITE_NAMES), argument
